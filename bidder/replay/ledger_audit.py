"""Money measurements: acknowledged bills vs the spend stream vs DynamoDB's totals.

After a replay (a chaos scenario's, or ``bidsim replay --audit-ledger`` on the embedded
stack), while the bidder still runs (workers ship their spools, adopt dead workers'
segments, the reconciler applies what it reads):

- *acknowledged* bills are what the workers answered as billed
  (``bidsim_notices_total{outcome="billed"}``) plus journaled notices billed later
  (``bidsim_deferred_replayed_total{outcome="billed"|"billed_late"}``), from the admin
  port. A worker killed after counting but before its answer left over-counts: the
  figure errs towards reporting a loss, never towards hiding one;
- ``lost`` = acknowledged bills with no distinct ledger entry in the stream, once the
  stream stops growing or holds them all (bounded wait);
- the ledger, deduplicated by ledger id, is summed per (UTC day, campaign) and must
  equal DynamoDB's spend totals once the reconciler has caught up (bounded wait; the
  stream is read again for each comparison).

Entries a scenario injected itself (``runaway_spend``: a rogue node) carry their own
Snowflake node id and are kept apart from the bidder's.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from bidder.adapters.aws import aws_client
from bidder.core.ledger import LedgerEntry, decode_entry
from bidder.replay.admin_metrics import WATCHED_FLUSH_S, metric
from bidder.serve.settings import Settings
from pacing.curves import day_of
from pacing.spend_table import SpendTable

_POLL_S = 0.3
LEDGER_BOUND_S = 45.0
"""How long an audit waits for the stream and the totals (a dead worker's spool is
adopted by a live one within 30 s: ``SpendProducer.adopt_every_s``)."""


def read_records(kinesis: Any, stream: str) -> list[tuple[str, LedgerEntry]]:
    """(partition key, entry) of every record in the spend stream, shard by shard, as
    read (duplicates included)."""
    found: list[tuple[str, LedgerEntry]] = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            found += [(r["PartitionKey"], decode_entry(r["Data"])) for r in page["Records"]]
            # The end is an empty page at the tip; Kinesis may return empty pages before it.
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
    return found


def read_ledger(kinesis: Any, stream: str) -> list[LedgerEntry]:
    """Every entry in the spend stream, as read (duplicates included)."""
    return [entry for _, entry in read_records(kinesis, stream)]


def distinct(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    return list({entry.ledger_id: entry for entry in entries}.values())


def sums_by_campaign(entries: list[LedgerEntry]) -> dict[tuple[int, str], int]:
    sums: dict[tuple[int, str], int] = defaultdict(int)
    for entry in entries:
        sums[(day_of(entry.ts_ms), entry.campaign_id)] += entry.cost_micros
    return dict(sums)


@dataclass
class LedgerAudit:
    acknowledged: int
    streamed: int
    """Distinct ledger entries of the bidder's own nodes in the stream."""
    lost: int
    injected: int = 0
    totals_match: bool = False
    mismatches: dict[str, Any] = field(default_factory=dict)
    """Per ``day/campaign``: [DynamoDB total, ledger sum], where they differ."""
    entries: list[LedgerEntry] = field(default_factory=list)
    """The distinct entries, injected ones included."""

    def figures(self) -> dict[str, Any]:
        return {
            "acknowledged_bills": self.acknowledged,
            "streamed_entries": self.streamed,
            "lost_entries": self.lost,
            "injected_entries": self.injected,
            "ledger_equals_spend_totals": self.totals_match,
            "totals_mismatches": self.mismatches,
        }


async def acknowledged_bills(admin_url: str, flush_s: float = WATCHED_FLUSH_S) -> int:
    """The bills a bidder answered as billed, at once or from its journal later
    (``flush_s``: its ``--metrics-flush-s``)."""
    billed = await metric(admin_url, "bidsim_notices_total", {"outcome": "billed"}, flush_s)
    for outcome in ("billed", "billed_late"):
        labels = {"outcome": outcome}
        billed += await metric(admin_url, "bidsim_deferred_replayed_total", labels, flush_s)
    return int(billed)


async def audit_stream(
    settings: Settings,
    acknowledged: int,
    bound_s: float = LEDGER_BOUND_S,
    rogue_nodes: Collection[int] = (),
) -> LedgerAudit:
    """First until every acknowledged bill is in the stream, then until the totals agree
    with the stream as it is then (it is read again: late entries count on both sides);
    each wait at most ``bound_s``."""
    await asyncio.to_thread(wait_for_stream, settings, acknowledged, bound_s, rogue_nodes)
    return await asyncio.to_thread(wait_for_totals, settings, acknowledged, bound_s, rogue_nodes)


def audit_line(figures: dict[str, Any]) -> str:
    """An audit's figures in one line of the terminal report."""
    totals = "equal" if figures["ledger_equals_spend_totals"] else "NOT equal"
    return (
        f"ledger: {figures['acknowledged_bills']:,} bills acknowledged,"
        f" {figures['streamed_entries']:,} entries in the spend stream,"
        f" {figures['lost_entries']:,} lost; DynamoDB totals {totals} to the ledger's sums"
    )


def read_audit(
    kinesis: Any, stream: str, acknowledged: int, rogue_nodes: Collection[int] = ()
) -> LedgerAudit:
    """The stream as it is now, against ``acknowledged`` bills."""
    entries = distinct(read_ledger(kinesis, stream))
    ours = [e for e in entries if e.node not in rogue_nodes]
    return LedgerAudit(
        acknowledged, len(ours), max(0, acknowledged - len(ours)),
        injected=len(entries) - len(ours), entries=entries,
    )  # fmt: skip


def wait_for_stream(
    settings: Settings, acknowledged: int, bound_s: float, rogue_nodes: Collection[int] = ()
) -> None:
    """Until the stream holds ``acknowledged`` bidder entries, or the bound passes
    (blocking). Only a wait: ``wait_for_totals`` reads the stream again for the audit."""
    kinesis = aws_client("kinesis", settings.aws_endpoint or "", settings.aws_region)
    give_up = time.monotonic() + bound_s
    while time.monotonic() <= give_up:
        if read_audit(kinesis, settings.spend_stream, acknowledged, rogue_nodes).lost == 0:
            return
        time.sleep(_POLL_S)


def wait_for_totals(
    settings: Settings, acknowledged: int, bound_s: float, rogue_nodes: Collection[int] = ()
) -> LedgerAudit:
    """Compare DynamoDB's campaign totals with the ledger's sums until they agree or the
    bound passes (blocking); returns the last audit, with the outcome on it.

    The stream is read again for each comparison: entries can still arrive after
    ``wait_for_stream`` returned (a notice journaled while a dependency was down and
    billed on its replay), and the reconciler applies them too, so a sum taken once
    would fall behind the totals for good."""
    client = aws_client("dynamodb", settings.aws_endpoint or "", settings.aws_region)
    kinesis = aws_client("kinesis", settings.aws_endpoint or "", settings.aws_region)
    table = SpendTable(client, settings.spend_table)
    give_up = time.monotonic() + bound_s
    while True:
        audit = read_audit(kinesis, settings.spend_stream, acknowledged, rogue_nodes)
        ledger = sums_by_campaign(audit.entries)
        days = {day for day, _ in ledger} or {day_of(time.time_ns() // 1_000_000)}
        campaigns = sorted({campaign for _, campaign in ledger})
        dynamo = {
            (day, name): spent
            for day in days
            for name, spent in table.campaign_totals(day, campaigns).items()
        }
        diff = {
            f"{day}/{name}": [spent, ledger.get((day, name), 0)]
            for (day, name), spent in dynamo.items()
            if spent != ledger.get((day, name), 0)
        }
        if not diff or time.monotonic() > give_up:
            audit.totals_match, audit.mismatches = not diff, diff
            return audit
        time.sleep(_POLL_S)


def spend_beyond_budgets(entries: list[LedgerEntry], budgets: dict[str, int]) -> int:
    """Micros billed beyond each campaign's daily budget, summed over campaigns and days."""
    return sum(
        max(0, spent - budgets.get(campaign, 0))
        for (_, campaign), spent in sums_by_campaign(entries).items()
    )
