"""The chaos suite's short form: each scenario, on its own stack, must pass.

Each test calls the same scenario function ``scripts/chaos.py`` runs, with
``short=True`` (small streams, a few seconds of replay), and asserts it passed; a
failure message lists the failing checks (name, expected, measured). Every feature
the scenarios need exists in this tree, so a scenario reporting itself *pending*
(feature absent) fails here too: it would mean a regression, not a skip. What each
scenario injects and checks is in its module's docstring (``bidder/chaos/scenarios/``);
the full-run figures are in docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bidder.chaos import SCENARIOS, ScenarioOptions
from bidder.chaos.result import PENDING

pytestmark = pytest.mark.chaos


def _passes(name: str, tmp_path: Path) -> None:
    result = SCENARIOS[name](ScenarioOptions(tmp_path, short=True))
    assert result.status != PENDING, f"{name} is pending: {result.explain()}"
    assert result.passed, f"{name} failed:\n{result.explain()}"


def test_steady_replay_answers_in_time_and_the_ledger_matches_the_totals(tmp_path: Path) -> None:
    _passes("steady", tmp_path)


def test_unreadable_budget_state_fails_closed_beyond_the_held_leases(tmp_path: Path) -> None:
    _passes("budget_unreadable", tmp_path)


def test_runaway_spend_trips_the_breaker_and_the_bidder_stops_bidding(tmp_path: Path) -> None:
    _passes("runaway_spend", tmp_path)


def test_a_10x_surge_is_shed_with_204s_and_memory_stays_bounded(tmp_path: Path) -> None:
    _passes("surge", tmp_path)


def test_duplicate_auctions_across_ssps_get_one_bid_each(tmp_path: Path) -> None:
    _passes("duplicate_auctions", tmp_path)


def test_a_stalled_then_dead_profile_store_fails_soft(tmp_path: Path) -> None:
    _passes("profile_store_down", tmp_path)


def test_a_killed_cluster_master_fails_over_without_a_bidder_restart(tmp_path: Path) -> None:
    _passes("master_failover", tmp_path)


def test_a_stalled_reconciler_bounds_overspend_to_two_chunks_per_node(tmp_path: Path) -> None:
    _passes("reconciler_stall", tmp_path)


def test_bills_acknowledged_while_the_spend_stream_is_down_are_not_lost(tmp_path: Path) -> None:
    _passes("spend_stream_down", tmp_path)


def test_a_lagging_spend_stream_stops_the_grants_and_spend_within_the_bound(
    tmp_path: Path,
) -> None:
    _passes("spend_stream_lag", tmp_path)


def test_a_worker_killed_with_sigkill_loses_no_acknowledged_bill(tmp_path: Path) -> None:
    _passes("worker_kill9", tmp_path)


def test_every_scenario_has_a_test_here() -> None:
    assert set(SCENARIOS) == {
        "steady", "budget_unreadable", "runaway_spend", "surge", "duplicate_auctions",
        "profile_store_down", "master_failover", "reconciler_stall", "spend_stream_down",
        "spend_stream_lag", "worker_kill9", "region_partition",
    }  # fmt: skip


def test_a_region_partition_heals_into_the_billed_counts_everywhere(tmp_path: Path) -> None:
    _passes("region_partition", tmp_path)
