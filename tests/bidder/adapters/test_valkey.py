"""bidder.adapters.valkey: one factory for every Valkey client, one server or a cluster."""

from __future__ import annotations

import time

import pytest
import redis
import redis.asyncio as aioredis

from bidder.adapters.valkey import connect_async, connect_sync, warm_up
from bidder.stack.child import held_port
from bidder.stack.cluster import LocalValkeyCluster


def test_a_cluster_client_routes_keys_to_every_master(cluster: LocalValkeyCluster) -> None:
    client = connect_sync(cluster.url, cluster=True, timeout_s=2.0)
    try:
        for i in range(30):
            client.set(f"factory-test:{i}", i, px=60_000)
        sizes = [_dbsize(node.url) for node in cluster.nodes]
    finally:
        client.close()
    assert all(size > 0 for size in sizes)


def _dbsize(url: str) -> int:
    with redis.Redis.from_url(url) as node:
        return int(node.dbsize())


def _connections_named(cluster: LocalValkeyCluster, name: str) -> int:
    count = 0
    for node in cluster.nodes:
        with redis.Redis.from_url(node.url) as admin:
            count += sum(client.get("name") == name for client in admin.client_list())
    return count


def test_closing_a_cluster_client_closes_its_connection_to_every_node(
    cluster: LocalValkeyCluster,
) -> None:
    client = connect_sync(f"{cluster.url}?client_name=closing-test", cluster=True, timeout_s=2.0)
    try:
        for i in range(30):  # keys on every master: a connection to each
            client.exists(f"factory-test:{i}")
        assert _connections_named(cluster, "closing-test") >= len(cluster.nodes)
    finally:
        client.close()
    give_up = time.monotonic() + 10.0  # the server drops a client on its next loop turn
    while _connections_named(cluster, "closing-test") and time.monotonic() < give_up:
        time.sleep(0.05)
    assert _connections_named(cluster, "closing-test") == 0


@pytest.mark.asyncio
async def test_an_async_cluster_client_answers_after_warming_up(
    cluster: LocalValkeyCluster,
) -> None:
    client = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    try:
        await warm_up(client, 5.0)
        await client.set("factory-test:async", "v", px=60_000)
        value = await client.get("factory-test:async")
    finally:
        await client.aclose()
    assert isinstance(client, aioredis.RedisCluster) and value == b"v"


@pytest.mark.asyncio
async def test_one_server_gets_a_plain_client(valkey_url: str) -> None:
    client = connect_async(valkey_url, timeout_s=1.0)
    try:
        await warm_up(client, 1.0)  # a no-op here
        pong = await client.ping()
    finally:
        await client.aclose()
    assert type(client) is aioredis.Redis and pong is True


def test_valkey_scheme_urls_are_accepted(valkey_url: str) -> None:
    client = connect_sync(valkey_url.replace("redis://", "valkey://"), timeout_s=1.0)
    try:
        assert client.ping() is True
    finally:
        client.close()


def test_an_unreachable_server_raises_a_connection_error_without_retrying() -> None:
    client = connect_sync(f"redis://127.0.0.1:{held_port()}", timeout_s=0.5)
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert client.get_retry().get_retries() == 0  # type: ignore[union-attr]


def test_an_unreachable_cluster_node_raises_a_connection_error_when_connecting() -> None:
    with pytest.raises(redis.ConnectionError):
        connect_sync(f"redis://127.0.0.1:{held_port()}", cluster=True, timeout_s=0.5)
