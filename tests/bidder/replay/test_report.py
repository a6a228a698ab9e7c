"""The replay report's per-SSP figures: what is counted, and how it is shown."""

from __future__ import annotations

import orjson

from bidder.replay.report import ReplayResult, SspResult, render_table, to_json


def _result() -> ReplayResult:
    result = ReplayResult(deadline_ms=8.0)
    delta = result.ssp("ssp-delta")
    delta.requests = 4
    for _ in range(3):
        delta.count_answer(204, "throttled", 150)
    delta.count_answer(200, None, 2_000)
    alpha = result.ssp("ssp-alpha")
    alpha.requests = 2
    alpha.count_answer(204, "geo", 900)
    alpha.count_timeout(100_000)
    return result


def test_an_ssp_is_created_on_first_use_and_then_reused() -> None:
    result = ReplayResult(deadline_ms=8.0)
    first = result.ssp("ssp-beta")
    assert result.ssp("ssp-beta") is first
    assert list(result.ssps) == ["ssp-beta"]


def test_only_204s_enter_the_no_bid_histogram() -> None:
    ssp = SspResult()
    ssp.count_answer(204, "throttled", 100)
    ssp.count_answer(200, None, 5_000)
    assert ssp.corrected.get_total_count() == 2
    assert ssp.corrected_204.get_total_count() == 1
    assert ssp.corrected_204.get_max_value() < 5_000


def test_throttled_counts_only_the_throttled_reason() -> None:
    ssp = SspResult()
    for reason in ("throttled", "throttled", "geo"):
        ssp.count_answer(204, reason, 100)
    assert ssp.throttled == 2


def test_a_timeout_is_timed_but_is_not_a_no_bid() -> None:
    ssp = SspResult(requests=1)
    ssp.count_timeout(100_000)
    assert (ssp.timeouts, ssp.corrected.get_total_count(), ssp.status[204]) == (1, 1, 0)
    assert ssp.corrected_204.get_total_count() == 0


def test_the_no_bid_share_is_204s_over_requests() -> None:
    assert _result().ssps["ssp-delta"].no_bid_share == 0.75
    assert SspResult().no_bid_share == 0.0


def test_json_lists_every_ssp_by_name_with_its_figures() -> None:
    ssps = to_json(_result())["ssps"]
    assert list(ssps) == ["ssp-alpha", "ssp-delta"]
    delta = ssps["ssp-delta"]
    assert delta["requests"] == 4
    assert delta["status"] == {"200": 1, "204": 3, "5xx": 0, "other": 0}
    assert (delta["no_bid_share"], delta["throttled"], delta["timeouts"]) == (0.75, 3, 0)
    assert delta["nbr_reasons"] == {"throttled": 3}
    assert 0.14 <= delta["latency_ms"]["corrected_204"]["p99"] <= 0.16
    assert 1.99 <= delta["latency_ms"]["corrected"]["p99"] <= 2.01


def test_json_is_serializable_with_ssps() -> None:
    assert orjson.loads(orjson.dumps(to_json(_result())))["ssps"]["ssp-alpha"]["timeouts"] == 1


def test_json_of_a_replay_without_requests_has_no_ssps() -> None:
    assert to_json(ReplayResult(deadline_ms=8.0))["ssps"] == {}


def test_the_table_has_a_row_per_ssp() -> None:
    table = render_table(_result())
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    assert rows["ssp-delta"][1:4] == ["4", "75.00%", "3"]
    assert rows["ssp-alpha"][1:4] == ["2", "50.00%", "0"]
    assert "per SSP" in table
