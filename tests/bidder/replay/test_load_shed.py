"""Requests shed for load, over a replay, by simulated hour and by minute."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bidder.replay.hourly_shares import WIDEST_HOURS
from bidder.replay.load_shed import (
    MIN_HOUR_REQUESTS,
    SHED_GAP,
    Admission,
    ShedTally,
    admission,
    hourly_shed_shares,
    hours_shed_above,
    render_shed,
    shed_section,
    shed_share,
)

HOUR_MS = 3_600_000
DAY_MS = 1_767_571_200_000  # 2026-01-05 00:00 UTC


def _report(requests: list[int], shed: list[int]) -> dict[str, Any]:
    reasons = {"overloaded": sum(shed), "geo": 1}
    return {
        "requests": sum(requests),
        "nbr_reasons": reasons,
        "load_shed_by_hour": {"requests": requests, "shed": shed},
    }


def test_the_load_shed_share_counts_overloaded_and_deadline_answers() -> None:
    report = {"requests": 1_000, "nbr_reasons": {"overloaded": 70, "deadline": 30, "geo": 500}}
    assert shed_share(report) == 0.1
    assert shed_share({"requests": 0}) is None


def test_the_tally_counts_by_the_simulated_hour_of_each_request() -> None:
    tally = ShedTally()
    for ts, reason in [
        (DAY_MS + 7 * HOUR_MS, "overloaded"),
        (DAY_MS + 7 * HOUR_MS + 59 * 60_000, "deadline"),
        (DAY_MS + 7 * HOUR_MS + 1, "geo"),
        (DAY_MS + 8 * HOUR_MS, None),
        (DAY_MS + 23 * HOUR_MS, "deadline"),
    ]:
        tally.see(ts)
        tally.answer(reason, ts)
    got = tally.json()["load_shed_by_hour"]
    assert got["requests"][7] == 3 and got["requests"][8] == 1 and got["requests"][23] == 1
    assert got["shed"][7] == 2 and got["shed"][8] == 0 and got["shed"][23] == 1
    assert sum(got["requests"]) == 5 and sum(got["shed"]) == 3
    minutes = tally.json()["load_shed_by_minute"]
    assert len(minutes["requests"]) == 24 * 60
    assert minutes["requests"][7 * 60] == 2 and minutes["requests"][7 * 60 + 59] == 1
    assert minutes["shed"][7 * 60] == 1 and minutes["shed"][7 * 60 + 59] == 1
    assert sum(minutes["requests"]) == 5 and sum(minutes["shed"]) == 3


def test_an_hour_with_few_requests_has_no_share() -> None:
    requests = [MIN_HOUR_REQUESTS] * 24
    requests[3] = MIN_HOUR_REQUESTS - 1
    shares = hourly_shed_shares(_report(requests, [10] * 24))
    assert shares is not None
    assert shares[3] is None
    assert shares[4] == 10 / MIN_HOUR_REQUESTS
    assert hourly_shed_shares({"requests": 5}) is None


def test_the_hours_live_shed_most_above_the_calibration_are_named_widest_first() -> None:
    calibration = [0.01] * 24
    live = [0.01] * 24
    live[7], live[12], live[20], live[2] = 0.15, 0.05, 0.08, 0.04
    live[9] = 0.01 + SHED_GAP / 2  # under the gap: not named
    got = hours_shed_above(live, calibration)
    assert got == [
        {"hour": 7, "live": 0.15, "calibration": 0.01},
        {"hour": 20, "live": 0.08, "calibration": 0.01},
        {"hour": 12, "live": 0.05, "calibration": 0.01},
    ]
    assert hours_shed_above(calibration, live) == []
    assert hours_shed_above(None, calibration) is None


@given(
    st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=24, max_size=24),
    st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=24, max_size=24),
)
def test_named_hours_are_few_distinct_and_each_above_by_the_gap(
    live: list[float | None], calibration: list[float | None]
) -> None:
    got = hours_shed_above(live, calibration)
    assert got is not None and len(got) <= WIDEST_HOURS
    assert len({h["hour"] for h in got}) == len(got)
    gaps = [h["live"] - h["calibration"] for h in got]
    # Widest first, to the rounding of the shares (4 decimals each).
    assert all(wider >= narrower - 1e-4 for wider, narrower in pairwise(gaps))
    for h in got:
        mine, theirs = live[int(h["hour"])], calibration[int(h["hour"])]
        assert mine is not None and theirs is not None and mine - theirs >= SHED_GAP


def test_the_section_and_the_terminal_name_the_hour_live_lost() -> None:
    requests = [1_000] * 24
    live_shed, calibration_shed = [10] * 24, [10] * 24
    live_shed[7] = 150
    section = shed_section(_report(requests, live_shed), _report(requests, calibration_shed))
    assert section["hours_above_calibration"] == [{"hour": 7, "live": 0.15, "calibration": 0.01}]
    assert section["live"] == round(sum(live_shed) / 24_000, 4)
    text = render_shed(section)
    assert "07:00 15.0% against 1.0%" in text


def test_the_report_says_when_live_shed_more_than_its_calibration() -> None:
    assert "live lost supply" in render_shed({"live": 0.25, "calibration": 0.10})
    assert "short of what live met" in render_shed({"live": 0.05, "calibration": 0.20})
    assert render_shed({"live": 0.10, "calibration": 0.105}).endswith("calibration 10.5%")
    assert "unknown without --supply-from" in render_shed(shed_section({"requests": 9}, None))


def test_admission_is_the_share_not_shed_each_minute_and_puts_back_the_calibrations_own() -> None:
    minutes = {"requests": [0] * (24 * 60), "shed": [0] * (24 * 60)}
    minutes["requests"][600], minutes["shed"][600] = 200, 50
    minutes["requests"][601] = 10
    live = {"load_shed_by_minute": minutes}
    hourly = [MIN_HOUR_REQUESTS * 2] * 24
    hourly[5] = 1  # too few requests: the hour takes the day's share
    calibration = _report(hourly, [MIN_HOUR_REQUESTS // 5] * 24)  # 10% an hour
    got = admission(live, calibration)
    assert got is not None
    assert got.minutes[600] == 0.75 and got.minutes[601] == 1.0 and got.minutes[0] == 1.0
    assert got.unshed[0] == 1 / 0.9
    assert got.unshed[5] == 1 / (1 - shed_share(calibration))  # type: ignore[operator]
    assert admission(live, None) == Admission(got.minutes, (1.0,) * 24)
    assert admission({"requests": 5}, calibration) is None
    all_shed = _report([MIN_HOUR_REQUESTS] * 24, [MIN_HOUR_REQUESTS] * 24)
    assert admission(live, all_shed) == Admission(got.minutes, (1.0,) * 24)
