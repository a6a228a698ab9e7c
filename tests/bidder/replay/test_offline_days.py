"""The offline days set beside a live day: the live stack's settings, its loop's delay."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from bidder.replay.campaign_outcomes import Budget
from bidder.replay.offline_days import (
    OfflineSettings,
    loop_delay_ticks,
    offline_day,
    offline_settings,
)
from bidder.serve.settings import Settings
from pacing.config_file import pacing_doc
from pacing.curves import STANDARD
from pacing.pid import PidGains
from pacing.report import tracking
from pacing.simulate import run

pytestmark = pytest.mark.pure

BUDGET = 2_000_000
CAMPAIGN_BUDGET = Budget(BUDGET, STANDARD, max_cost_micros=10_000)
SUPPLY_RATIO = 1.2
"""The live day's: supply at rate 1 over the budget."""
CALIBRATED = {
    "spend_by_hour": [
        round(SUPPLY_RATIO * BUDGET * (STANDARD.cum[h + 1] - STANDARD.cum[h])) for h in range(24)
    ],
    "ecpm_usd": 2.0,
}


def test_the_loop_delay_is_the_ledger_delay_and_half_a_refresh_in_ticks() -> None:
    assert loop_delay_ticks(0.25, 0.5, 1.0) == pytest.approx(0.5)
    assert loop_delay_ticks(0.25, 1.0, 5.0) == pytest.approx(0.15)
    assert loop_delay_ticks(0.0, 0.0, 5.0) == 0.0


def test_a_live_day_on_one_second_ticks_is_simulated_half_a_tick_behind() -> None:
    live = Settings(workers=2, pacing_tick_s=1.0, lease_refresh_s=1.0)
    offline = offline_settings(live, speed=72.0)
    assert (offline.nodes, offline.tick_s) == (2, 72.0)
    # a node refreshes at most every half tick: 0.5 s here, so 0.25 s on average
    assert offline.loop_delay_ticks == pytest.approx(0.5)
    day = offline_day(CALIBRATED, CAMPAIGN_BUDGET, offline)
    assert day is not None and day.scenario.ledger_lag_ticks == offline.loop_delay_ticks


def test_the_offline_days_run_the_gains_of_the_live_pacing_file(tmp_path: Path) -> None:
    gains = PidGains(0.05, 0.002, 0.0)
    path = tmp_path / "pacing.json"
    path.write_bytes(orjson.dumps(pacing_doc(gains, 96, STANDARD, "standard", {})))
    offline = offline_settings(Settings(pacing_tick_s=1.0, pacing_config=path), speed=72.0)
    assert offline.gains == gains and offline.chunk_periods == 96
    assert offline.summary()["kp"] == 0.05
    day = offline_day(CALIBRATED, CAMPAIGN_BUDGET, offline)
    assert day is not None and day.scenario.config.gains == gains


def _mean_cum_error(offline: OfflineSettings) -> float:
    day = offline_day(CALIBRATED, CAMPAIGN_BUDGET, offline)
    assert day is not None
    scenario = day.with_supply(day.supply_micros)
    assert scenario is not None
    errors = [tracking(run(replace(scenario, seed=s)))["max_cum_error_ratio"] for s in range(1, 6)]
    return statistics.fmean(errors)


def test_a_slower_loop_tracks_the_curve_less_closely() -> None:
    prompt = OfflineSettings(nodes=2, tick_s=72.0, chunk_periods=4, breaker_window_s=86_400.0)
    slow = replace(prompt, loop_delay_ticks=0.5)  # the live day's
    assert _mean_cum_error(slow) > _mean_cum_error(prompt)
