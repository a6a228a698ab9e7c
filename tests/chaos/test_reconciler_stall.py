"""Live acceptance (issue 4): a stalled reconciler bounds overspend, then spending stops.

A bidstream goes through the full embedded stack (private Valkey and moto, two bid
workers, the reconciler process ticking every second). When the replay reaches a
given request the reconciler process is frozen (SIGSTOP) and the leases it wrote last
are read from Valkey. Budgets are small so that a chunk is only a few impressions of a
campaign's most expensive bid, and every campaign's curve puts the day's weight on the
hours already passed, so the controller keeps the rate at 1: the leases, not the
controller, limit spend. Then, from the billed ledger:

- no bid made after the last leases expired (plus one deadline) was billed: spending
  stops within two ticks of the stall, and ``no_lease`` answers take over;
- per campaign, the spend on bids made since the last lease write is at most two
  chunks per node (the old lease's rest and the last one);
- every request was answered 200 or 204, none 5xx, none timed out.

Bid times are the Snowflake times of the bid ids, so the checks need no tolerance for
notice latency.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import redis

from bidder.assemble import pacing_node_id
from bidder.ledger import LedgerEntry, cost_of
from bidder.reconciler_process import running_reconciler
from bidder.replay.generator import generate
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, status_classes
from bidder.replay.stream import StreamRecord, read_stream
from bidder.server import running_bidder, wait_for_leases
from bidder.stack import ChildProcess, LocalStack
from ids.snowflake import decode
from pacing.lease import DEFAULT_CHUNK_PERIODS, Lease, chunk_micros
from pacing.lease_store import decode_leases, leases_key
from tests.pacing.test_live_ledger import (
    CAMPAIGNS,
    live_settings,
    notice_outcomes,
    wait_for_ledger,
)

pytestmark = pytest.mark.chaos

WORKERS = 2
CHUNK_MAX_COSTS = 3
"""A chunk holds this many impressions at the campaign's maximum bid."""
REQUESTS, RATE, STALL_AT = 3000, 400.0, 1000
TICK_S = 1.0


def stall_campaigns(path: Path) -> dict[str, int]:
    """The bundled campaigns with small budgets and an already-spent curve; id -> budget."""
    doc = orjson.loads(CAMPAIGNS.read_bytes())
    hour = datetime.now(UTC).hour
    budgets = {}
    for campaign in doc["campaigns"]:
        max_cost = cost_of(campaign["max_bid_cpm_micros"])
        campaign["daily_budget_micros"] = (
            CHUNK_MAX_COSTS * max_cost * WORKERS * DEFAULT_CHUNK_PERIODS
        )
        campaign["pacing_curve"] = [1 if h <= hour else 0 for h in range(24)]
        budgets[campaign["id"]] = campaign["daily_budget_micros"]
    path.write_bytes(orjson.dumps(doc))
    return budgets


class Stall:
    """Freezes the reconciler when the replay reaches a request; remembers its last leases."""

    def __init__(self, reconciler: ChildProcess, valkey_url: str, nodes: list[str]) -> None:
        self._reconciler = reconciler
        self._valkey_url = valkey_url
        self._nodes = nodes
        self.stopped_ms: int | None = None
        self.leases: list[Lease] = []

    def at(self, records: Iterable[StreamRecord], index: int) -> Iterator[StreamRecord]:
        for i, record in enumerate(records):
            if i == index:
                self.stop()
            yield record

    def stop(self) -> None:
        self._reconciler.proc.send_signal(signal.SIGSTOP)
        self.stopped_ms = time.time_ns() // 1_000_000
        client = redis.Redis.from_url(self._valkey_url, socket_timeout=1.0)
        try:
            for node in self._nodes:
                raw: dict[bytes, bytes] = client.hgetall(leases_key(node))  # type: ignore[assignment]
                self.leases += decode_leases(raw).values()
        finally:
            client.close()

    def resume(self) -> None:
        if self.stopped_ms is not None:
            self._reconciler.proc.send_signal(signal.SIGCONT)


def bid_ms(entry: LedgerEntry) -> int:
    return decode(int(entry.bid_id)).time_ms


def spend_since(entries: list[LedgerEntry], since_ms: int) -> dict[str, int]:
    spend: dict[str, int] = defaultdict(int)
    for entry in entries:
        if bid_ms(entry) >= since_ms:
            spend[entry.campaign_id] += entry.cost_micros
    return dict(spend)


@dataclass(frozen=True)
class Outcome:
    result: ReplayResult
    billed: int
    """Impressions billed, from the workers' ``bidsim_notices_total``."""
    entries: list[LedgerEntry]
    stopped_ms: int
    last_written_ms: int
    """When the reconciler wrote its last leases (their lease id)."""
    expires_ms: int
    """When those leases expire."""
    budgets: dict[str, int]
    deadline_ms: float


async def _replay_with_a_stall(stack: LocalStack, tmp_path: Path) -> Outcome:
    stream_file = tmp_path / "stream.jsonl.gz"
    generate(stream_file, requests=REQUESTS, seed=5, mean_rate=RATE)
    budgets = stall_campaigns(tmp_path / "campaigns.json")
    settings = live_settings(
        stack, tmp_path, workers=WORKERS, pacing_tick_s=TICK_S, deadline_ms=50.0,
        campaigns_path=tmp_path / "campaigns.json",
        reconciler=False,  # started here, so the test holds its process
    )  # fmt: skip
    options = ReplayOptions(rate=RATE, deadline_ms=settings.deadline_ms, timeout_ms=1000.0)
    async with running_bidder(settings) as bidder:
        with running_reconciler(settings) as reconciler:
            nodes = [pacing_node_id(pid) for pid in bidder.pool.pids]
            await asyncio.to_thread(wait_for_leases, settings, nodes)
            stall = Stall(reconciler, stack.valkey_url, nodes)
            try:
                records = stall.at(read_stream(stream_file), STALL_AT)
                result = await replay(records, f"{bidder.bid_url}/openrtb2/bid", options)
                billed = (await notice_outcomes(bidder.admin_url))["billed"]
                entries = await asyncio.to_thread(
                    wait_for_ledger, stack.aws_endpoint, settings.spend_stream, billed
                )
            finally:
                stall.resume()  # a frozen process would ignore the SIGTERM that stops it
    if stall.stopped_ms is None or len(stall.leases) != WORKERS * len(budgets):
        raise RuntimeError(f"the stall did not find every node's leases: {stall.leases}")
    return Outcome(
        result, billed, entries, stall.stopped_ms,
        max(lease.lease_id for lease in stall.leases),
        max(lease.expires_ms for lease in stall.leases),
        budgets, settings.deadline_ms,
    )  # fmt: skip


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """One replay during which the reconciler process is frozen, for every test here."""
    with LocalStack() as stack:
        return asyncio.run(_replay_with_a_stall(stack, tmp_path_factory.mktemp("stall")))


def test_campaigns_were_spending_before_the_stall(outcome: Outcome) -> None:
    assert len(outcome.entries) == outcome.billed
    assert any(bid_ms(entry) < outcome.stopped_ms for entry in outcome.entries)


def test_the_last_leases_expire_within_two_ticks_of_the_stall(outcome: Outcome) -> None:
    assert outcome.expires_ms - outcome.stopped_ms <= 2 * 1000 * TICK_S


def test_no_bid_made_after_the_leases_expired_is_billed(outcome: Outcome) -> None:
    # A bid admitted just before the expiry gets its Snowflake id within the deadline.
    latest = max(bid_ms(entry) for entry in outcome.entries)
    assert latest < outcome.expires_ms + outcome.deadline_ms


def test_no_lease_answers_take_over_after_the_stall(outcome: Outcome) -> None:
    reasons = outcome.result.nbr_reasons
    assert reasons["no_lease"] + reasons["budget_unavailable"] > 0


def test_spend_after_the_last_lease_write_is_at_most_two_chunks_per_node(
    outcome: Outcome,
) -> None:
    for campaign, spent in spend_since(outcome.entries, outcome.last_written_ms).items():
        chunk = chunk_micros(outcome.budgets[campaign], WORKERS)
        assert spent <= 2 * WORKERS * chunk, campaign


def test_every_request_is_answered_200_or_204_throughout(outcome: Outcome) -> None:
    result = outcome.result
    assert status_classes(result.status) | {"200": 0, "204": 0} == {
        "200": 0, "204": 0, "5xx": 0, "other": 0,
    }  # fmt: skip
    assert (result.timeouts, result.transport_errors) == (0, 0)
