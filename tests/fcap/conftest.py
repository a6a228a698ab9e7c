"""fcap fixtures: clients of the session Valkey and of the session Valkey Cluster.

``store`` checks through an auto-pipelined connection as a worker on one server does;
``cluster_store`` takes the redis-py path a worker on a Cluster takes.

A SCAN must find no fcap key without a TTL: on the session server at the end of the
session, before it goes (a failure shows as an error in the teardown of the last test
using it); on the cluster, which every test using it starts empty, after each test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis
from redis.asyncio import Redis

from bidder.adapters.valkey import connect_pipelined
from bidder.stack.cluster import LocalValkeyCluster
from bidder.stack.regions import LocalRegions
from fcap import keys
from fcap.store import FcapStore, connect


@pytest.fixture(scope="session")
def fcap_valkey_url(valkey_url: str) -> Iterator[str]:
    yield valkey_url
    assert_every_key_has_ttl([valkey_url])


@pytest.fixture
def cluster(cluster: LocalValkeyCluster) -> Iterator[LocalValkeyCluster]:
    yield cluster
    assert_every_key_has_ttl([node.url for node in cluster.nodes])


def assert_every_key_has_ttl(node_urls: list[str]) -> None:
    missing = [key for url in node_urls for key in keys_without_ttl(url)]
    assert not missing, f"fcap keys without a TTL: {missing[:10]}"


def keys_without_ttl(node_url: str) -> list[bytes]:
    with redis.Redis.from_url(node_url) as client:
        found = [
            key
            for prefix in (keys.USER, keys.HOUSEHOLD)
            for key in client.scan_iter(match=f"{prefix}:*", count=1000)
        ]
        ttls = client.pipeline(transaction=False)
        for key in found:
            ttls.pttl(key)
        return [key for key, ttl in zip(found, ttls.execute(), strict=True) if ttl == -1]


@pytest_asyncio.fixture
async def store(fcap_valkey_url: str) -> AsyncIterator[FcapStore]:
    client = connect(fcap_valkey_url, socket_timeout_s=2.0)
    # A descheduled test process must not read as Valkey's silence (as in the adapters'
    # tests, tests/bidder/adapters/conftest.py).
    pipelined = connect_pipelined(fcap_valkey_url, connect_timeout_s=2.0, silent_s=2.0)
    await pipelined.connect()
    fcap_store = FcapStore(client, pipelined=pipelined, check_timeout_s=2.0, write_timeout_s=2.0)
    await fcap_store.start()
    yield fcap_store
    await fcap_store.drain()
    await pipelined.aclose()
    await client.aclose()


@pytest_asyncio.fixture
async def cluster_store(cluster: LocalValkeyCluster) -> AsyncIterator[FcapStore]:
    client = connect(cluster.url, cluster=True, socket_timeout_s=2.0)
    fcap_store = FcapStore(client, check_timeout_s=2.0, write_timeout_s=2.0)
    await fcap_store.start()
    yield fcap_store
    await fcap_store.drain()
    await client.aclose()


@pytest_asyncio.fixture
async def region_clients(local_regions: LocalRegions) -> AsyncIterator[dict[str, Redis]]:
    """A client per region of the session's regions, every server emptied first."""
    for url in local_regions.urls.values():
        with redis.Redis.from_url(url) as sync:
            sync.flushall()
    clients = {name: connect(url, socket_timeout_s=2.0) for name, url in local_regions.urls.items()}
    yield clients
    for client in clients.values():
        await client.aclose()
    assert_every_key_has_ttl(list(local_regions.urls.values()))
