"""The frequency-cap store of one region among several (``bidsim serve --region``).

Same API and the same check plans as ``FcapStore``; only the scripts differ
(``fcap/lua/region_*.lua``): a count writes the region's own slot of each counter and
logs the change for the replicators (``fcap.replicate``); a check reads every field
as the merge of all regions' slots (``fcap.regions``). Each region's store is one
Valkey server, reached through redis-py (no auto-pipelined connection: a region's
check is a script, and the single-region path stays exactly as it is).

Home reads (``home_reads=True``): a user's (or household's) counters are read and
written on the server of their home region (``fcap.regions.home_region``), whichever
region serves the request. Every region then sees every count of that person at once,
so replication delay stops mattering for caps, at the price of a round trip to the
home region on the bid path. Every region of a deployment must route the same way: a
slot has one writer only if a region always counts a person on the same server.

A reservation (reserve-at-bid) is never released here: a slot must only grow, or the
replicated maximum would undo the release. A lost bid's slot stays taken until its
bucket ends (the safe side, as when a release fails on one region).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any

from redis.asyncio import Redis

from fcap import keys, regions, scripts
from fcap.check_read import Reservation
from fcap.plan import Period
from fcap.store import CHECK_TIMEOUT_S, MAX_PLANS, WRITE_TIMEOUT_S, FcapStore


class RegionalFcapStore(FcapStore):
    def __init__(
        self,
        clients: Mapping[str, Redis],
        region: str,
        *,
        home_reads: bool = False,
        check_timeout_s: float = CHECK_TIMEOUT_S,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        max_plans: int = MAX_PLANS,
    ) -> None:
        """``clients``: every region's store by region name, ``region`` among them.
        Without ``home_reads`` only ``clients[region]`` is used. The store closes none."""
        if region not in clients:
            raise ValueError(f"region {region!r} has no store among {sorted(clients)}")
        super().__init__(
            clients[region],
            check_timeout_s=check_timeout_s,
            write_timeout_s=write_timeout_s,
            max_plans=max_plans,
        )
        self.region = region
        self.regions = tuple(sorted(clients))
        self.home_reads = home_reads
        self.clients = dict(clients)
        self._region_list = " ".join(self.regions)
        self._locks = {name: asyncio.Lock() for name in self.regions}

    async def start(self, timeout_s: float = 5.0) -> None:
        """Load the regional scripts on every server this store talks to."""

        async def prepare(client: Redis) -> None:
            for script in scripts.REGIONAL:
                await client.script_load(script.body)

        targets = self.regions if self.home_reads else (self.region,)
        calls = [prepare(self.clients[name]) for name in targets]
        await self._run(calls, asyncio.get_running_loop().time() + timeout_s)

    def server_of(self, subject_key: str) -> str:
        """The region whose server holds this user's or household's counters here."""
        if self.home_reads:
            return regions.home_region(subject_key, self.regions)
        return self.region

    async def release(self, reservation: Reservation, deadline: float | None = None) -> None:
        reservation.released = True  # never undone: see the module docstring

    async def _read(self, kind: str, key: str | None, period: Period, now_ms: int) -> Any:
        name = self.server_of(key or "")
        args: tuple[str | int, ...] = (
            now_ms, self.region, self._region_list, period.requests, *period.fields
        )  # fmt: skip
        hash_keys = (keys.counters(kind, key or ""), keys.CHANGE_LOG)
        return await scripts.REGION_CHECK.run(
            self.clients[name], hash_keys, args, self._locks[name]
        )

    def _count_call(
        self, kind: str, key: str, impression_id: str, args: tuple[int | str, ...]
    ) -> Coroutine[Any, Any, Any]:
        name = self.server_of(key)
        hash_keys = (
            keys.counters(kind, key),
            keys.dedup(kind, key, impression_id),
            keys.CHANGE_LOG,
        )
        return scripts.REGION_COUNT.run(
            self.clients[name],
            hash_keys,
            (args[0], args[1], self.region, *args[2:]),
            self._locks[name],
        )
