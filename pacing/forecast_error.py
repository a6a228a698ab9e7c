"""Tracking scored against what the actual supply allowed, paced and ASAP side by side.

The figures (docs/pacing.md, "When the day is not the forecast"):

- ``achievable_eod_ratio``: what a perfect pacer could spend by 24:00 / budget
  (``pacing.actual.achievable`` summed: the budget unless supply ran short for good).
- ``eod_spend_ratio``: spend at 24:00 / budget; ``eod_vs_achievable``: spend at 24:00 /
  the achievable total.
- ``hours_in_band_ratio``: share of the 24 hours whose spend is within +-10% of the
  hour's achievable spend; ``mean_abs_hourly_error``: mean |spend - achievable| /
  achievable over the hours with something achievable.

Acceptance (``meets``): ``eod_vs_achievable`` >= 0.98, no spend over the budget, and at
least 80% of hours in band.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pacing.actual import achievable
from pacing.report import BAND, hourly
from pacing.simulate import Scenario, Trace, run

MIN_EOD_VS_ACHIEVABLE = 0.98
MIN_HOURS_IN_BAND = 0.80


def vs_achievable(trace: Trace) -> dict[str, Any]:
    """A whole simulated day's figures against its achievable curve (module docstring)."""
    sc = trace.scenario
    spend, target = hourly(trace)
    reachable = achievable(target, sc.available_by_hour())
    in_band = [abs(s - a) <= BAND * a for s, a in zip(spend, reachable, strict=True)]
    errors = [abs(s - a) / a for s, a in zip(spend, reachable, strict=True) if a > 0]
    total, possible = sum(spend), sum(reachable)
    return {
        "achievable_eod_ratio": possible / sc.budget_micros,
        "eod_spend_ratio": total / sc.budget_micros,
        "eod_vs_achievable": total / possible if possible else 1.0,
        "over_budget_micros": max(0, total - sc.budget_micros),
        "hours_in_band_ratio": sum(in_band) / len(in_band),
        "mean_abs_hourly_error": sum(errors) / len(errors) if errors else 0.0,
        "hourly_spend_micros": spend,
        "hourly_achievable_micros": reachable,
    }


def meets(figures: dict[str, Any]) -> bool:
    return (
        figures["eod_vs_achievable"] >= MIN_EOD_VS_ACHIEVABLE
        and figures["over_budget_micros"] == 0
        and figures["hours_in_band_ratio"] >= MIN_HOURS_IN_BAND
    )


def scenario_report(sc: Scenario) -> dict[str, Any]:
    """The day paced and ASAP (rate 1, leases still apply), each against the achievable."""
    paced = vs_achievable(run(sc))
    no_breaker = replace(sc.config, breaker_ratio=float("inf"))
    asap = vs_achievable(run(replace(sc, pacing=False, config=no_breaker)))
    return {"paced": paced, "asap": asap, "meets": meets(paced)}


def render(name: str, report: dict[str, Any]) -> str:
    """One scenario's terminal table: paced beside ASAP."""
    rows = (
        ("achievable EOD / budget", "achievable_eod_ratio", "{:.1%}"),
        ("EOD spend / budget", "eod_spend_ratio", "{:.2%}"),
        ("EOD spend / achievable", "eod_vs_achievable", "{:.2%}"),
        ("hours within +-10% of achievable", "hours_in_band_ratio", "{:.0%}"),
        ("mean |hourly error| vs achievable", "mean_abs_hourly_error", "{:.2%}"),
    )
    verdict = "meets" if report["meets"] else "MISSES"
    lines = [f"{name} (paced {verdict} the acceptance)", f"{'':36} {'paced':>8} {'ASAP':>8}"]
    for label, key, fmt in rows:
        paced, asap = fmt.format(report["paced"][key]), fmt.format(report["asap"][key])
        lines.append(f"{label:36} {paced:>8} {asap:>8}")
    return "\n".join(lines)


__all__ = ["meets", "render", "scenario_report", "vs_achievable"]
