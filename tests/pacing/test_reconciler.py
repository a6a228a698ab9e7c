"""The reconciler against moto Kinesis + DynamoDB and the real Valkey."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import orjson
import pytest
import redis

from bidder.adapters.aws import aws_client
from bidder.core.campaigns import Campaign, Creative
from bidder.core.clock import ManualClock
from bidder.core.ledger import LedgerEntry, cost_of
from bidder.core.nobid import NoBid
from pacing.curves import day_of
from pacing.lease import Lease, LeaseAccount
from pacing.lease_store import (
    RETURN_LEASES,
    LeaseWriter,
    decode_leases,
    gone_key,
    leases_key,
    live_nodes_key,
    returned_key,
    returns_log_key,
)
from pacing.node import NodePacer
from pacing.reconcile import AdvertiserMismatch, PacingConfig
from pacing.reconciler import Reconciler
from pacing.spend_reader import KinesisReader
from pacing.spend_table import SpendTable
from tests.published import sample

T0 = 1_767_268_800_000  # 2026-01-01 12:00 UTC
BUDGET = 10_000_000_000
CREATIVE = Creative("cr", "banner", "<b/>", ("a.example",), 300, 250)
CHUNK = 17_361_111
"""A node's lease: 10_000_000_000 micros / 2 live nodes / 288 five-minute periods."""


def _campaign(cid: str, advertiser: str) -> Campaign:
    return Campaign(cid, advertiser, BUDGET, 2_000_000, 5_000_000, (CREATIVE,))


CAMPAIGNS = [_campaign("c1", "adv1"), _campaign("c2", "adv1"), _campaign("c3", "adv2")]


@pytest.fixture
def stream(aws_endpoint: str) -> Iterator[tuple[Any, str]]:
    client = aws_client("kinesis", aws_endpoint)
    name = f"spend-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=name, ShardCount=2)
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2})
    yield client, name
    client.delete_stream(StreamName=name)


@pytest.fixture
def table(aws_endpoint: str) -> SpendTable:
    spend = SpendTable(aws_client("dynamodb", aws_endpoint), f"spend-{uuid.uuid4().hex[:8]}")
    spend.ensure_table()
    return spend


@pytest.fixture
def valkey(valkey_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(valkey_url)
    yield client
    client.close()


@pytest.fixture
def world(
    stream: tuple[Any, str], table: SpendTable, valkey: redis.Redis
) -> Iterator[dict[str, Any]]:
    client, name = stream
    prefix = f"test-rec-{uuid.uuid4().hex[:8]}"
    clock = ManualClock(start_wall_ms=T0)
    for node in ("n1", "n2"):
        valkey.zadd(live_nodes_key(prefix), {node: T0 + 3_600_000})
    with ThreadPoolExecutor(2) as pool:

        def make(config: PacingConfig | None = None) -> Reconciler:
            reader = KinesisReader(client, name, table, pool)
            writer = LeaseWriter(valkey, prefix)
            config = config or PacingConfig()
            return Reconciler(reader, table, writer, lambda: CAMPAIGNS, clock, config)

        yield {"make": make, "kinesis": client, "stream": name, "table": table,
               "clock": clock, "prefix": prefix}  # fmt: skip


def _entries(n: int, seed: int = 7) -> list[LedgerEntry]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        campaign = CAMPAIGNS[rnd.randrange(3)]
        price = rnd.randrange(500_000, 5_000_000)
        ids = (f"imp{i}", f"bid{i}")
        cost = cost_of(price)
        entry = LedgerEntry(10_000 + i, "win", campaign.id, campaign.advertiser, "cr", *ids,
                            price, cost, 1, T0 - 1000)  # fmt: skip
        out.append(entry)
    return out


def _put(world: dict[str, Any], entries: list[LedgerEntry]) -> None:
    for start in range(0, len(entries), 500):
        world["kinesis"].put_records(
            StreamName=world["stream"],
            Records=[
                {"Data": e.encode(), "PartitionKey": e.campaign_id}
                for e in entries[start : start + 500]
            ],
        )


def test_duplicated_and_reordered_entries_are_applied_exactly_once(world: dict[str, Any]) -> None:
    entries = _entries(200)
    noisy = entries + entries[::3] + entries[50:80]
    random.Random(1).shuffle(noisy)
    _put(world, noisy)
    report = world["make"]().tick()
    assert len(report.applied) == 200
    _assert_totals_match(world["table"], entries)


def test_a_restarted_reconciler_resumes_and_refuses_replays(world: dict[str, Any]) -> None:
    entries = _entries(120)
    _put(world, entries[:80])
    world["make"]().tick()
    _put(world, entries[40:])  # 40 replays + 40 new
    fresh = world["make"]()  # a new process: resumes from the checkpoints
    assert len(fresh.tick().applied) == 40
    _assert_totals_match(world["table"], entries)


def test_the_ledger_sums_match_per_advertiser(world: dict[str, Any]) -> None:
    entries = _entries(90)
    _put(world, entries + entries[:30])
    world["make"]().tick()
    day = day_of(T0)
    want: dict[str, int] = {}
    for e in entries:
        want[e.advertiser] = want.get(e.advertiser, 0) + e.cost_micros
    assert world["table"].applied_sums(day) == want
    assert world["table"].advertiser_totals(day, ["adv1", "adv2"]) == want


def test_leases_reach_every_live_node_and_respect_the_budget(
    world: dict[str, Any], valkey: redis.Redis
) -> None:
    report = world["make"]().tick()
    assert report.result.violations == [] and sorted(report.nodes) == ["n1", "n2"]
    leases = decode_leases(valkey.hgetall(leases_key("n1", world["prefix"])))
    assert set(leases) == {"c1", "c2", "c3"}
    assert leases["c1"].amount_micros == CHUNK
    for plan in report.result.plans:
        assert plan.spent_micros + plan.exposure_micros <= BUDGET


def test_a_stalled_reconciler_stops_spending_after_two_ticks(
    world: dict[str, Any], valkey: redis.Redis
) -> None:
    reconciler, clock = world["make"](), world["clock"]
    reconciler.tick()
    node = NodePacer("n1", clock, rng=lambda: 0.0)
    raw = valkey.hgetall(leases_key("n1", world["prefix"]))
    node.install(decode_leases(raw))
    impressions = 0
    while node.admit("c1", STALL_COST) is None and impressions < 10 * CHUNK // STALL_COST:
        node.debit("c1", STALL_COST)
        impressions += 1
    # The reconciler is gone: the chunk is all it may spend, and it spends the chunk.
    assert impressions == CHUNK // STALL_COST == 173
    node.install({"c2": Lease.decode(raw[b"c2"])})
    clock.advance(10.0)  # two missed ticks
    assert node.admit("c2", 1) is NoBid.NO_LEASE
    _put(world, _stall_spend(impressions))  # the spend's ledger entries, once it is back
    report = reconciler.tick()
    spent = {p.campaign_id: p.spent_micros for p in report.result.plans}
    assert spent == {"c1": 173 * STALL_COST, "c2": 0, "c3": 0}


STALL_COST = 100_000
"""Micros per impression in the stall test: a $100 CPM impression costs $0.10."""


def _stall_spend(impressions: int) -> list[LedgerEntry]:
    ids = [(20_000 + i, f"stall-imp{i}", f"stall-bid{i}") for i in range(impressions)]
    price = 100_000_000
    return [
        LedgerEntry(ledger, "win", "c1", "adv1", "cr", imp, bid, price, STALL_COST, 1, T0)
        for ledger, imp, bid in ids
    ]


def _exposure_at_the_first_leases_expiry(world: dict[str, Any], config: PacingConfig) -> int:
    reconciler, clock = world["make"](config), world["clock"]
    for _ in range(2):
        reconciler.tick()
        clock.advance(5.0)
    plans = reconciler.tick().result.plans  # the first tick's leases expire now
    return next(p.exposure_micros for p in plans if p.campaign_id == "c1")


def test_an_expired_lease_stays_in_the_exposure_until_the_spend_read_covers_its_expiry(
    world: dict[str, Any],
) -> None:
    # a debit made just before the expiry may reach the stream up to the ledger delay
    # later, after this tick's read: the first leases (2 nodes x CHUNK) still count
    assert _exposure_at_the_first_leases_expiry(world, PacingConfig()) == 6 * CHUNK


def test_without_a_ledger_delay_a_lease_leaves_the_exposure_at_its_expiry(
    world: dict[str, Any],
) -> None:
    config = PacingConfig(ledger_delay_s=0.0)
    assert _exposure_at_the_first_leases_expiry(world, config) == 4 * CHUNK


def test_undecodable_records_are_skipped_and_counted(world: dict[str, Any]) -> None:
    world["kinesis"].put_record(StreamName=world["stream"], Data=b"nope", PartitionKey="x")
    _put(world, _entries(5))
    report = world["make"]().tick()
    assert report.bad_records == 1 and len(report.applied) == 5


def _assert_totals_match(table: SpendTable, entries: list[LedgerEntry]) -> None:
    want = {c.id: 0 for c in CAMPAIGNS}
    for e in entries:
        want[e.campaign_id] += e.cost_micros
    assert table.campaign_totals(day_of(T0), list(want)) == want
    assert sum(want.values()) == sum(e.cost_micros for e in entries)


def _named(config: PacingConfig) -> list[str]:
    """The field each problem opens with."""
    return [problem.split(" ", 1)[0] for problem in config.problems()]


def test_config_problems_are_named() -> None:
    assert _named(PacingConfig(tick_s=0.0)) == ["tick_s"]
    assert _named(replace(PacingConfig(), breaker_ratio=0.5)) == ["breaker_ratio"]
    assert _named(PacingConfig(tick_s=0.0, chunk_micros=0)) == ["tick_s", "chunk_micros"]
    assert _named(PacingConfig(ledger_delay_s=-1.0)) == ["ledger_delay_s"]
    assert PacingConfig().problems() == []


def _leave_and_return(world: dict[str, Any], valkey: redis.Redis, spent_on_c1: int) -> None:
    """Node n1 reads its leases, bills ``spent_on_c1`` on c1, then leaves and returns."""
    raw = valkey.hgetall(leases_key("n1", world["prefix"]))
    accounts = {c: LeaseAccount(lease) for c, lease in decode_leases(raw).items()}
    accounts["c1"].debit(spent_on_c1)
    valkey.zrem(live_nodes_key(world["prefix"]), "n1")
    args: list[Any] = [60_000]
    for campaign_id, account in accounts.items():
        args += [campaign_id, account.lease.lease_id, account.remaining]
    keys = [leases_key("n1", world["prefix"]), returned_key("n1", world["prefix"]),
            gone_key("n1", world["prefix"])]  # fmt: skip
    RETURN_LEASES.run_sync(valkey, keys, args)


def test_a_departed_nodes_remainders_are_taken_off_on_the_next_tick(
    world: dict[str, Any], valkey: redis.Redis
) -> None:
    reconciler = world["make"]()
    reconciler.tick()
    _leave_and_return(world, valkey, spent_on_c1=100)
    world["clock"].advance(5.0)
    report = reconciler.tick()
    taken = {p.campaign_id: p.returned_micros for p in report.result.plans}
    assert taken == {"c1": CHUNK - 100, "c2": CHUNK, "c3": CHUNK}
    assert report.nodes == ["n2"]


def test_applied_returns_are_deleted_and_logged(world: dict[str, Any], valkey: redis.Redis) -> None:
    reconciler = world["make"]()
    reconciler.tick()
    _leave_and_return(world, valkey, spent_on_c1=100)
    world["clock"].advance(5.0)
    reconciler.tick()
    assert not valkey.exists(returned_key("n1", world["prefix"]))
    logged = orjson.loads(valkey.lindex(returns_log_key(world["prefix"]), 0) or b"null")
    assert logged["nodes"] == ["n1"]
    c1 = next(r for r in logged["records"] if r["campaign"] == "c1")
    assert c1["taken"] == c1["micros"] == CHUNK - 100


def test_a_returned_record_read_again_is_not_taken_off_twice(
    world: dict[str, Any], valkey: redis.Redis
) -> None:
    reconciler = world["make"]()
    reconciler.tick()
    _leave_and_return(world, valkey, spent_on_c1=0)
    record: dict[Any, Any] = valkey.hgetall(returned_key("n1", world["prefix"]))
    world["clock"].advance(5.0)
    reconciler.tick()
    valkey.hset(returned_key("n1", world["prefix"]), mapping=record)  # as if the delete failed
    world["clock"].advance(1.0)  # within the returned leases' lifetime
    report = reconciler.tick()
    assert [p.returned_micros for p in report.result.plans] == [0, 0, 0]
    assert not valkey.exists(returned_key("n1", world["prefix"]))


def test_totals_that_agree_report_no_advertiser_mismatch(world: dict[str, Any]) -> None:
    _put(world, _entries(60))
    report = world["make"]().tick()
    assert report.mismatches == [] and not report.held


def test_an_advertiser_total_off_its_campaigns_sum_is_logged_and_counted_every_tick(
    world: dict[str, Any], aws_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    entries = _entries(60)
    _put(world, entries)
    reconciler = world["make"]()
    reconciler.tick()
    table: SpendTable = world["table"]
    day = day_of(T0)
    aws_client("dynamodb", aws_endpoint).update_item(
        TableName=table.table_name, Key={"pk": {"S": f"adv#{day}#adv2"}},
        UpdateExpression="ADD spent :one", ExpressionAttributeValues={":one": {"N": "1"}},
    )  # fmt: skip
    before = sample("bidsim_pacing_advertiser_mismatches_total", {"advertiser": "adv2"})
    world["clock"].advance(5.0)
    with caplog.at_level("ERROR", logger="bidsim.reconciler"):
        first, second = reconciler.tick(), reconciler.tick()
    adv2 = sum(e.cost_micros for e in entries if e.advertiser == "adv2")
    assert first.mismatches == second.mismatches == [AdvertiserMismatch("adv2", adv2, adv2 + 1)]
    after = sample("bidsim_pacing_advertiser_mismatches_total", {"advertiser": "adv2"})
    assert after - before == 2
    named = [r.getMessage() for r in caplog.records if "advertiser adv2" in r.getMessage()]
    assert len(named) == 2 and "campaigns sum to" in named[0]
