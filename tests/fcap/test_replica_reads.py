"""Replica reads (``fcap.connect(..., replica_reads=True)``) on a 3-master, 1-replica cluster.

Which node served a command is read from the servers' own ``INFO commandstats``.
A count is made visible on the replica with ``WAIT 1`` on its master before the check,
so these tests see the routing, not the replication lag (docs/fcap.md measures that).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis

from bidder.core.campaigns import CapPolicy
from bidder.serve.settings import Settings, SettingsError
from bidder.stack.cluster import LocalValkeyCluster, ValkeyNode
from fcap import keys
from fcap.store import FcapStore, connect
from tests.fcap.conftest import assert_every_key_has_ttl
from tests.fcap.support import DAY_S, T0, cap, far_deadline, new_user, one_subject

ON_WIN = one_subject(cap("campaign", "fixed", DAY_S, 1))
RESERVING = one_subject(cap("campaign", "fixed", DAY_S, 1), policy=CapPolicy(count_on="bid"))


@pytest.fixture(scope="module")
def replicated() -> Iterator[LocalValkeyCluster]:
    with LocalValkeyCluster(replicas=1) as local_cluster:
        yield local_cluster
        assert_every_key_has_ttl([node.url for node in local_cluster.masters_now()])


async def _store(cluster: LocalValkeyCluster, replica_reads: bool) -> FcapStore:
    client = connect(cluster.url, cluster=True, socket_timeout_s=2.0, replica_reads=replica_reads)
    store = FcapStore(client, check_timeout_s=2.0, write_timeout_s=2.0)
    await store.start()
    return store


@pytest_asyncio.fixture
async def reading_replicas(replicated: LocalValkeyCluster) -> AsyncIterator[FcapStore]:
    store = await _store(replicated, replica_reads=True)
    yield store
    await store.client.aclose()


@pytest_asyncio.fixture
async def reading_masters(replicated: LocalValkeyCluster) -> AsyncIterator[FcapStore]:
    store = await _store(replicated, replica_reads=False)
    yield store
    await store.client.aclose()


def _replica_of(cluster: LocalValkeyCluster, master: ValkeyNode) -> ValkeyNode:
    with redis.Redis(port=master.port, socket_timeout=2.0) as client:
        port = int(client.info("replication")["slave0"]["port"])
    return next(node for node in cluster.nodes if node.port == port)


def _calls(node: ValkeyNode, command: str) -> int:
    with redis.Redis(port=node.port, socket_timeout=2.0) as client:
        stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def _replicated(master: ValkeyNode) -> None:
    with redis.Redis(port=master.port, socket_timeout=2.0) as client:
        assert client.execute_command("WAIT", 1, 2000) == 1


async def _counted_user(store: FcapStore, cluster: LocalValkeyCluster) -> tuple[str, ValkeyNode]:
    user = new_user()
    await store.count("imp-1", ON_WIN, "win", user, None, T0, T0)
    master = cluster.master_of(keys.counters(keys.USER, user))
    _replicated(master)
    return user, master


@pytest.mark.asyncio
async def test_a_read_only_check_reads_a_replica_of_the_users_slot(
    replicated: LocalValkeyCluster, reading_replicas: FcapStore
) -> None:
    user, master = await _counted_user(reading_replicas, replicated)
    replica = _replica_of(replicated, master)
    before = (_calls(master, "hmget"), _calls(replica, "hmget"))
    result = await reading_replicas.check([ON_WIN], user, None, T0 + 1, far_deadline())
    after = (_calls(master, "hmget"), _calls(replica, "hmget"))
    assert ON_WIN in result.capped
    assert (after[0] - before[0], after[1] - before[1]) == (0, 1)


@pytest.mark.asyncio
async def test_without_replica_reads_the_check_reads_the_master(
    replicated: LocalValkeyCluster, reading_masters: FcapStore
) -> None:
    user, master = await _counted_user(reading_masters, replicated)
    replica = _replica_of(replicated, master)
    before = (_calls(master, "hmget"), _calls(replica, "hmget"))
    await reading_masters.check([ON_WIN], user, None, T0 + 1, far_deadline())
    after = (_calls(master, "hmget"), _calls(replica, "hmget"))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)


@pytest.mark.asyncio
async def test_a_reserve_at_bid_check_runs_on_the_master(
    replicated: LocalValkeyCluster, reading_replicas: FcapStore
) -> None:
    user = new_user()
    master = replicated.master_of(keys.counters(keys.USER, user))
    replica = _replica_of(replicated, master)
    before = (_calls(master, "evalsha"), _calls(replica, "evalsha"))
    result = await reading_replicas.check([RESERVING], user, None, T0, far_deadline())
    after = (_calls(master, "evalsha"), _calls(replica, "evalsha"))
    assert RESERVING in result.reservations
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)


def test_replica_reads_need_a_cluster(replicated: LocalValkeyCluster) -> None:
    with pytest.raises(ValueError, match="need a Valkey Cluster"):
        connect(replicated.url, replica_reads=True)


def test_the_replica_reads_setting_needs_a_cluster() -> None:
    with pytest.raises(SettingsError, match="--fcap-replica-reads needs a Valkey Cluster"):
        Settings(fcap_replica_reads=True).validate()


def test_every_replica_finished_its_first_sync(replicated: LocalValkeyCluster) -> None:
    roles = []
    for node in replicated.nodes:
        with redis.Redis(port=node.port, socket_timeout=2.0) as client:
            info = client.info("replication")
        roles.append((info["role"], info.get("master_link_status", "-")))
    assert sorted(roles) == [("master", "-")] * 3 + [("slave", "up")] * 3
