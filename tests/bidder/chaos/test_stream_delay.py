"""The reconciler behind a spend stream whose delivery lags: it holds, then grants again.

The stream's delivery is held back by ``bidder.chaos.stream_delay`` (a proxy in front
of the moto server, the reconciler's only AWS endpoint); Valkey and DynamoDB stay up.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from bidder.adapters.aws import aws_client
from bidder.chaos.stream_delay import StreamDelay
from bidder.core.campaigns import Campaign, Creative
from bidder.core.clock import ManualClock
from bidder.core.ledger import LedgerEntry
from pacing.lease_store import LeaseWriter, decode_leases, leases_key, live_nodes_key
from pacing.reconcile import PacingConfig
from pacing.reconciler import Reconciler
from pacing.spend_reader import KinesisReader
from pacing.spend_table import SpendTable

T0 = 1_767_268_800_000  # 2026-01-01 12:00 UTC
CAMPAIGN = Campaign("c1", "adv1", 10_000_000_000, 2_000_000, 5_000_000,
                    (Creative("cr", "banner", "<b/>", ("a.example",), 300, 250),))  # fmt: skip
LAG = PacingConfig(lag_threshold_s=0.001)
"""Any measurable lag holds: the test never waits for wall time to pass."""


@pytest.fixture
def delayed(aws_endpoint: str, valkey_url: str) -> Iterator[dict[str, Any]]:
    name, prefix = f"spend-{uuid.uuid4().hex[:8]}", f"test-lag-{uuid.uuid4().hex[:8]}"
    direct = aws_client("kinesis", aws_endpoint)
    direct.create_stream(StreamName=name, ShardCount=2)
    direct.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2})
    valkey = redis.Redis.from_url(valkey_url)
    valkey.zadd(live_nodes_key(prefix), {"n1": T0 + 3_600_000})
    clock = ManualClock(start_wall_ms=T0)
    with StreamDelay(aws_endpoint) as proxy, ThreadPoolExecutor(2) as pool:
        table = SpendTable(aws_client("dynamodb", proxy.url), f"spend-{name}")
        table.ensure_table()
        reader = KinesisReader(aws_client("kinesis", proxy.url), name, table, pool)
        reconciler = Reconciler(
            reader, table, LeaseWriter(valkey, prefix), lambda: [CAMPAIGN], clock, LAG
        )
        yield {"reconciler": reconciler, "proxy": proxy, "kinesis": direct, "stream": name,
               "valkey": valkey, "prefix": prefix, "clock": clock}  # fmt: skip
    direct.delete_stream(StreamName=name)
    valkey.close()


def _bill(world: dict[str, Any], first_id: int, n: int) -> int:
    ids = range(first_id, first_id + n)
    entries = [LedgerEntry(i, "win", "c1", "adv1", "cr", f"imp{i}", "b", 1_000_000, 1_000, 1, T0)
               for i in ids]  # fmt: skip
    world["kinesis"].put_records(
        StreamName=world["stream"],
        Records=[{"Data": e.encode(), "PartitionKey": str(e.ledger_id)} for e in entries],
    )
    return sum(e.cost_micros for e in entries)


def _lease_id(world: dict[str, Any]) -> int:
    raw = world["valkey"].hgetall(leases_key("n1", world["prefix"]))
    return decode_leases(raw)["c1"].lease_id


def test_a_lagging_stream_holds_every_grant_until_it_is_delivered(
    delayed: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    world, reconciler = delayed, delayed["reconciler"]
    _bill(world, 1, 10)
    healthy = reconciler.tick()
    assert not healthy.held and len(healthy.applied) == 10
    first_lease = _lease_id(world)
    world["proxy"].hold()
    unseen = _bill(world, 100, 20)
    world["clock"].advance(5.0)
    with caplog.at_level(logging.WARNING, logger="bidsim.reconciler"):
        held = reconciler.tick()
        assert held.held and held.applied == [] and held.lag is not None and held.lag.lag_ms > 1
        assert _lease_id(world) == first_lease  # not renewed
        world["proxy"].release()
        world["clock"].advance(5.0)
        back = reconciler.tick()
    assert not back.held and sum(e.cost_micros for e in back.applied) == unseen
    assert _lease_id(world) > first_lease
    messages = [r.getMessage() for r in caplog.records]
    assert any("holding leases" in m for m in messages)
    assert any("lag cleared, granting leases again" in m for m in messages)


def test_records_that_arrived_before_the_hold_are_still_delivered(
    delayed: dict[str, Any],
) -> None:
    world = delayed
    seen = _bill(world, 1, 15)
    world["proxy"].hold()
    report = world["reconciler"].tick()
    assert sum(e.cost_micros for e in report.applied) == seen
