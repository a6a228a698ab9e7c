"""The chaos suite's pure parts: checks, results, the table, selection, the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.chaos import ScenarioResult, UnknownScenario, render_table
from bidder.chaos.cli import main
from bidder.chaos.faults import at_requests
from bidder.chaos.harness import FAULT_RATIO_MARGIN, SHORT_DROP_MARGIN, ScenarioOptions
from bidder.chaos.observe import ProbeAnswer, first_bid_after
from bidder.chaos.result import Checks, check_ratio_drop
from bidder.chaos.runner import SCENARIOS, any_failed, select
from bidder.core.ledger import LedgerEntry
from bidder.replay.ledger_audit import spend_beyond_budgets, sums_by_campaign
from bidder.replay.report import ReplayResult

DAY_MS = 86_400_000


def entry(n: int, campaign: str, cost: int, ts_ms: int = 20_000 * DAY_MS) -> LedgerEntry:
    return LedgerEntry(
        ledger_id=n, kind="bill", campaign_id=campaign, advertiser="a", creative_id="c",
        imp_id="1", bid_id=str(n), price_cpm_micros=cost * 1000, cost_micros=cost, node=1,
        ts_ms=ts_ms,
    )  # fmt: skip


def test_a_result_passes_only_when_every_check_holds() -> None:
    checks = Checks()
    checks.expect("status_5xx", 0, "==", 0)
    checks.expect("lost_ledger_entries", 2, "==", 0)
    result = ScenarioResult("x", "nothing", short=True, checks=checks.items)
    assert (result.passed, result.status) == (False, "failed")


def test_a_failed_result_explains_its_failing_checks() -> None:
    checks = Checks()
    checks.expect("recovery_s", 7.5, "<=", 5.0)
    result = ScenarioResult("x", "nothing", short=True, checks=checks.items)
    assert result.explain() == "recovery_s: expected <= 5.0, measured 7.5"


def test_a_check_of_an_unmeasured_figure_fails() -> None:
    checks = Checks()
    assert not checks.expect("recovery_s", None, "<=", 5.0)


def test_a_result_without_checks_does_not_pass() -> None:
    assert ScenarioResult("x", "nothing", short=True).status == "failed"


def test_a_pending_result_is_neither_passed_nor_failed_for_the_exit_code() -> None:
    pending = ScenarioResult("x", "nothing", short=True, pending="feature absent")
    assert (pending.status, pending.passed, any_failed([pending])) == ("pending", False, False)


def test_the_json_object_has_the_fields_the_issue_names() -> None:
    doc = ScenarioResult("x", "nothing", short=False).to_json()
    assert {
        "name", "passed", "answered_within_deadline_ratio", "status_5xx",
        "lost_ledger_entries", "overspend_micros", "overspend_bound_micros", "checks",
    } <= set(doc)  # fmt: skip
    json.dumps(doc)


def test_the_table_has_a_row_per_scenario_and_the_reasons_of_failures() -> None:
    checks = Checks()
    checks.expect("status_5xx", 3, "==", 0)
    failed = ScenarioResult("surge", "load", short=True, checks=checks.items, status_5xx=3)
    table = render_table([failed])
    assert "surge" in table.splitlines()[1] and "status_5xx: expected == 0" in table


def test_an_unknown_scenario_is_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownScenario, match="unknown scenario nope; known: steady"):
        select(["nope"])


def test_selection_keeps_the_suite_order() -> None:
    assert select(["surge", "steady"]) == ["steady", "surge"]


def test_no_names_selects_every_scenario() -> None:
    assert select([]) == list(SCENARIOS)


def test_the_command_line_refuses_an_unknown_scenario_with_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--only", "nope"])
    assert exit_info.value.code == 2
    assert "unknown scenario nope" in capsys.readouterr().err


def test_the_command_line_refuses_a_json_path_in_a_missing_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit):
        main(["--only", "steady", "--json", str(tmp_path / "no" / "out.json")])
    assert "--json: no such directory" in capsys.readouterr().err


def test_injectors_fire_just_before_their_request() -> None:
    seen: list[str] = []
    out = []
    for item in at_requests(["a", "b", "c"], {1: lambda: seen.append(f"fired after {out}")}):
        out.append(item)
    assert (out, seen) == (["a", "b", "c"], ["fired after ['a']"])


def test_recovery_is_the_first_bid_sent_after_the_fault_ended() -> None:
    answers = [
        ProbeAnswer(1.0, 200, None, ("c",)),
        ProbeAnswer(2.0, 204, "no_lease", ()),
        ProbeAnswer(2.5, 200, None, ("c",)),
    ]
    assert first_bid_after(answers, 1.5) == 1.0


def test_no_bid_after_the_fault_means_no_recovery() -> None:
    assert first_bid_after([ProbeAnswer(1.0, 204, "no_lease", ())], 0.5) is None


@given(st.lists(st.tuples(st.sampled_from("xyz"), st.integers(0, 10**6)), max_size=30))
def test_ledger_sums_add_up_to_the_total_cost(costs: list[tuple[str, int]]) -> None:
    entries = [entry(n, c, cost) for n, (c, cost) in enumerate(costs)]
    assert sum(sums_by_campaign(entries).values()) == sum(cost for _, cost in costs)


def test_spend_beyond_budgets_counts_only_the_excess() -> None:
    entries = [entry(1, "x", 70), entry(2, "x", 50), entry(3, "y", 10)]
    assert spend_beyond_budgets(entries, {"x": 100, "y": 100}) == 20


def _replayed(requests: int, within: int) -> ReplayResult:
    return ReplayResult(deadline_ms=8.0, requests=requests, within_deadline=within)


def test_a_fault_may_cost_a_few_points_of_answers_within_the_deadline() -> None:
    checks = Checks()
    scenario = ScenarioResult("x", "fault", short=True)
    check_ratio_drop(checks, scenario, [_replayed(100, 98)], [_replayed(200, 192)], 0.03)
    assert [c.ok for c in checks.items] == [True]


def test_a_fault_that_costs_more_than_the_margin_fails_its_check() -> None:
    checks = Checks()
    scenario = ScenarioResult("x", "fault", short=True)
    check_ratio_drop(checks, scenario, [_replayed(100, 98)], [_replayed(100, 80)], 0.03)
    assert (checks.items[0].measured, checks.items[0].ok) == (0.18, False)


def test_the_short_form_allows_a_larger_drop_than_a_full_run(tmp_path: Path) -> None:
    full, short = ScenarioOptions(tmp_path), ScenarioOptions(tmp_path, short=True)
    assert full.drop_margin() == FAULT_RATIO_MARGIN < SHORT_DROP_MARGIN == short.drop_margin()
    # A scenario's own looser full-run margin is kept, or raised to the short form's.
    assert full.drop_margin(0.15) == 0.15
    assert short.drop_margin(0.15) == SHORT_DROP_MARGIN
    assert short.drop_margin(0.5) == 0.5


def test_only_the_short_form_tolerates_a_few_client_timeouts(tmp_path: Path) -> None:
    full, short = ScenarioOptions(tmp_path), ScenarioOptions(tmp_path, short=True)
    assert full.timeouts_allowed(3400) == 0
    assert short.timeouts_allowed(3400) == 17  # half a percent, rounded down
    assert short.timeouts_allowed(199) == 0
    # A hung call on the loop: every request of 100 ms at 400 req/s gives up.
    assert short.timeouts_allowed(3400) < 40
