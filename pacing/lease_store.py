"""Leases and node heartbeats in Valkey: the one module that builds pacing keys.

Keys (prefix ``bidsim:pacing`` by default; every key carries a hash tag, so each
command touches one slot and the layout works unchanged on Valkey Cluster):

- ``<prefix>:{nodes}:live``: sorted set, member = node id, score = the epoch ms
  until which the node counts as live. Nodes ``ZADD`` on every refresh; the reconciler
  prunes and reads it (``live_nodes.lua``) to know how many nodes to lease to.
- ``<prefix>:{node:<id>}:leases``: hash, campaign id -> encoded ``Lease``,
  replaced whole each tick (``write_leases.lua``) and expiring with the leases.
- ``<prefix>:{node:<id>}:returned``: hash, ``<lease id>:<campaign id>`` -> unspent
  micros, written by a node that shuts down (``return_leases.lua``, which also deletes
  its lease hash) and emptied field by field by the reconciler once applied.
- ``<prefix>:{node:<id>}:gone``: a marker set by the same script; ``write_leases.lua``
  refuses to lease to a node that has it (a tick that read the live set just before
  the node left). A node clears its own marker on its first refresh.
- ``<prefix>:{reconciler}:returns``: list, the reconciler's log of applied returns
  (newest first, capped): what each departed node gave back and what was taken off.

Scripts are called by EVALSHA and loaded on NOSCRIPT (``bidder.adapters.lua``). The
reconciler side is synchronous (its own process, its own thread); the node side is
asyncio (the bidder worker's loop), and both share the keys, the encoding and the
scripts from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bidder.adapters.lua import LuaScript
from pacing.lease import Lease, LeaseAccount, ReturnedLease

PREFIX = "bidsim:pacing"
"""The default namespace; another one lets two stacks share one Valkey."""
_LUA = Path(__file__).with_name("lua")


def live_nodes_key(prefix: str = PREFIX) -> str:
    return f"{prefix}:{{nodes}}:live"


def leases_key(node_id: str, prefix: str = PREFIX) -> str:
    return f"{prefix}:{{node:{node_id}}}:leases"


def returned_key(node_id: str, prefix: str = PREFIX) -> str:
    return f"{prefix}:{{node:{node_id}}}:returned"


def gone_key(node_id: str, prefix: str = PREFIX) -> str:
    return f"{prefix}:{{node:{node_id}}}:gone"


def returns_log_key(prefix: str = PREFIX) -> str:
    return f"{prefix}:{{reconciler}}:returns"


RETURNS_LOG_LENGTH = 100
RETURNED_TTL_MS = 60_000
"""How long returned records and the gone marker live: well past the leases they
concern (two ticks) and past a tick that read the live set before the node left."""


LIVE_NODES = LuaScript.read(_LUA / "live_nodes.lua")
WRITE_LEASES = LuaScript.read(_LUA / "write_leases.lua")
RETURN_LEASES = LuaScript.read(_LUA / "return_leases.lua")


def decode_leases(raw: Mapping[Any, Any]) -> dict[str, Lease]:
    """A node's lease hash as read; raises LeaseFormatError on a bad value."""
    out = {}
    for field, value in raw.items():
        campaign_id = field.decode() if isinstance(field, bytes) else str(field)
        out[campaign_id] = Lease.decode(value)
    return out


def decode_returned(node_id: str, raw: Mapping[Any, Any]) -> list[ReturnedLease]:
    """A node's returned hash as read; malformed fields are skipped (and reported)."""
    out = []
    for field, value in raw.items():
        text = field.decode() if isinstance(field, bytes) else str(field)
        lease_id, _, campaign_id = text.partition(":")
        micros = value.decode() if isinstance(value, bytes) else str(value)
        if lease_id.isdigit() and campaign_id and micros.isdigit():
            out.append(ReturnedLease(node_id, campaign_id, int(lease_id), int(micros)))
    return out


def write_args(leases: Mapping[str, Lease], ttl_ms: int) -> list[Any]:
    """``write_leases.lua``'s arguments for one node."""
    args: list[Any] = [max(ttl_ms, 1)]
    for campaign_id, lease in leases.items():
        args += [campaign_id, lease.encode()]
    return args


def returned_field(item: ReturnedLease) -> str:
    return f"{item.lease_id}:{item.campaign_id}"


class LeaseWriter:
    """The reconciler's side: who is live, and each node's leases for this tick."""

    def __init__(self, client: Any, prefix: str = PREFIX) -> None:
        """``client``: a synchronous ``redis.Redis`` or ``redis.RedisCluster``."""
        self._client = client
        self._prefix = prefix

    def live_nodes(self, now_ms: int) -> list[str]:
        found = LIVE_NODES.run_sync(self._client, [live_nodes_key(self._prefix)], [now_ms])
        return [n.decode() if isinstance(n, bytes) else str(n) for n in found]

    def write(self, nodes: Sequence[str], leases: Mapping[str, Lease], ttl_ms: int) -> None:
        """Give every node in ``nodes`` the same ``leases``, gone from Valkey after ``ttl_ms``."""
        self.write_each(dict.fromkeys(nodes, leases), ttl_ms)

    def write_each(self, leases: Mapping[str, Mapping[str, Lease]], ttl_ms: int) -> None:
        """Give each node its own leases (node -> campaign -> lease), one pipeline."""
        calls = [
            (self._write_keys(node), write_args(held, ttl_ms)) for node, held in leases.items()
        ]
        WRITE_LEASES.run_pipelined(self._client, calls)

    def _write_keys(self, node: str) -> list[str]:
        return [leases_key(node, self._prefix), gone_key(node, self._prefix)]

    def read_returns(self, nodes: Sequence[str]) -> list[ReturnedLease]:
        """What ``nodes`` gave back when they left (nothing for a node still serving)."""
        if not nodes:
            return []
        pipe = self._client.pipeline(transaction=False)
        for node in nodes:
            pipe.hgetall(returned_key(node, self._prefix))
        found: list[ReturnedLease] = []
        for node, raw in zip(nodes, pipe.execute(), strict=True):
            found += decode_returned(node, raw)
        return found

    def settle_returns(self, applied: Sequence[ReturnedLease], log: Sequence[str]) -> None:
        """Log what was applied, then delete exactly the fields applied (a record a
        node wrote after they were read stays for the next tick)."""
        pipe = self._client.pipeline(transaction=False)
        if log:
            key = returns_log_key(self._prefix)
            pipe.lpush(key, *log)
            pipe.ltrim(key, 0, RETURNS_LOG_LENGTH - 1)
        by_node: dict[str, list[str]] = {}
        for item in applied:
            by_node.setdefault(item.node, []).append(returned_field(item))
        for node, fields in by_node.items():
            pipe.hdel(returned_key(node, self._prefix), *fields)
        pipe.execute()


class LeaseReader:
    """A node's side: heartbeat and read its leases, in one pipelined round trip."""

    def __init__(
        self, client: Any, node_id: str, heartbeat_ttl_ms: int = 15_000, prefix: str = PREFIX
    ) -> None:
        """``client``: a ``redis.asyncio.Redis`` (or ``RedisCluster``).

        ``heartbeat_ttl_ms``: how long the node counts as live after a refresh (default
        three 5 s ticks).
        """
        self._client = client
        self.node_id = node_id
        self._key = leases_key(node_id, prefix)
        self._returned_key = returned_key(node_id, prefix)
        self._gone_key = gone_key(node_id, prefix)
        self._live_key = live_nodes_key(prefix)
        self._ttl_ms = heartbeat_ttl_ms
        self._loading = asyncio.Lock()
        self._arrived = False

    async def refresh(self, now_ms: int) -> dict[str, Lease]:
        pipe = self._client.pipeline(transaction=False)
        if not self._arrived:  # a gone marker left by an earlier process with this id
            pipe.delete(self._gone_key)
        pipe.zadd(self._live_key, {self.node_id: now_ms + self._ttl_ms})
        pipe.hgetall(self._key)
        answers = await pipe.execute()
        self._arrived = True
        return decode_leases(answers[-1])

    async def leave(self) -> None:
        """Deregister at shutdown, so the reconciler stops leasing to this node at once."""
        await self._client.zrem(self._live_key, self.node_id)

    async def give_back(
        self, held: Mapping[str, LeaseAccount], ttl_ms: int = RETURNED_TTL_MS
    ) -> int:
        """Return every lease: delete the lease hash and record what was not spent.

        ``held``: the node's accounts, once it has stopped spending. Returns the number
        of records written. Raises ``RedisError`` (or a timeout) when Valkey can't be
        reached: the leases then simply expire.
        """
        args: list[Any] = [max(ttl_ms, 1)]
        for campaign_id, account in held.items():
            args += [campaign_id, account.lease.lease_id, account.remaining]
        keys = [self._key, self._returned_key, self._gone_key]
        return int(await RETURN_LEASES.run(self._client, keys, args, self._loading))
