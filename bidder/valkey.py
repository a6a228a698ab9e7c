"""Every Valkey client of bidsim comes from here: one server or a Valkey Cluster.

Theory of operation. ``connect_async`` (the bidder workers, the admin port) and
``connect_sync`` (the reconciler, the supervisor's start-up checks) build a redis-py
client for ``url``: a plain ``Redis`` or, with ``cluster=True``, a ``RedisCluster``
that learns the slot map from that one node and routes each command to the owner of
its key's slot (following MOVED/ASK on its own). The callers do not care which: every
key layout keeps a multi-key script's keys under one hash tag, and the pipelines that
span tags are non-transactional, which the cluster client splits per node.

Timeouts are explicit and there is no retry with backoff: redis-py's default retries
a refused connection for seconds, which on the bid path is a deadline miss. A failed
call raises at once and the caller's policy decides (fail closed, skip, next tick).

An asyncio cluster client must not see its first commands concurrently (the racing
slot-map loads close each other's connections), so a worker calls ``warm_up`` once,
before it starts anything concurrent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from bidder.stack import normalize_valkey_url

AsyncValkey = aioredis.Redis | aioredis.RedisCluster
SyncValkey = redis.Redis | redis.RedisCluster


def _options(timeout_s: float) -> dict[str, Any]:
    return {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
    }


def connect_async(url: str, *, cluster: bool = False, timeout_s: float) -> AsyncValkey:
    """An asyncio client; ``cluster``: ``url`` is one node of a Valkey Cluster."""
    url = normalize_valkey_url(url)
    if cluster:
        return aioredis.RedisCluster.from_url(url, **_options(timeout_s))
    return aioredis.Redis.from_url(url, **_options(timeout_s))


def connect_sync(url: str, *, cluster: bool = False, timeout_s: float) -> SyncValkey:
    """A blocking client; ``cluster``: ``url`` is one node of a Valkey Cluster.

    Building a cluster client reads the slot map at once: raises
    ``redis.ConnectionError`` when that fails.
    """
    url = normalize_valkey_url(url)
    if cluster:
        try:
            return redis.RedisCluster.from_url(url, **_options(timeout_s))
        except RedisClusterException as exc:  # not a RedisError: callers catch that one
            raise redis.ConnectionError(f"cluster slot map unreadable: {exc}") from exc
    return redis.Redis.from_url(url, **_options(timeout_s))


async def warm_up(client: AsyncValkey, timeout_s: float) -> None:
    """Load a cluster client's slot map now, alone (a no-op for one server).

    Raises ``redis.RedisError`` or ``TimeoutError``; a client that failed here loads
    the map on its next command instead.
    """
    if isinstance(client, aioredis.RedisCluster):
        await asyncio.wait_for(client.initialize(), timeout_s)
