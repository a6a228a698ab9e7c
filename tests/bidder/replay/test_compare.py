"""`bidsim report compare`: every figure's change, and latency judged against the noise.

Reports are built here from recorded latencies (seeded draws), never from timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.cli import main
from bidder.replay.compare import bootstrap_intervals, compare, recorded, render_comparison
from bidder.replay.report import ReplayResult, new_latency_histogram, record_latency, to_json


def recorded_report(seed: int, slowdown: float = 1.0, samples: int = 5_000) -> dict[str, Any]:
    """A report of ``samples`` answers whose latency (us) is lognormal around 1 ms with
    a tail, every latency multiplied by ``slowdown``."""
    rng = np.random.default_rng(seed)
    result = ReplayResult(deadline_ms=8.0, requests=samples)
    for micros in rng.lognormal(np.log(1_000), 0.8, samples) * slowdown:
        record_latency(result.corrected, int(micros))
        record_latency(result.uncorrected, int(micros * 0.8))
    result.status[204] = samples
    return to_json(result)


def test_an_injected_slowdown_is_flagged() -> None:
    comparison = compare(recorded_report(1), recorded_report(2, slowdown=1.3))
    assert comparison.regressions == ["p50", "p90", "p99"]


@pytest.mark.parametrize("seeds", [(1, 2), (3, 4), (5, 6), (7, 8)])
def test_two_runs_of_the_same_build_are_quiet(seeds: tuple[int, int]) -> None:
    comparison = compare(recorded_report(seeds[0]), recorded_report(seeds[1]))
    assert comparison.regressions == []


def test_a_real_change_under_the_threshold_is_not_a_regression() -> None:
    base, new = recorded_report(1, samples=50_000), recorded_report(2, 1.05, samples=50_000)
    p50 = compare(base, new).latency[0]
    assert p50.beyond_noise and not p50.regression
    assert compare(base, new, threshold=0.02).latency[0].regression


def test_without_histograms_the_threshold_alone_decides() -> None:
    base, new = recorded_report(1), recorded_report(2, slowdown=1.3)
    del base["latency_histograms"]
    comparison = compare(base, new)
    assert comparison.latency[0].interval_ms is None
    assert comparison.regressions == ["p50", "p90", "p99"]
    assert "noise not estimated" in render_comparison(comparison, 0.1)


def test_more_base_runs_widen_the_interval_by_their_spread() -> None:
    base, new = recorded_report(1), recorded_report(2, slowdown=1.3)
    slow_base = recorded_report(3, slowdown=1.4)  # the base build, on a bad day
    alone = compare(base, new).latency[2]
    widened = compare(base, new, base_runs=[slow_base]).latency[2]
    spread = slow_base["latency_ms"]["corrected"]["p99"] - base["latency_ms"]["corrected"]["p99"]
    assert widened.spread_ms == pytest.approx(spread)
    assert alone.interval_ms is not None and widened.interval_ms is not None
    assert widened.interval_ms[0] == pytest.approx(alone.interval_ms[0] - spread)
    assert not widened.regression


def test_every_figure_is_listed_and_series_are_not() -> None:
    base, new = recorded_report(1), recorded_report(2)
    names = [change.name for change in compare(base, new).figures]
    assert {"requests", "latency_ms.corrected.p99", "auction.wins", "status.204"} <= set(names)
    assert not [n for n in names if n.startswith(("timeline", "latency_histograms"))]
    text = render_comparison(compare(base, new), 0.1)
    assert "latency_ms.uncorrected.p99_9" in text and "verdict: no latency regression" in text


@settings(max_examples=40)
@given(st.lists(st.integers(1, 1_000_000), min_size=1, max_size=200), st.sampled_from([50, 99]))
def test_the_interval_of_a_run_against_itself_holds_zero(samples: list[int], pct: int) -> None:
    histogram = new_latency_histogram()
    for value in samples:
        record_latency(histogram, value)
    (low, high), *_ = bootstrap_intervals(
        histogram, histogram, [pct], np.random.default_rng(0)
    ).values()
    assert low <= 0 <= high


@given(st.lists(st.integers(0, 60_000_000), max_size=300))
def test_the_recorded_values_are_the_histograms_own_recorded_iteration(samples: list[int]) -> None:
    histogram = new_latency_histogram()
    for value in samples:
        record_latency(histogram, value)
    expected = [
        (i.value_iterated_to, i.count_at_value_iterated_to)
        for i in histogram.get_recorded_iterator()
    ]
    for read in (histogram, HdrHistogram.decode(histogram.encode())):  # a report's, too
        values, counts = recorded(read)
        assert list(zip(values.tolist(), counts.tolist(), strict=True)) == expected


def _write(path: Path, report: dict[str, Any]) -> str:
    path.write_bytes(orjson.dumps(report))
    return str(path)


def test_the_command_exits_1_on_a_regression_and_0_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _write(tmp_path / "base.json", recorded_report(1))
    same = _write(tmp_path / "same.json", recorded_report(2))
    slow = _write(tmp_path / "slow.json", recorded_report(2, slowdown=1.3))
    assert main(["report", "compare", base, same]) == 0
    assert main(["report", "compare", base, slow]) == 1
    assert "verdict: REGRESSION in p50, p90, p99" in capsys.readouterr().out
    assert main(["report", "compare", base, slow, "--threshold", "50"]) == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"{not json", "not JSON"), (b'{"requests": 3}', "not a replay report")],
)
def test_a_file_that_is_not_a_report_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    good = _write(tmp_path / "good.json", recorded_report(1))
    assert main(["report", "compare", good, str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and expected in err and "Traceback" not in err
