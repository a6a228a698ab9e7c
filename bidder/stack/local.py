"""The local stack: the real Valkey server and a moto server as supervised children.

Theory of operation. ``LocalStack`` starts each server the caller did not give a URL
for as a supervised child process (``bidder.stack.child``: its own session, SIGTERM
when this process dies, stopped and reaped on exit) on a free loopback port, retried
on a new port when it loses the port race, and waits until it answers (Valkey: a
server reporting the child's own pid; moto: any HTTP answer). A server given by URL
is only checked for reachability and passed through. moto is launched first and waited
for last, so that its start (its imports, about 0.6 s) overlaps Valkey's: a cluster's
takes about 2 s. Start the stack from a thread that lives as long as it (normally the
main thread): that thread's exit is what the kernel's die-with-parent signal follows.

``LocalStack(cluster=3)`` starts a local Valkey Cluster of that many masters instead
of one server (``bidder.stack.cluster``), ``cluster_replicas=1`` gives each a replica;
``valkey_cluster`` then says the URL is a cluster node, for ``Settings.valkey_cluster``,
and ``cluster`` is the ``LocalValkeyCluster`` (its nodes, for fault injection).
"""

from __future__ import annotations

import http.client
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import redis

from bidder.adapters.valkey import normalize_valkey_url
from bidder.stack.child import (
    START_TIMEOUT_S,
    ChildProcess,
    StackError,
    Started,
    free_port,
    retry_lost_port,
)
from bidder.stack.cluster import PROBE, LocalValkeyCluster, ValkeyNode

MIN_CLUSTER_MASTERS = 3  # valkey-cli --cluster create refuses fewer
AWS_CHECK_TIMEOUT_S = 10.0
"""How long a given AWS endpoint has to answer one request: a moto server answers its
first call to a service only once it has loaded that service's backend, seconds on a
busy machine."""


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


def moto_answers(url: str) -> bool:
    """The moto server at ``url``, started here, answers (probed directly, no proxy)."""
    return _http_answers(f"{url}/moto-api/", 0.5, _DIRECT)


def _launch_moto(workdir: Path) -> tuple[ChildProcess, str]:
    """The moto server started as a child on a free port (not waited for); its URL."""
    port = free_port()
    argv = [sys.executable, "-m", "bidder.stack.moto_server", "-H", "127.0.0.1"]
    child = ChildProcess("moto", [*argv, "-p", str(port)], workdir / f"moto-{port}.log")
    return child, f"http://127.0.0.1:{port}"


def _moto_ready(
    launched: tuple[ChildProcess, str], workdir: Path, timeout_s: float
) -> tuple[ChildProcess, str]:
    """``launched`` once it answers; if it lost its port's race, a new one on another."""
    attempts = iter([launched])

    def start() -> tuple[ChildProcess, str]:
        child, url = next(attempts, None) or _launch_moto(workdir)
        child.wait_ready(lambda: moto_answers(url), timeout_s)
        return child, url

    return retry_lost_port(start)


def _check_valkey(url: str) -> None:
    # A plain PING to the given node: it works on a Valkey Cluster node too.
    try:
        with redis.Redis.from_url(url, **PROBE) as client:
            client.ping()
    except (redis.RedisError, ValueError) as exc:
        raise StackError(f"valkey at {url} is not reachable: {exc}") from exc


def _check_aws(endpoint: str) -> None:
    if not _http_answers(endpoint, AWS_CHECK_TIMEOUT_S, _FROM_ENV):
        raise StackError(f"AWS endpoint {endpoint} is not reachable (no HTTP answer)")


class LocalStack(Started):
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
        pids = {name: child.pid for name, child in self._children.items()}
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
            # moto imports its modules for a second or more: it does so while Valkey
            # (a cluster takes a few seconds) starts.
            moto = None if self._given_aws else self._launch_moto()
            self._valkey_url = self._start_valkey()
            self._aws_endpoint = self._start_aws(moto)
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

    def _start_valkey(self) -> str:
        if self._cluster_masters:
            cluster = LocalValkeyCluster(
                self._cluster_masters, self._timeout_s, replicas=self._cluster_replicas
            )
            self._cluster = cluster
            cluster.start()
            return cluster.url
        if self._given_valkey is None:
            node = ValkeyNode.on_free_port(self._make_workdir(), self._timeout_s)
            self._children["valkey"] = node.process
            return node.url
        _check_valkey(self._given_valkey)
        return self._given_valkey

    def _launch_moto(self) -> tuple[ChildProcess, str]:
        launched = _launch_moto(self._make_workdir())
        self._children["moto"] = launched[0]  # stopped with the rest if Valkey fails
        return launched

    def _start_aws(self, moto: tuple[ChildProcess, str] | None) -> str:
        if moto is not None:
            child, url = _moto_ready(moto, self._make_workdir(), self._timeout_s)
            self._children["moto"] = child
            return url
        assert self._given_aws is not None  # no moto launched: an endpoint was given
        _check_aws(self._given_aws)
        return self._given_aws

    def _make_workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="bidsim-stack-"))
        return self._workdir

    @staticmethod
    def _require(url: str | None) -> str:
        if url is None:
            raise StackError("the stack is not started; use `with LocalStack() as stack:`")
        return url
