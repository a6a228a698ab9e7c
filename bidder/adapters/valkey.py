"""Every Valkey client of bidsim comes from here: one server or a Valkey Cluster.

Theory of operation. ``connect_pipelined`` builds the bid path's auto-pipelined
connection to one server (``bidder.adapters.valkey_pipelined``; a Cluster has none, its bid
path takes the asyncio client). ``connect_async`` (the bidder workers, the admin
port) and ``connect_sync`` (the reconciler, the supervisor's start-up checks) build
a redis-py client for ``url``: a plain ``Redis`` or, with ``cluster=True``, a ``RedisCluster``
that learns the slot map from that one node and routes each command to the owner of
its key's slot (following MOVED/ASK on its own). The callers do not care which: every
key layout keeps a multi-key script's keys under one hash tag, and the pipelines that
span tags are non-transactional, which the cluster client splits per node.

Timeouts are explicit and there is no retry with backoff: redis-py's default retries
a refused connection for seconds, which on the bid path is a deadline miss. A failed
call raises at once and the caller's policy decides (fail closed, skip, next tick).

A master that dies (redis-py 8.1, read in ``redis/asyncio/cluster.py``). A command
to it fails with ``ConnectionError`` (refused: at once on loopback); the client then
marks its slot map stale, and the next command reloads it (``CLUSTER SLOTS`` from a
live node) before it runs. Until the replica is promoted the map still names the dead
master, so its slots keep failing fast while the others answer; after the promotion
the next reload finds the new master. Three things redis-py does by default would
turn that into a dead worker on the bid path, so the asyncio cluster client here
(``_ClusterClient``) changes them:

- A reload runs *inside* whichever command found the map stale, under that command's
  timeout; redis-py closes every connection of every node when a reload is
  interrupted, including those other commands are using. Here a reload is a task of
  its own, shared by every command that needs it and never cancelled by them
  (``asyncio.shield``): a cap check waits for it at most until its own timeout.
- After a failure every command reloads the map again (a storm while the master is
  dead, each reload also marking every connection for reconnect). Here reloads are
  at least ``REFRESH_MIN_INTERVAL_S`` apart; in between, commands use the map they
  have (the dead master's slots fail fast, the rest work).
- A reload also reads the command table (``COMMAND``) from the default node, which
  may be the dead master (it is still a master in the map until the promotion): then
  every reload fails and closes every connection. Here a reload after the first one
  reads the slot map only (the command table does not change with a failover).
- A pipeline that fails on a dead node does not mark the map stale (redis-py only
  does that for single commands), so a worker whose only cluster traffic to that
  node is its lease-refresh pipeline would never learn of the promotion. Here it
  does.

and it is built with ``reinitialize_steps=0``: a MOVED answer patches the slot in
place instead of closing every connection every 5th redirect, and with retries 0,
``ClusterDownError``/``ConnectionError`` raise at once (no 0.25 s sleeps with
reconnects in a bid). The blocking client (reconciler, supervisor) reloads the map
inline after a failure (redis-py's behaviour) and retries the command once at once:
without the retry, a reload made while the master was still dead left the map naming
it, so the first tick after the promotion failed too, and with a 2 s tick the
workers' pacing leases (valid two ticks) ran out (measured: ``no_lease`` from 3 s
after the kill until the next tick).

An asyncio cluster client must not see its first commands concurrently (the racing
slot-map loads close each other's connections), so a worker calls ``warm_up`` once,
before it starts anything concurrent. (With the shared reload above the race is
gone too; the warm-up still loads the map before the port opens.)

``replica_reads=True`` (asyncio cluster only) sends read commands (fcap's HMGET) to
a replica of the key's slot when it has one; scripts and writes stay on the master.
See docs/fcap.md for the staleness that buys.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPipeline
from redis.backoff import NoBackoff
from redis.cluster import LoadBalancingStrategy
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from bidder.adapters.valkey_pipelined import SILENT_S, Address, PipelinedConnection
from bidder.core.tasks import retrieve

AsyncValkey = aioredis.Redis | aioredis.RedisCluster
SyncValkey = redis.Redis | redis.RedisCluster

VALKEY_FAILURES = (TimeoutError, redis.RedisError, RedisClusterException, OSError)
"""What a call through these clients raises when Valkey fails. ``RedisClusterException``
is not a ``RedisError``: a Cluster client raises it (``SlotNotCoveredError``) when its
slot map has no node for a key's slot."""

REFRESH_MIN_INTERVAL_S = 0.1
"""Slot-map reloads of one asyncio cluster client are at least this far apart: at
most a tenth of a second of extra failures after a promotion, and at most ten
reloads a second (each one reconnects every connection) while a master is dead."""


def normalize_valkey_url(url: str) -> str:
    """Map ``valkey://`` / ``valkeys://`` to the schemes redis-py knows; keep the rest."""
    for ours, theirs in (("valkey://", "redis://"), ("valkeys://", "rediss://")):
        if url.startswith(ours):
            return theirs + url[len(ours) :]
    return url


def _options(timeout_s: float) -> dict[str, Any]:
    return {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
    }


class _ClusterPipeline(ClusterPipeline):
    async def execute(
        self, raise_on_error: bool = True, allow_redirections: bool = True
    ) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except (redis.ConnectionError, redis.TimeoutError):
            # What a single command's failure does (redis-py skips it for pipelines).
            self.cluster_client._initialize = True
            raise


class _ClusterClient(aioredis.RedisCluster):
    """``RedisCluster`` whose slot-map reloads are shared, uninterrupted and spaced."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._refresh: asyncio.Task[None] | None = None
        self._refresh_started: float | None = None
        self._pausing = False
        """The pending reload is still waiting out the minimum interval."""
        self._loaded = False

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> _ClusterClient:
        """Reload the slot map if it is stale. Waits for the reload (as long as the
        caller's own timeout lets it) unless one ran less than the minimum interval
        ago; then the caller goes on with the map it has. Raises
        ``redis.ConnectionError`` when no node gives a map."""
        if not self._initialize:
            return self
        loop = asyncio.get_running_loop()
        refresh = self._refresh
        if refresh is None or refresh.done():
            since = loop.time() - (self._refresh_started or float("-inf"))
            delay = max(0.0, REFRESH_MIN_INTERVAL_S - since) if self._loaded else 0.0
            self._pausing = delay > 0
            refresh = self._refresh = loop.create_task(
                self._reload(delay, additional_startup_nodes_info, last_failed_node_name)
            )
            # Nobody may wait for a reload (or its waiters timed out); the next command
            # reloads again after a failure.
            refresh.add_done_callback(retrieve)
        if not (self._loaded and self._pausing):
            await asyncio.shield(refresh)
        return self

    async def _reload(
        self, delay: float, nodes: list[tuple[str, int]] | None, failed: str | None
    ) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        self._pausing = False
        self._refresh_started = asyncio.get_running_loop().time()
        try:
            if self._loaded:
                # The slot map only. redis-py's initialize() also reloads the command
                # table (COMMAND, ~100 KB) from the default node, which may be the dead
                # master: every reload would then fail and close every connection.
                await self.nodes_manager.initialize(nodes, failed)
                self._initialize = False
            else:
                await super().initialize(nodes, failed)
        except RedisClusterException as exc:  # not a RedisError: callers catch that one
            raise redis.ConnectionError(f"cluster slot map unreadable: {exc}") from exc
        self._loaded = True

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        # redis-py builds its ClusterPipeline the same way (its stubs call it abstract).
        return _ClusterPipeline(self, transaction)  # type: ignore[abstract]

    async def aclose(self) -> None:
        """Close every connection, whether or not the map is stale (redis-py skips
        closing while it is), and stop a pending reload."""
        refresh = self._refresh
        if refresh is not None and not refresh.done() and refresh is not asyncio.current_task():
            refresh.cancel()
            await asyncio.wait([refresh])
        stale = self._initialize
        await super().aclose()
        if stale:
            await self.nodes_manager.aclose()
            await self.nodes_manager.aclose("startup_nodes")


def connect_async(
    url: str, *, cluster: bool = False, timeout_s: float, replica_reads: bool = False
) -> AsyncValkey:
    """An asyncio client; ``cluster``: ``url`` is one node of a Valkey Cluster.

    ``replica_reads``: read commands go to a replica of their slot when it has one
    (ValueError without ``cluster``).
    """
    url = normalize_valkey_url(url)
    if replica_reads and not cluster:
        raise ValueError("replica reads need a Valkey Cluster")
    if cluster:
        options = _options(timeout_s) | {"reinitialize_steps": 0}
        if replica_reads:
            options["load_balancing_strategy"] = LoadBalancingStrategy.RANDOM_REPLICA
        return _ClusterClient.from_url(url, **options)
    return aioredis.Redis.from_url(url, **_options(timeout_s))


def connect_pipelined(
    url: str, *, connect_timeout_s: float, silent_s: float = SILENT_S
) -> PipelinedConnection:
    """The auto-pipelined connection to the one server at ``url``, not connected yet
    (``PipelinedConnection.connect``; it also connects on demand). Call it on the
    loop that will use it."""
    address = Address.from_url(normalize_valkey_url(url))
    return PipelinedConnection(address, connect_timeout_s=connect_timeout_s, silent_s=silent_s)


def connect_sync(url: str, *, cluster: bool = False, timeout_s: float) -> SyncValkey:
    """A blocking client; ``cluster``: ``url`` is one node of a Valkey Cluster.

    Building a cluster client reads the slot map at once: raises
    ``redis.ConnectionError`` when that fails.
    """
    url = normalize_valkey_url(url)
    if cluster:
        # One immediate retry: a failed command has already reloaded the map (inline),
        # so after a promotion the retry reaches the new master in the same call.
        options = _options(timeout_s) | {"retry": Retry(NoBackoff(), 1)}
        try:
            return _ClosingCluster.from_url(url, **options)
        except RedisClusterException as exc:  # not a RedisError: callers catch that one
            raise redis.ConnectionError(f"cluster slot map unreadable: {exc}") from exc
    return redis.Redis.from_url(url, **_options(timeout_s))


class _ClosingCluster(redis.RedisCluster):
    """A blocking cluster client whose ``close`` closes what it opened.

    redis-py 8.1 gives each node of a client built from a URL a connection pool the
    node does not own, and ``close`` leaves those pools open: every connection stayed
    open until garbage collection (a ``ResourceWarning``, an error under the test
    suite's warnings filter, in whichever test the collection happened to run).
    """

    def close(self) -> None:
        manager = getattr(self, "nodes_manager", None)  # absent if __init__ failed
        nodes = list(manager.nodes_cache.values()) if manager is not None else []
        super().close()
        for node in nodes:
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()


async def warm_up(client: AsyncValkey, timeout_s: float) -> None:
    """Load a cluster client's slot map now, alone (a no-op for one server).

    Raises ``redis.RedisError`` or ``TimeoutError``; a client that failed here loads
    the map on its next command instead.
    """
    if isinstance(client, aioredis.RedisCluster):
        await asyncio.wait_for(client.initialize(), timeout_s)
