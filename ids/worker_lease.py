"""Snowflake worker ids leased in Valkey, renewed, and given up on loss.

Theory of operation. Two hashes under one hash tag (one slot, so the scripts work on
Valkey Cluster unchanged): ``leases`` maps a worker id to ``owner|expires_ms`` and
``hwm`` maps it to a high-water mark, the highest millisecond any holder may have put
in an id. ``acquire`` takes the lowest worker id whose lease is absent or expired and
reads its mark; ``renew`` extends the lease if the value still names us and raises
the mark to the new local validity; ``release`` deletes it and sets the mark to the
last millisecond actually used. Each is one Lua script, so atomic.

Uniqueness never depends on clocks agreeing. A holder issues ids only in
milliseconds strictly below its local ``valid_until`` (send time of the renewal +
ttl - margin), which the renewal wrote as the mark *before* the holder used it; a
new holder issues only in milliseconds strictly above the mark it read when it
acquired. After a takeover the old holder can no longer renew (the value names
someone else), so its ids stay below the mark and the new holder's above it. Clock
skew only affects liveness: a fast clock may see a lease expire early and take it
over, the old holder then loses it (``LeaseLost`` on its bid path) and acquires
another id. Expiry is judged by the caller's injected clock so tests run in
virtual time.

Losing the lease (a renewal finds someone else's value) revokes the generator at
once. If Valkey cannot be reached the generator stops by itself when its local
validity ends; nothing is issued on a lease that might have been taken over.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

from bidder.adapters.lua import LuaScript
from bidder.adapters.valkey import AsyncValkey
from bidder.core.clock import Clock
from ids.snowflake import MAX_WORKER, Snowflake

log = logging.getLogger(__name__)

DEFAULT_TTL_MS = 10_000
DEFAULT_MARGIN_MS = 2_000
WORKER_IDS = MAX_WORKER + 1


class NoWorkerId(Exception):
    """Every worker id is leased by a live holder."""


def lease_keys(namespace: str) -> list[str]:
    """The two hashes, under one hash tag (one cluster slot)."""
    return [f"{{{namespace}:ids}}:leases", f"{{{namespace}:ids}}:hwm"]


_LUA = Path(__file__).parent / "lua"
_ACQUIRE = LuaScript.read(_LUA / "acquire.lua")
_RENEW = LuaScript.read(_LUA / "renew.lua")
_RELEASE = LuaScript.read(_LUA / "release.lua")


class WorkerLease:
    """Hold one worker id for ``generator``; call ``renew`` every ``renew_interval_s``."""

    def __init__(
        self,
        client: AsyncValkey,
        generator: Snowflake,
        clock: Clock,
        *,
        namespace: str = "bidsim",
        ttl_ms: int = DEFAULT_TTL_MS,
        margin_ms: int = DEFAULT_MARGIN_MS,
        worker_ids: int = WORKER_IDS,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        if not 0 <= margin_ms < ttl_ms:
            raise ValueError("the lease margin must be at least 0 and below the ttl")
        self._generator = generator
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._margin_ms = margin_ms
        self._on_lost = on_lost
        self._worker_ids = worker_ids
        self._keys = lease_keys(namespace)
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        self._client = client
        self._loading = asyncio.Lock()
        self.worker: int | None = None

    @property
    def renew_interval_s(self) -> float:
        """Three renewals per ttl: one lost round trip never costs the lease."""
        return (self._ttl_ms - self._margin_ms) / 3000

    async def acquire(self) -> int:
        """Lease a free worker id and grant it to the generator; NoWorkerId when none."""
        sent = self._clock.wall_ms()
        args: list[str | int] = [self._owner, sent, self._wall_ttl_ms, self._worker_ids]
        worker, hwm = await _ACQUIRE.run(self._client, self._keys, args, self._loading)
        if worker < 0:
            raise NoWorkerId(f"all {self._worker_ids} Snowflake worker ids are leased")
        self.worker = int(worker)
        self._generator.grant(self.worker, self._valid_until(sent), not_before_ms=int(hwm))
        return self.worker

    async def renew(self) -> bool:
        """Extend the lease. False (and the generator revoked) when it was lost."""
        if self.worker is None:
            return False
        sent = self._clock.wall_ms()
        valid_until = self._valid_until(sent)
        args: list[str | int] = [self._owner, self.worker, sent, self._wall_ttl_ms, valid_until]
        if await _RENEW.run(self._client, self._keys, args, self._loading):
            self._generator.grant(self.worker, valid_until)
            return True
        log.error("Snowflake worker id %d was taken over; ids stop until re-acquired", self.worker)
        self._generator.revoke()
        self.worker = None
        if self._on_lost is not None:
            self._on_lost()
        return False

    async def keep(self) -> None:
        """Renew forever; re-acquire after a loss. Valkey errors are logged and retried."""
        while True:
            await asyncio.sleep(self.renew_interval_s)
            try:
                if self.worker is None or not await self.renew():
                    await self.acquire()
            except Exception as exc:  # Valkey down or full: the generator expires by itself
                log.warning("Snowflake worker id lease not renewed: %s", exc)

    async def release(self) -> None:
        """Stop issuing ids and give the worker id back (on shutdown)."""
        worker, last_ms = self.worker, self._generator.last_ms
        self._generator.revoke()
        self.worker = None
        if worker is not None:
            args: list[str | int] = [self._owner, worker, last_ms]
            await _RELEASE.run(self._client, self._keys, args, self._loading)

    @property
    def _wall_ttl_ms(self) -> int:
        """The ttl on the caller's wall clock: renewals come every real third of the
        ttl, so on a simulated clock (``Clock.speed``) it lasts speed x as many wall ms."""
        return math.floor(self._ttl_ms * self._clock.speed)

    def _valid_until(self, sent_ms: int) -> int:
        return sent_ms + math.floor((self._ttl_ms - self._margin_ms) * self._clock.speed)
