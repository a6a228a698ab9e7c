"""Pacing leases on a Valkey Cluster: single-key scripts, and the reconciler's writer
and a node's reader working across the cluster's slots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis.crc import key_slot

from bidder.adapters.valkey import connect_async, connect_sync, warm_up
from bidder.stack.cluster import LocalValkeyCluster
from pacing.debits import DebitInbox, DebitOutbox, debits_keys
from pacing.lease import Lease, LeaseAccount
from pacing.lease_store import LeaseReader, leases_key
from pacing.reconciler import ClusterLeaseWriter

LUA = Path(__file__).parents[2] / "pacing" / "lua"
NODES = [f"host:{pid}" for pid in range(100, 106)]
LEASE = Lease(lease_id=7, amount_micros=5_000, expires_ms=60_000, rate_ppm=1_000_000)


KEYS_OF = {
    "live_nodes.lua": 1, "write_leases.lua": 2, "return_leases.lua": 3,
    "send_debit.lua": 2, "take_debits.lua": 2,
}  # fmt: skip
"""Scripts with several keys are given one node's keys (one hash tag: see
tests/pacing/test_returns.py), and run on the cluster below."""


@pytest.mark.parametrize("script", sorted(p.name for p in LUA.glob("*.lua")))
def test_each_pacing_script_uses_the_keys_it_is_given(script: str) -> None:
    used = set(re.findall(r"KEYS\[(\d+)\]", (LUA / script).read_text()))
    assert used == {str(n) for n in range(1, KEYS_OF[script] + 1)}


def test_a_workers_debit_keys_share_one_slot() -> None:
    assert len({key_slot(key.encode()) for key in debits_keys(17)}) == 1


@pytest.mark.asyncio
async def test_debits_routed_to_workers_reach_them_on_a_cluster(
    cluster: LocalValkeyCluster,
) -> None:
    client = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    try:
        await warm_up(client, 5.0)
        outbox = DebitOutbox(client)
        for worker in range(6):
            assert await outbox.send(worker, "c1", 100 + worker)
        taken = [await DebitInbox(client, lambda w=w: w).take() for w in range(6)]
    finally:
        await client.aclose()
    assert taken == [{"c1": 100 + worker} for worker in range(6)]


def test_the_cluster_writer_gives_each_node_its_own_leases(cluster: LocalValkeyCluster) -> None:
    client = connect_sync(cluster.url, cluster=True, timeout_s=2.0)
    empty = Lease(7, 0, 60_000, 1_000_000)
    try:
        per_node = {node: {"c1": LEASE if k == 0 else empty} for k, node in enumerate(NODES)}
        ClusterLeaseWriter(client).write_each(per_node, ttl_ms=60_000)
        written = [client.hget(leases_key(node), "c1") for node in NODES]
    finally:
        client.close()
    assert written == [LEASE.encode().encode()] + [empty.encode().encode()] * (len(NODES) - 1)


def test_the_nodes_leases_spread_over_several_slots() -> None:
    # Not a requirement; it makes the writer test below cross nodes of the cluster.
    assert len({key_slot(leases_key(node).encode()) for node in NODES}) == len(NODES)


def test_the_cluster_writer_gives_every_live_node_its_leases(
    cluster: LocalValkeyCluster,
) -> None:
    client = connect_sync(cluster.url, cluster=True, timeout_s=2.0)
    try:
        ClusterLeaseWriter(client).write(NODES, {"c1": LEASE}, ttl_ms=60_000)
        written = [client.hget(leases_key(node), "c1") for node in NODES]
    finally:
        client.close()
    assert written == [LEASE.encode().encode()] * len(NODES)


@pytest.mark.asyncio
async def test_a_node_heartbeats_and_reads_its_leases_on_a_cluster(
    cluster: LocalValkeyCluster,
) -> None:
    writer_client = connect_sync(cluster.url, cluster=True, timeout_s=2.0)
    node_client = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    try:
        await warm_up(node_client, 5.0)
        reader = LeaseReader(node_client, "host:900")
        await reader.refresh(now_ms=1_000)
        writer = ClusterLeaseWriter(writer_client)
        live = writer.live_nodes(now_ms=1_000)
        writer.write(live, {"c1": LEASE}, ttl_ms=60_000)
        leases = await reader.refresh(now_ms=2_000)
    finally:
        writer_client.close()
        await node_client.aclose()
    assert (live, leases) == (["host:900"], {"c1": LEASE})


@pytest.mark.asyncio
async def test_a_node_returns_its_leases_on_a_cluster_and_is_leased_no_more(
    cluster: LocalValkeyCluster,
) -> None:
    writer_client = connect_sync(cluster.url, cluster=True, timeout_s=2.0)
    node_client = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    try:
        await warm_up(node_client, 5.0)
        writer = ClusterLeaseWriter(writer_client)
        writer.write(["host:901"], {"c1": LEASE}, ttl_ms=60_000)
        await LeaseReader(node_client, "host:901").give_back({"c1": LeaseAccount(LEASE, 1_000)})
        writer.write(["host:901"], {"c1": LEASE}, ttl_ms=60_000)
        returned = writer.read_returns(["host:901"])
        left = writer_client.exists(leases_key("host:901"))
        writer.settle_returns(returned, ["{}"])
    finally:
        writer_client.close()
        await node_client.aclose()
    assert [(r.lease_id, r.micros) for r in returned] == [(7, 4_000)] and left == 0
