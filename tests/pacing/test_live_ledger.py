"""Live acceptance: the ledger sums to the DynamoDB spend totals, to the micro.

A short bidstream goes through the whole embedded stack (private Valkey and moto, two
bid workers, the reconciler process ticking every second) while the exchange model
duplicates and reorders its win and billing notices. After the replay the stack is
left to drain: the workers ship their spools to Kinesis and the reconciler applies
what it reads. Then the ledger in Kinesis, deduplicated by ledger id, must sum to
exactly the DynamoDB totals per campaign and per advertiser, bill each impression once,
and every extra notice must have been answered as a duplicate.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bidder.adapters.aws import aws_client
from bidder.bidstream.generator import generate
from bidder.bidstream.stream import read_stream
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.ledger import LedgerEntry
from bidder.replay.admin_metrics import samples
from bidder.replay.ledger_audit import distinct, read_ledger
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.local import LocalStack
from pacing.curves import day_of
from pacing.spend_table import SpendTable
from tests.bidder.live import CAMPAIGNS, own_aws_resources, stack_settings

pytestmark = pytest.mark.long(10)

DRAIN_BOUND_S = 40.0


def live_settings(stack: LocalStack, tmp_path: Path, **changes: Any) -> Settings:
    """A two-worker bidder on the private stack, ticking every second, with AWS resources
    of its own.

    The deadline is generous: these tests assert money, not latency, on a busy 2-core
    machine.
    """
    return stack_settings(
        stack,
        tmp_path,
        **{"workers": 2, "deadline_ms": 100.0, **own_aws_resources(), **changes},
    )


def wait_for_ledger(aws_endpoint: str, stream: str, billed: int) -> list[LedgerEntry]:
    """The deduplicated ledger once it holds ``billed`` entries (bounded wait)."""
    deadline = time.monotonic() + DRAIN_BOUND_S
    while True:
        entries = distinct(read_ledger(aws_client("kinesis", aws_endpoint), stream))
        if len(entries) >= billed or time.monotonic() > deadline:
            return entries
        time.sleep(0.2)


async def notice_outcomes(admin_url: str) -> Counter[str]:
    """``bidsim_notices_total`` summed over kinds, by outcome, across the workers."""
    outcomes: Counter[str] = Counter()
    for sample in await samples(admin_url):
        if sample.name == "bidsim_notices_total":
            outcomes[sample.labels["outcome"]] += int(sample.value)
    return outcomes


def ledger_sums(entries: list[LedgerEntry], field: str) -> dict[tuple[int, str], int]:
    sums: dict[tuple[int, str], int] = defaultdict(int)
    for entry in entries:
        sums[(day_of(entry.ts_ms), getattr(entry, field))] += entry.cost_micros
    return dict(sums)


class Totals:
    """DynamoDB's spend totals for the days and names the ledger (and campaigns) know."""

    def __init__(self, settings: Settings, campaigns: list[tuple[str, str]]) -> None:
        client = aws_client("dynamodb", settings.aws_endpoint or "", settings.aws_region)
        self._table = SpendTable(client, settings.spend_table)
        self._campaigns = sorted({c for c, _ in campaigns})
        self._advertisers = sorted({a for _, a in campaigns})

    def read(self, days: set[int]) -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], int]]:
        campaigns, advertisers = {}, {}
        for day in days:
            for name, spent in self._table.campaign_totals(day, self._campaigns).items():
                campaigns[(day, name)] = spent
            for name, spent in self._table.advertiser_totals(day, self._advertisers).items():
                advertisers[(day, name)] = spent
        return campaigns, advertisers


def with_zeros(sums: dict[tuple[int, str], int], keys: Any) -> dict[tuple[int, str], int]:
    return {key: sums.get(key, 0) for key in keys}


@dataclass(frozen=True)
class Sums:
    """Spend per (UTC day, name): DynamoDB's totals and the ledger's, for the same keys."""

    dynamo: dict[tuple[int, str], int]
    ledger: dict[tuple[int, str], int]


def wait_for_totals(totals: Totals, entries: list[LedgerEntry]) -> tuple[Sums, Sums]:
    """Campaign and advertiser sums once DynamoDB agrees with the ledger, or at the bound."""
    days = {day_of(entry.ts_ms) for entry in entries} or {day_of(time.time_ns() // 1_000_000)}
    ledger_campaigns = ledger_sums(entries, "campaign_id")
    ledger_advertisers = ledger_sums(entries, "advertiser")
    deadline = time.monotonic() + DRAIN_BOUND_S
    while True:
        campaigns, advertisers = totals.read(days)
        found = (
            Sums(campaigns, with_zeros(ledger_campaigns, campaigns)),
            Sums(advertisers, with_zeros(ledger_advertisers, advertisers)),
        )
        if all(s.dynamo == s.ledger for s in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


@dataclass(frozen=True)
class Outcome:
    result: ReplayResult
    notices: Counter[str]
    """``bidsim_notices_total`` by outcome, from the admin port."""
    entries: list[LedgerEntry]
    """The spend stream, deduplicated by ledger id."""
    campaigns: Sums
    advertisers: Sums


async def _replay_and_drain(stack: LocalStack, tmp_path: Path) -> Outcome:
    stream_file = tmp_path / "stream.jsonl.gz"
    generate(stream_file, requests=2000, seed=11, mean_rate=400)
    settings = live_settings(stack, tmp_path)
    options = ReplayOptions(
        rate=400, deadline_ms=settings.deadline_ms, duplicate_notices=0.3, reorder_notices=True
    )
    totals = Totals(settings, [(c.id, c.advertiser) for c in load_campaign_file(CAMPAIGNS)])
    async with running_bidder(settings) as bidder:
        result = await replay(read_stream(stream_file), f"{bidder.bid_url}/openrtb2/bid", options)
        notices = await notice_outcomes(bidder.admin_url)
        entries = await asyncio.to_thread(
            wait_for_ledger, stack.aws_endpoint, settings.spend_stream, notices["billed"]
        )
        campaigns, advertisers = await asyncio.to_thread(wait_for_totals, totals, entries)
    return Outcome(result, notices, entries, campaigns, advertisers)


@pytest.fixture(scope="module")
def outcome(aws_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """One replay with duplicated and reordered notices, drained, for every test here."""
    with LocalStack(aws_endpoint=aws_endpoint) as stack:
        return asyncio.run(_replay_and_drain(stack, tmp_path_factory.mktemp("ledger")))


def test_every_won_impression_was_billed(outcome: Outcome) -> None:
    auction = outcome.result.auction
    assert auction.wins > 0 and auction.notices_failed == 0
    assert len(outcome.entries) == outcome.notices["billed"] == auction.wins


def test_campaign_totals_in_dynamodb_equal_the_ledger_to_the_micro(outcome: Outcome) -> None:
    assert outcome.campaigns.dynamo == outcome.campaigns.ledger


def test_advertiser_totals_in_dynamodb_equal_the_ledger_to_the_micro(outcome: Outcome) -> None:
    assert outcome.advertisers.dynamo == outcome.advertisers.ledger


def test_each_billed_impression_has_one_ledger_entry(outcome: Outcome) -> None:
    assert len({entry.bid_id for entry in outcome.entries}) == len(outcome.entries)


def test_a_bill_sent_ahead_of_its_win_bills_the_impression(outcome: Outcome) -> None:
    assert {entry.kind for entry in outcome.entries} == {"win", "bill"}


def test_every_notice_after_the_first_of_an_impression_is_answered_as_a_duplicate(
    outcome: Outcome,
) -> None:
    auction = outcome.result.auction
    injected = auction.notices_sent - 2 * auction.wins  # beyond one win + one bill per win
    assert injected > 0
    assert outcome.notices["duplicate"] == auction.notices_ok - auction.wins
    assert outcome.notices["unavailable"] == 0
