"""Every chaos scenario has its short form in ``make test``: a module here per scenario."""

from __future__ import annotations

from pathlib import Path

from bidder.chaos import SCENARIOS


def test_every_scenario_has_a_test_here() -> None:
    assert set(SCENARIOS) == {
        "steady", "budget_unreadable", "runaway_spend", "surge", "duplicate_auctions",
        "profile_store_down", "master_failover", "reconciler_stall", "spend_stream_down",
        "spend_stream_lag", "worker_kill9", "region_partition",
    }  # fmt: skip
    here = {p.stem.removeprefix("test_") for p in Path(__file__).parent.glob("test_*.py")}
    assert set(SCENARIOS) <= here
