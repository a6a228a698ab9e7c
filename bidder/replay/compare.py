"""Two replay reports side by side: every figure's change, and whether latency got worse.

Every number in both JSON reports (``bidder.replay.report.to_json``) is listed with its
change; series (per-second counts, per-hour spend) and the encoded histograms are not
figures and are left out.

Run-to-run noise. Two runs of the same build never give the same p99. Each run's
corrected latency histogram is resampled with replacement (a Poisson bootstrap over its
recorded values) ``RESAMPLES`` times; the
2.5th and 97.5th percentiles of the resampled ``new - base`` differences bound the
change resampling alone could explain. That is sampling noise only: on a shared
machine a whole run moves with its environment (its share of fast shed 204s, a
neighbour's load), more than resampling shows. Given more runs of the base build
(``base_runs``), the spread of their percentile (max - min, base included) widens the
interval on both sides. A latency percentile *regresses* when that whole
interval lies above zero (the change is beyond the noise) and the change is larger
than the threshold (default 10% of the base: small real changes are not worth failing
a build for). The generator is seeded, so the same two reports always get the same
verdict. A report without histograms (written before they were kept) gets the
threshold alone, and the output says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

RESAMPLES = 1_000
INTERVAL = (2.5, 97.5)
DEFAULT_THRESHOLD = 0.10
LATENCY_PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))
_NOT_FIGURES = {"latency_histograms", "timeline", "spend_by_hour", "target_by_hour", "pacing"}
"""Not measurements: ``pacing`` is the settings the run used, shown beside the figures."""


@dataclass(frozen=True, slots=True)
class FigureChange:
    name: str
    base: float | None
    new: float | None

    @property
    def relative(self) -> float | None:
        if self.base is None or self.new is None or self.base == 0:
            return None
        return (self.new - self.base) / abs(self.base)


@dataclass(frozen=True, slots=True)
class LatencyChange:
    name: str
    base_ms: float
    new_ms: float
    interval_ms: tuple[float, float] | None
    """Bootstrap interval of ``new - base``, widened by ``spread_ms``; None without
    histograms."""
    threshold: float
    spread_ms: float = 0.0
    """The percentile's range over the base build's runs (0 with one run)."""

    @property
    def beyond_noise(self) -> bool:
        return self.interval_ms is None or self.interval_ms[0] > 0

    @property
    def regression(self) -> bool:
        over = self.new_ms > self.base_ms * (1 + self.threshold)
        return over and self.beyond_noise


@dataclass(frozen=True, slots=True)
class Comparison:
    figures: list[FigureChange]
    latency: list[LatencyChange]

    @property
    def regressions(self) -> list[str]:
        return [change.name for change in self.latency if change.regression]


def compare(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    threshold: float = DEFAULT_THRESHOLD,
    base_runs: Sequence[Mapping[str, Any]] = (),
) -> Comparison:
    """``base_runs``: more runs of the base build, for the run-to-run spread. Raises
    ValueError naming what a report lacks."""
    base_figures, new_figures = dict(figures_of(base)), dict(figures_of(new))
    names = list(base_figures) + [name for name in new_figures if name not in base_figures]
    changes = [FigureChange(n, base_figures.get(n), new_figures.get(n)) for n in names]
    return Comparison(changes, _latency_changes(base, new, threshold, base_runs))


def figures_of(report: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a report, named by its path of keys (``latency_ms.corrected.p99``)."""
    for key, value in report.items():
        name = f"{prefix}{key}"
        if key in _NOT_FIGURES:
            continue
        if isinstance(value, Mapping):
            yield from figures_of(value, name + ".")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield name, float(value)


def _latency_changes(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    threshold: float,
    base_runs: Sequence[Mapping[str, Any]],
) -> list[LatencyChange]:
    base_ms, new_ms = _corrected_ms(base), _corrected_ms(new)
    runs_ms = [base_ms, *map(_corrected_ms, base_runs)]
    base_histogram, new_histogram = _histograms(base), _histograms(new)
    intervals = {}
    if base_histogram is not None and new_histogram is not None:
        percentiles = [percentile for _, percentile in LATENCY_PERCENTILES]
        rng = np.random.default_rng(0)
        intervals = bootstrap_intervals(base_histogram, new_histogram, percentiles, rng)
    changes = []
    for name, percentile in LATENCY_PERCENTILES:
        spread = max(run[name] for run in runs_ms) - min(run[name] for run in runs_ms)
        interval = None
        if percentile in intervals:
            low, high = intervals[percentile]
            interval = (low - spread, high + spread)
        changes.append(
            LatencyChange(name, base_ms[name], new_ms[name], interval, threshold, spread)
        )
    return changes


def _corrected_ms(report: Mapping[str, Any]) -> Mapping[str, float]:
    try:
        corrected: Mapping[str, float] = report["latency_ms"]["corrected"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a replay report: no latency_ms.corrected ({exc})") from exc
    return corrected


def _histograms(report: Mapping[str, Any]) -> HdrHistogram | None:
    encoded = report.get("latency_histograms", {}).get("corrected")
    if not encoded:
        return None
    try:
        histogram: HdrHistogram = HdrHistogram.decode(encoded)
    except Exception as exc:  # hdrh raises bare errors of several kinds for bad input
        raise ValueError(f"latency_histograms.corrected cannot be decoded: {exc}") from exc
    return histogram if histogram.get_total_count() else None


def bootstrap_intervals(
    base: HdrHistogram, new: HdrHistogram, percentiles: Sequence[float], rng: np.random.Generator
) -> dict[float, tuple[float, float]]:
    """The ``INTERVAL`` of resampled ``new - base`` at each percentile, in ms."""
    base_values, new_values = (_resampled(h, percentiles, rng) for h in (base, new))
    intervals = {}
    for percentile in percentiles:
        difference = new_values[percentile] - base_values[percentile]
        low, high = np.percentile(difference, INTERVAL)
        intervals[percentile] = float(low) / 1000, float(high) / 1000
    return intervals


def _resampled(
    histogram: HdrHistogram, percentiles: Sequence[float], rng: np.random.Generator
) -> dict[float, Any]:
    """``RESAMPLES`` values (us) of each percentile over resamples of the histogram.

    A Poisson bootstrap: each recorded value's count is redrawn as Poisson(count), which
    approximates resampling with replacement and is one vectorized draw. Percentiles are
    picked as ``HdrHistogram.get_value_at_percentile`` picks them.
    """
    values, counts = recorded(histogram)
    cumulative = rng.poisson(counts, size=(RESAMPLES, len(counts))).cumsum(axis=1)
    totals = cumulative[:, -1]
    picked = {}
    for percentile in percentiles:
        ranks = np.maximum(1, np.floor(percentile / 100 * totals + 0.5))
        picked[percentile] = values[np.argmax(cumulative >= ranks[:, None], axis=1)]
    return picked


def recorded(histogram: HdrHistogram) -> tuple[np.ndarray, np.ndarray]:
    """The histogram's recorded values and their counts, as its recorded iterator gives
    them (each bucket's highest equivalent value), read from its counts array rather
    than through the iterator, which visits every bucket up to the last recorded one in
    Python."""
    counts = np.ctypeslib.as_array(histogram.counts)[: histogram.counts_len]
    indexes = np.flatnonzero(counts)
    values = [
        histogram.get_highest_equivalent_value(histogram.get_value_from_index(index))
        for index in indexes.tolist()
    ]
    return np.array(values, dtype=np.float64), counts[indexes].astype(np.float64)


def render_comparison(comparison: Comparison, threshold: float) -> str:
    width = max([len("figure"), *(len(f.name) for f in comparison.figures)]) + 2
    lines = [f"{'figure':<{width}}{'base':>16}  {'new':>16}  {'change':>10}"]
    for f in comparison.figures:
        lines.append(
            f"{f.name:<{width}}{_number(f.base):>16}  {_number(f.new):>16}  {_change(f):>10}"
        )
    lines += ["", f"latency, corrected (new - base, bootstrap {INTERVAL[0]}-{INTERVAL[1]}% interval"
              f" over {RESAMPLES:,} resamples of each run's histogram)"]  # fmt: skip
    for change in comparison.latency:
        lines.append(f"  {_latency_line(change)}")
    regressions = comparison.regressions
    lines.append(
        f"verdict: REGRESSION in {', '.join(regressions)} (beyond noise and over {threshold:.0%})"
        if regressions
        else f"verdict: no latency regression beyond noise and over {threshold:.0%}"
    )
    return "\n".join(lines)


def _latency_line(change: LatencyChange) -> str:
    delta = change.new_ms - change.base_ms
    text = f"{change.name:<4}{change.base_ms:>9.3f} -> {change.new_ms:.3f} ms  {delta:+.3f} ms"
    if change.interval_ms is None:
        return text + "  (no histograms: noise not estimated, threshold alone)" + _flag(change)
    low, high = change.interval_ms
    noise = (
        "slower beyond noise" if low > 0 else "faster beyond noise" if high < 0 else "within noise"
    )
    runs = f" (base runs spread {change.spread_ms:.3f} ms)" if change.spread_ms else ""
    return f"{text}  [{low:+.3f}, {high:+.3f}]{runs}  {noise}{_flag(change)}"


def _flag(change: LatencyChange) -> str:
    return "  REGRESSION" if change.regression else ""


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value == int(value) and abs(value) >= 1000 else f"{value:,.6g}"


def _change(f: FigureChange) -> str:
    if f.base is None or f.new is None:
        return "new" if f.base is None else "gone"
    if f.base == f.new:
        return "="
    relative = f.relative
    return f"{relative:+.2%}" if relative is not None else f"{f.new - f.base:+,.6g}"
