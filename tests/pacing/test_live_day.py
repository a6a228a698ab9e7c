"""Live acceptance, short form: a generated day replayed in a minute on the stream's clock.

The whole embedded stack (two bid workers, the reconciler process) runs on the stream's
simulated clock (1440x: the one-minute day below sent at its pace, 60 s at 300 req/s;
the pacing tick is 0.5 s, the calibration's 12 simulated minutes), with the campaigns that
won enough in a calibration replay, their budgets sized so that spend at pacing rate 1
is 1.5x the budget (``bidsim campaigns size``). The calibration is
``data/day-1m-calibration.json``, the campaigns of the report of::

    bidsim gen --out day.jsonl.gz --minutes 1 --rate 300 --seed 7
    bidsim replay day.jsonl.gz --workers 2 --pacing-tick-s 0.5 --budget-scale 1000 --json OUT

The simulator's supply is ``data/day-1m-supply.json``: the same replay of the sized
campaigns alone (``--campaigns sized.json``), the supply the live day meets, kept to
its campaigns' ``ecpm_usd``, ``spend_by_hour``, ``spend_micros`` and ``wins`` and its
``supply_book``, from which the simulator reads each campaign's supply while the other
is paced. Without the other campaigns bidding, northwind and ridgeway win 1.40x and
1.48x what they won in the calibration, so the calibration under-states the live day's
supply.

Checked, on the scale of a one-minute day. A campaign buys 90-280 impressions a day,
4-12 a simulated hour: an hour's spend varies by 35-55% (``limits.hourly_noise_ratio``),
so the +-10% hourly band is noise on both sides, and one simulated day is too: the
offline figures are the mean of 10 seeds with their range. The relations of the
acceptance, on that scale: every binding budget is spent and not past it (EOD at most
1.02, and at least the simulator's lowest day less 10 points); the live EOD spend lies
within 10 points of the simulator's range, and of its range on the supply the live
bidder let through (``offline_admitted``); the cumulative error is at most the
simulator's worst plus 10 points; the ledger equals the DynamoDB totals. Hours in band
are not compared: live had 0-5 of 24 (northwind) and 1-3 (ridgeway) over four runs,
offline 2-7 and 3-10. Measured, four runs (three beside two CPU hogs, one beside the
chaos scenarios): northwind live 0.966-0.982 against offline 0.954 (0.905-0.978);
ridgeway 0.926-0.952 against 0.932 (0.925-0.937), its tail (one impression at the
maximum bid) 7% of its budget. The replay spreads its requests over 128 connections
(its default), so each worker gets about half of them (docs/replay.md): with one
worker getting most of them, ridgeway left hours of its budget unspent. They fail when
pacing does: a breaker tripping on noise left 4% spent, a lease below one impression
at the maximum bid left 0%, and a simulator that let nodes spend leases a live node
cannot bid from put ridgeway's offline EOD at 0.955 against 0.865 live.
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
from bidder.replay.load_shed import admission
from bidder.replay.offline_days import offline_settings
from bidder.replay.pacing_figures import pacing_section, sized
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import to_json
from bidder.replay.stream_clock import ClockFit, on_clock
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

pytestmark = [pytest.mark.long(90), pytest.mark.timeout(300)]

CALIBRATION = Path(__file__).parent / "data" / "day-1m-calibration.json"
SUPPLY = Path(__file__).parent / "data" / "day-1m-supply.json"
SUPPLY_RATIO = 1.5
REPLAY_SPEED = 1.0
"""The recorded pace: a second of the machine's stalls (another test's load on its 2
cores) is 24 simulated minutes, two pacing ticks."""
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
    clock = ClockFit.of(records).clock(REPLAY_SPEED)
    assert clock is not None
    start_at_ms = time.time_ns() // 1_000_000 + round(LEAD_S * 1000)
    base = live_settings(
        stack,
        tmp_path,
        campaigns_path=campaigns_file,
        pacing_tick_s=0.5 / REPLAY_SPEED,
        chunk_periods=CHUNK_PERIODS,
        breaker_window_s=BREAKER_OFF_S,
    )
    settings = on_clock(base, clock, start_at_ms)
    budgets = budgets_of(campaigns)
    options = ReplayOptions(speed=REPLAY_SPEED, deadline_ms=settings.deadline_ms, budgets=budgets)
    totals = Totals(settings, [(c.id, c.advertiser) for c in campaigns])
    async with running_bidder(settings) as bidder:
        await asyncio.sleep(max(start_at_ms / 1000 - time.time(), 0.0))
        result = await replay(records, f"{bidder.bid_url}/openrtb2/bid", options)
        notices = await notice_outcomes(bidder.admin_url)
        entries = await asyncio.to_thread(
            wait_for_ledger, stack.aws_endpoint, settings.spend_stream, notices["billed"]
        )
        campaign_sums, _ = await asyncio.to_thread(wait_for_totals, totals, entries)
    offline = offline_settings(settings, clock.speed)
    report = to_json(result)
    supply = orjson.loads(SUPPLY.read_bytes())
    pacing = pacing_section(
        report["campaigns"], budgets, supply["campaigns"], offline, supply["supply_book"],
        admission(report, supply),
    )  # fmt: skip
    (tmp_path / "report.json").write_bytes(orjson.dumps({**report, "pacing": pacing}))
    return {"pacing": pacing, "sums": campaign_sums, "late_ms": start_at_ms}


@pytest.fixture(scope="module")
def day(aws_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with LocalStack(aws_endpoint=aws_endpoint) as stack:
        return asyncio.run(_day(stack, tmp_path_factory.mktemp("day")))


def _binding(day: dict[str, Any]) -> dict[str, Any]:
    found = {cid: entry for cid, entry in day["pacing"].items() if entry["binds"]}
    assert len(found) >= 2, day["pacing"]
    return found


def _why(cid: str, entry: dict[str, Any]) -> str:
    """A failed check's context in full (the report is kept as ``report.json`` in the
    module's temporary directory)."""
    keys = (
        "live",
        "offline_range",
        "offline_admitted",
        "hourly_spend_micros",
        "hourly_target_micros",
    )
    return f"{cid}: " + ", ".join(f"{key}={entry.get(key)}" for key in keys)


def _near(value: float, bounds: list[float], points: float) -> bool:
    low, high = bounds
    return low - points <= value <= high + points


def test_binding_budgets_are_spent_to_their_end_and_not_past_it(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        lowest = entry["offline_range"]["eod_spend_ratio"][0]
        assert lowest - 0.10 <= entry["live"]["eod_spend_ratio"] <= 1.02, _why(cid, entry)


def test_the_cumulative_spend_tracks_the_curve_as_well_as_offline(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        worst = entry["offline_range"]["max_cum_error_ratio"][1]
        assert entry["live"]["max_cum_error_ratio"] <= worst + 0.10, _why(cid, entry)


def test_the_ledger_equals_the_totals(day: dict[str, Any]) -> None:
    assert day["sums"].dynamo == day["sums"].ledger


def test_the_live_day_lands_within_the_simulators_range(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        live, bounds = entry["live"], entry["offline_range"]
        assert _near(live["eod_spend_ratio"], bounds["eod_spend_ratio"], 0.10), _why(cid, entry)


def test_on_the_supply_live_let_through_the_simulator_lands_where_live_does(
    day: dict[str, Any],
) -> None:
    for cid, entry in _binding(day).items():
        live, admitted = entry["live"], entry["offline_admitted"]
        assert admitted is not None, _why(cid, entry)
        bounds = admitted["range"]["eod_spend_ratio"]
        assert _near(live["eod_spend_ratio"], bounds, 0.10), _why(cid, entry)


def test_the_simulator_reads_its_supply_from_the_book(day: dict[str, Any]) -> None:
    for cid, entry in _binding(day).items():
        assert entry["offline_supply"] == "book", _why(cid, entry)


def test_an_hour_here_is_too_few_impressions_for_the_hourly_band(day: dict[str, Any]) -> None:
    """Why hours in band are not asserted: neither 90% nor near the simulator's."""
    for entry in _binding(day).values():
        assert entry["limits"]["hourly_noise_ratio"] > 0.10
