"""Live acceptance, short form: a generated day replayed in a minute on the stream's clock.

The whole embedded stack (two bid workers, the reconciler process) runs on the stream's
simulated clock (1440x: a day in 60 s of sends at 300 req/s), with the campaigns that
won enough in a calibration replay, their budgets sized so that spend at pacing rate 1
is 1.5x the budget (``bidsim campaigns size``). The calibration is
``data/day-1m-calibration.json``, the campaigns of the report of::

    bidsim gen --out day.jsonl.gz --minutes 1 --rate 300 --seed 7
    bidsim replay day.jsonl.gz --workers 2 --pacing-tick-s 0.5 --budget-scale 1000 --json OUT

Checked, on the scale of a one-minute day: a campaign buys 100-200 impressions a day,
a dozen a simulated hour, so hourly figures are noise and the bounds are far wider
than the full form's (docs/pacing.md). Every binding budget is spent mostly and not
past it (EOD 0.75-1.02; measured 0.83 and 0.89), the cumulative spend stays near the
curve (at most 25% of the budget off; measured 0.11 and 0.17), the ledger equals the
DynamoDB totals, and the offline simulator on the same day, curve and settings ends
within 15 points of the live day (measured 6 and 13 points). They fail when pacing
does: a breaker tripping on noise left 4% spent, a lease below one impression at the
maximum bid left 0%.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from bidder.bidstream.generator import generate
from bidder.bidstream.stream import read_stream
from bidder.core.campaign_docs import campaign_to_doc, load_campaign_file
from bidder.replay.campaign_outcomes import budgets_of
from bidder.replay.pacing_figures import OfflineSettings, pacing_section, sized
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import to_json
from bidder.replay.stream_clock import on_clock, stream_clock
from bidder.serve.server import running_bidder
from bidder.stack.local import LocalStack
from tests.bidder.live import CAMPAIGNS
from tests.pacing.test_live_ledger import (
    Totals,
    live_settings,
    notice_outcomes,
    wait_for_ledger,
    wait_for_totals,
)

CALIBRATION = Path(__file__).parent / "data" / "day-1m-calibration.json"
SUPPLY_RATIO = 1.5
LEAD_S = 20.0
CHUNK_PERIODS = 4
"""Budgets this small need large chunks to cover one impression at the maximum bid."""
BREAKER_OFF_S = 86_400.0
"""A tick here holds a handful of impressions: 3x one tick's target is noise, and the
breaker would pause every campaign within hours, live and offline alike."""


async def _day(stack: LocalStack, tmp_path: Path) -> dict[str, Any]:
    stream_file, campaigns_file = tmp_path / "day.jsonl.gz", tmp_path / "sized.json"
    generate(stream_file, requests=18_000, seed=7, mean_rate=300)
    records = list(read_stream(stream_file))
    calibration = orjson.loads(CALIBRATION.read_bytes())["campaigns"]
    campaigns = sized(load_campaign_file(CAMPAIGNS), calibration, SUPPLY_RATIO, 2 * CHUNK_PERIODS)
    docs = {"version": 1, "campaigns": [campaign_to_doc(c) for c in campaigns]}
    campaigns_file.write_bytes(orjson.dumps(docs))
    clock = stream_clock(records, 1.0)
    assert clock is not None
    start_at_ms = time.time_ns() // 1_000_000 + round(LEAD_S * 1000)
    base = live_settings(
        stack,
        tmp_path,
        campaigns_path=campaigns_file,
        pacing_tick_s=0.5,
        chunk_periods=CHUNK_PERIODS,
        breaker_window_s=BREAKER_OFF_S,
    )
    settings = on_clock(base, clock, start_at_ms)
    budgets = budgets_of(campaigns)
    options = ReplayOptions(deadline_ms=settings.deadline_ms, budgets=budgets)
    totals = Totals(settings, [(c.id, c.advertiser) for c in campaigns])
    async with running_bidder(settings) as bidder:
        await asyncio.sleep(max(start_at_ms / 1000 - time.time(), 0.0))
        result = await replay(records, f"{bidder.bid_url}/openrtb2/bid", options)
        notices = await notice_outcomes(bidder.admin_url)
        entries = await asyncio.to_thread(
            wait_for_ledger, stack.aws_endpoint, settings.spend_stream, notices["billed"]
        )
        campaign_sums, _ = await asyncio.to_thread(wait_for_totals, totals, entries)
    offline = OfflineSettings(
        nodes=settings.workers,
        tick_s=settings.pacing_tick_s * clock.speed,
        chunk_periods=settings.chunk_periods,
        breaker_window_s=settings.breaker_window_s,
    )
    report = to_json(result)
    pacing = pacing_section(report["campaigns"], budgets, calibration, offline)
    return {"pacing": pacing, "sums": campaign_sums, "late_ms": start_at_ms}


@pytest.fixture(scope="module")
def day(aws_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with LocalStack(aws_endpoint=aws_endpoint) as stack:
        return asyncio.run(_day(stack, tmp_path_factory.mktemp("day")))


def _binding(day: dict[str, Any]) -> dict[str, Any]:
    found = {cid: entry for cid, entry in day["pacing"].items() if entry["binds"]}
    assert len(found) >= 2, day["pacing"]
    return found


def test_binding_budgets_are_spent_to_their_end_and_not_past_it(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        assert 0.75 <= entry["live"]["eod_spend_ratio"] <= 1.02, (cid, entry["live"])


def test_most_hours_track_the_curve(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        assert entry["live"]["max_cum_error_ratio"] <= 0.25, (cid, entry["live"])


def test_the_ledger_equals_the_totals(day: dict[str, Any]) -> None:
    assert day["sums"].dynamo == day["sums"].ledger


def test_the_offline_simulator_lands_near_the_live_day(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        live, offline = entry["live"], entry["offline"]
        assert abs(live["eod_spend_ratio"] - offline["eod_spend_ratio"]) <= 0.15, (cid, entry)
