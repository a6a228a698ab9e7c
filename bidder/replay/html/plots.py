"""The report's plots as inline SVG (matplotlib, Agg backend: no display needed).

Imported only when a report is rendered, after the replay: matplotlib costs a
second to import and never belongs on the replay's send path. Text is drawn as
paths (matplotlib's default ``svg.fonttype``), so the SVG needs no font.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from hdrh.histogram import HdrHistogram
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

_STEPS_PER_DECADE = 20


def percentile_curve(histogram: HdrHistogram) -> tuple[list[float], list[float]]:
    """(1/(1-p) values, ms values) from p50 up to the last sample, HdrHistogram style."""
    total = histogram.get_total_count()
    if total == 0:
        return [], []
    xs, ys = [], []
    for step in range(math.ceil(_STEPS_PER_DECADE * math.log10(total))):
        x = max(2.0, 10 ** (step / _STEPS_PER_DECADE))
        xs.append(x)
        ys.append(histogram.get_value_at_percentile(100 * (1 - 1 / x)) / 1000)
    xs.append(max(2.0, float(total)))
    ys.append(histogram.get_max_value() / 1000)
    return xs, ys


def latency_percentiles(
    histograms: Mapping[str, HdrHistogram],
    deadline_ms: float,
    title: str = "Latency by percentile: corrected (from the intended send) vs uncorrected",
) -> str:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, histogram in histograms.items():
        xs, ys = percentile_curve(histogram)
        ax.plot(xs, ys, label=name, lw=1.5, drawstyle="steps-post")
    ax.axhline(deadline_ms, color="grey", ls=":", label=f"deadline {deadline_ms:g} ms")
    ax.set_xscale("log")
    ticks = [2, 10, 100, 1_000, 10_000, 100_000, 1_000_000]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([_percentile_label(t) for t in ticks])
    ax.set(xlabel="percentile (log scale of 1/(1-p))", ylabel="latency (ms)")
    ax.set_title(title)
    ax.legend()
    return _svg(fig)


def _percentile_label(x: float) -> str:
    return f"{100 * (1 - 1 / x):.6g}%"


def timeline(series: Mapping[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.8))
    seconds = range(int(series["seconds"]))
    for name in ("sent", "bids", "no_bids", "timeouts", "errors"):
        if any(series[name]):
            ax.plot(seconds, series[name], label=name.replace("_", "-"), lw=1)
    if series["warmup_s"]:
        ax.axvspan(0, series["warmup_s"], color="grey", alpha=0.15, label="warm-up")
    ax.set(xlabel="second of the replay", ylabel="per second")
    ax.set_title("Requests sent and answers received per second")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _svg(fig)


def no_bid_reasons(reasons: Mapping[str, int]) -> str:
    names = list(reasons)[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.3 * max(len(names), 1)))
    ax.barh(names, [reasons[n] for n in names])
    ax.set(xlabel="204 answers")
    ax.set_title("No-bid reasons")
    return _svg(fig)


def spend_curves(campaigns: Mapping[str, Mapping[str, Any]]) -> str:
    """Cumulative spend by simulated hour, each campaign as a share of its own total,
    against its pacing target as a share of the target's total (one dashed line per
    distinct target shape). A replayed stream is a day in minutes and spends a sliver
    of a daily budget, so shapes compare where absolute figures would not."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    hours = list(range(25))
    spending = {name: c for name, c in campaigns.items() if c["spend_micros"] > 0}
    for name, figures in spending.items():
        ax.plot(hours, _cumulative_share(figures["spend_by_hour"]), label=name, lw=1.2)
    targets = {
        tuple(round(v, 4) for v in _cumulative_share(c["target_by_hour"]))
        for c in spending.values()
        if c["target_by_hour"] and sum(c["target_by_hour"]) > 0
    }
    for i, target in enumerate(sorted(targets)):
        label = "pacing target" if len(targets) == 1 else f"pacing target {i + 1}"
        ax.plot(hours, target, color="black", ls="--", lw=1.5, label=label)
    ax.set(
        xlabel="simulated hour (request ts, UTC)", ylabel="share of the run's total", xlim=(0, 24)
    )
    ax.set_title("Spend over the simulated day per campaign against its pacing target")
    if spending:
        ax.legend(fontsize="x-small", ncol=2)
    return _svg(fig)


def pacing_day(section: Mapping[str, Mapping[str, Any]]) -> str:
    """Per campaign, spend per simulated hour (bars) against the target (steps), and the
    offline simulator's spend on the same day where it ran (dashed); USD."""
    names = list(section)
    cols = 2 if len(names) > 1 else 1
    rows = max(math.ceil(len(names) / cols), 1)
    fig, axes = plt.subplots(rows, cols, figsize=(9, 2.6 * rows), squeeze=False)
    hours = list(range(24))
    for ax, name in zip(axes.flat, names, strict=False):
        entry = section[name]
        ax.bar(hours, _usd(entry["hourly_spend_micros"]), width=0.8, label="spend", align="edge")
        target = _usd(entry["hourly_target_micros"])
        ax.step([*hours, 24], [*target, target[-1]], where="post", color="black", label="target")
        if entry.get("offline_hourly"):
            offline = _usd(entry["offline_hourly"])
            ax.step([*hours, 24], [*offline, offline[-1]], where="post", ls="--", label="offline")
        ax.set_title(name, fontsize="small")
        ax.set(xlim=(0, 24), xlabel="simulated hour (UTC)", ylabel="USD")
        ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    return _svg(fig)


def _usd(micros: Sequence[float]) -> list[float]:
    return [value / 1_000_000 for value in micros]


def _cumulative_share(by_hour: Sequence[float]) -> list[float]:
    total, running, points = sum(by_hour), 0.0, [0.0]
    for value in by_hour:
        running += value
        points.append(running / total if total else 0.0)
    return points


def _svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element (the XML prologue and doctype dropped)."""
    buffer = io.StringIO()
    fig.tight_layout()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]
