"""PNG plots of a simulated day and of forecast-error days (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from pacing.curves import HOUR_S
from pacing.report import hourly
from pacing.simulate import Trace

USD = 1_000_000


def write_plots(trace: Trace, out_dir: Path, asap: Trace | None = None) -> list[Path]:
    """Spend vs target, pacing rate, per-hour error; returns the PNG paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        _spend_vs_target(trace, asap, out_dir / "spend_vs_target.png"),
        _rate(trace, out_dir / "pacing_rate.png"),
        _hourly_error(trace, out_dir / "hourly_error.png"),
    ]


def _spend_vs_target(trace: Trace, asap: Trace | None, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    hours = (trace.t_s + trace.scenario.config.tick_s) / HOUR_S
    target = [trace.target_at(float(t)) for t in np.arange(0, 86_401, 600)]
    ax.plot(np.arange(0, 86_401, 600) / HOUR_S, np.array(target) / USD, label="target", lw=2)
    ax.plot(hours, trace.cum / USD, label="paced spend", lw=1)
    if asap is not None:
        ax.plot((asap.t_s + asap.scenario.config.tick_s) / HOUR_S, asap.cum / USD,
                label="ASAP (no pacing)", lw=1, ls="--")  # fmt: skip
    ax.set(xlabel="hour (UTC)", ylabel="cumulative spend (USD)", xlim=(0, 24))
    ax.set_title("Spend vs target over the day")
    ax.legend()
    return _save(fig, path)


def _rate(trace: Trace, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot(trace.t_s / HOUR_S, trace.rate, lw=0.8)
    ax.set(xlabel="hour (UTC)", ylabel="pacing rate (bid probability)", xlim=(0, 24), ylim=(0, 1))
    ax.set_title("Pacing rate")
    return _save(fig, path)


def _hourly_error(trace: Trace, path: Path) -> Path:
    spend, target = hourly(trace)
    errors = [100 * (s - t) / t for s, t in zip(spend, target, strict=True)]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar(range(len(errors)), errors)
    ax.axhline(10, color="grey", ls=":")
    ax.axhline(-10, color="grey", ls=":")
    ax.set(xlabel="hour (UTC)", ylabel="hourly spend vs target (%)")
    ax.set_title("Per-hour error (band: +-10%)")
    return _save(fig, path)


def write_day_plot(name: str, report: dict[str, Any], out_dir: Path) -> Path:
    """One forecast-error day (``pacing.forecast_error.scenario_report``): hourly spend,
    paced and ASAP, against the achievable curve and its +-10% band."""
    out_dir.mkdir(parents=True, exist_ok=True)
    reach = np.array(report["paced"]["hourly_achievable_micros"]) / USD
    hours = np.arange(len(reach))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.fill_between(hours, 0.9 * reach, 1.1 * reach, step="mid", alpha=0.2, label="+-10%")
    ax.step(hours, reach, where="mid", lw=2, label="achievable")
    for key, label, style in (("paced", "paced", "-"), ("asap", "ASAP (no pacing)", "--")):
        spend = np.array(report[key]["hourly_spend_micros"]) / USD
        ax.plot(hours, spend, marker=".", ls=style, lw=1, label=label)
    ax.set(xlabel="hour (UTC)", ylabel="spend in the hour (USD)", xlim=(-0.5, 23.5))
    ax.set_title(f"{name}: hourly spend vs what the supply allowed")
    ax.legend()
    return _save(fig, out_dir / f"{name}-hourly.png")


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
