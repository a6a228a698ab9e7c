"""Leases and node heartbeats in Valkey: the one module that builds pacing keys.

Keys (prefix ``bidsim:pacing`` by default; every key carries a hash tag, so each
command touches one slot and the layout works unchanged on Valkey Cluster):

- ``<prefix>:{nodes}:live``: sorted set, member = node id, score = the epoch ms
  until which the node counts as live. Nodes ``ZADD`` on every refresh; the reconciler
  prunes and reads it (``live_nodes.lua``) to know how many nodes to lease to.
- ``<prefix>:{node:<id>}:leases``: hash, campaign id -> encoded ``Lease``,
  replaced whole each tick (``write_leases.lua``) and expiring with the leases.

Scripts are registered once per client (redis-py ``Script``: EVALSHA, and SCRIPT LOAD
then retry on NOSCRIPT). The reconciler side is synchronous (its own process, its own
thread); the node side is asyncio (the bidder worker's loop), and both share the keys,
the encoding and the scripts from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pacing.lease import Lease

PREFIX = "bidsim:pacing"
"""The default namespace; another one lets two stacks share one Valkey."""
_LUA = Path(__file__).with_name("lua")


def live_nodes_key(prefix: str = PREFIX) -> str:
    return f"{prefix}:{{nodes}}:live"


def leases_key(node_id: str, prefix: str = PREFIX) -> str:
    return f"{prefix}:{{node:{node_id}}}:leases"


def lua_source(name: str) -> str:
    return (_LUA / f"{name}.lua").read_text()


def decode_leases(raw: Mapping[Any, Any]) -> dict[str, Lease]:
    """A node's lease hash as read; raises LeaseFormatError on a bad value."""
    out = {}
    for field, value in raw.items():
        campaign_id = field.decode() if isinstance(field, bytes) else str(field)
        out[campaign_id] = Lease.decode(value)
    return out


class LeaseWriter:
    """The reconciler's side: who is live, and each node's leases for this tick."""

    def __init__(self, client: Any, prefix: str = PREFIX) -> None:
        """``client``: a synchronous ``redis.Redis`` or ``redis.RedisCluster``."""
        self._client = client
        self._prefix = prefix
        self._live = client.register_script(lua_source("live_nodes"))
        self._write = client.register_script(lua_source("write_leases"))

    def live_nodes(self, now_ms: int) -> list[str]:
        found = self._live(keys=[live_nodes_key(self._prefix)], args=[now_ms])
        return [n.decode() if isinstance(n, bytes) else str(n) for n in found]

    def write(self, nodes: Sequence[str], leases: Mapping[str, Lease], ttl_ms: int) -> None:
        """Give every node in ``nodes`` the same ``leases``, gone from Valkey after ``ttl_ms``."""
        args: list[Any] = [max(ttl_ms, 1)]
        for campaign_id, lease in leases.items():
            args += [campaign_id, lease.encode()]
        pipe = self._client.pipeline(transaction=False)
        for node in nodes:
            self._write(keys=[leases_key(node, self._prefix)], args=args, client=pipe)
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
        self._live_key = live_nodes_key(prefix)
        self._ttl_ms = heartbeat_ttl_ms

    async def refresh(self, now_ms: int) -> dict[str, Lease]:
        pipe = self._client.pipeline(transaction=False)
        pipe.zadd(self._live_key, {self.node_id: now_ms + self._ttl_ms})
        pipe.hgetall(self._key)
        _, raw = await pipe.execute()
        return decode_leases(raw)

    async def leave(self) -> None:
        """Deregister at shutdown, so the reconciler stops leasing to this node at once."""
        await self._client.zrem(self._live_key, self.node_id)
