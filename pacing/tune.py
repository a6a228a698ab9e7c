"""Search PID gains and chunk sizes across forecast-error days; report the best and trade-offs.

Every setting runs the scenario's full day as forecast, the two +-50% step responses,
and the day under each forecast-error scenario (``pacing.actual``; the four named ones
unless told otherwise), scored against what that day's supply allowed
(``pacing.forecast_error``). A setting is *feasible* when it meets the forecast day's
bounds (EOD 98-100%, cumulative error within 3% at every hour, >= 90% of hours in band,
back in band within 30 steps after both steps) and the acceptance on every scenario
(EOD >= 98% of achievable, >= 80% of hours within +-10% of achievable). The best
feasible setting has the smallest *worst-case* mean |hourly error| over the forecast day
and the scenarios (good across the days, not on one), then the fewest steps back into
band, then the smallest chunk. The trade-off table is the Pareto front
over (mean |hourly error|, worst step response, money exposed to a stalled reconciler =
2 chunks x nodes): what a bigger chunk or a hotter controller buys and costs.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from pacing.actual import SCENARIOS, Actual
from pacing.forecast_error import meets, vs_achievable
from pacing.report import step_response, tracking
from pacing.simulate import Scenario, run

DEFAULT_KP = (0.01, 0.02, 0.03, 0.05, 0.08)
DEFAULT_KI = (0.0005, 0.001, 0.002, 0.004)
DEFAULT_KD = (0.0,)
DEFAULT_CHUNK_PERIODS = (72, 288, 1_440, 5_760, 17_280)


def grid(
    kp: Sequence[float] = DEFAULT_KP,
    ki: Sequence[float] = DEFAULT_KI,
    kd: Sequence[float] = DEFAULT_KD,
    chunk_periods: Sequence[int] = DEFAULT_CHUNK_PERIODS,
) -> list[tuple[float, float, float, int]]:
    return list(itertools.product(kp, ki, kd, chunk_periods))


Setting = tuple[float, float, float, int]


def evaluate(
    sc: Scenario, setting: Setting, actuals: dict[str, Actual] | None = None
) -> dict[str, Any]:
    """One setting's figures on the forecast day and on each of ``actuals`` (default: all)."""
    kp, ki, kd, periods = setting
    gains = replace(sc.config.gains, kp=kp, ki=ki, kd=kd)
    tuned = replace(sc, config=replace(sc.config, gains=gains, chunk_periods_per_day=periods))
    figures = tracking(run(tuned))
    up, down = step_response(tuned, 1.5), step_response(tuned, 0.5)
    errors = [abs(e) for e in figures["hourly_error_ratio"]]
    worst_step = None if up is None or down is None else max(up, down)
    days = {
        name: vs_achievable(run(replace(tuned, actual=actual)))
        for name, actual in (SCENARIOS if actuals is None else actuals).items()
    }
    day_errors = [d["mean_abs_hourly_error"] for d in days.values()]
    return {
        "kp": kp, "ki": ki, "kd": kd, "chunk_periods_per_day": periods,
        "chunk_micros": tuned.chunk,
        "stall_exposure_micros": 2 * tuned.chunk * sc.nodes,
        "eod_spend_ratio": figures["eod_spend_ratio"],
        "max_cum_error_ratio": figures["max_cum_error_ratio"],
        "hours_in_band_ratio": figures["hours_in_band_ratio"],
        "mean_abs_hourly_error": sum(errors) / len(errors),
        "step_up_steps": up, "step_down_steps": down, "worst_step": worst_step,
        "scenarios": {
            name: {k: d[k] for k in SCENARIO_FIGURES} | {"meets": meets(d)}
            for name, d in days.items()
        },
        "worst_mean_abs_hourly_error": max([sum(errors) / len(errors), *day_errors]),
    }  # fmt: skip


SCENARIO_FIGURES = (
    "achievable_eod_ratio", "eod_vs_achievable", "hours_in_band_ratio", "mean_abs_hourly_error",
)  # fmt: skip


def feasible(row: dict[str, Any]) -> bool:
    return (
        0.98 <= row["eod_spend_ratio"] <= 1.0
        and row["max_cum_error_ratio"] <= 0.03
        and row["hours_in_band_ratio"] >= 0.9
        and row["worst_step"] is not None
        and row["worst_step"] <= 30
        and all(day["meets"] for day in row["scenarios"].values())
    )


def tune(
    sc: Scenario,
    settings: Sequence[Setting],
    progress: Callable[[int], None] | None = None,
    jobs: int = 1,
    actuals: dict[str, Actual] | None = None,
) -> dict[str, Any]:
    """Evaluate every setting (in ``jobs`` processes); the result is the same for any jobs."""
    rows = []
    chosen = SCENARIOS if actuals is None else actuals
    with contextlib.ExitStack() as stack:
        if jobs > 1:
            pool = stack.enter_context(ProcessPoolExecutor(jobs))
            n = len(settings)
            results = pool.map(evaluate, [sc] * n, settings, [chosen] * n)
        else:
            results = (evaluate(sc, s, chosen) for s in settings)
        for row in results:
            rows.append(row)
            if progress is not None:
                progress(1)
    good = [r for r in rows if feasible(r)]
    best = min(good, key=_rank) if good else None
    return {
        "scenarios": sorted(chosen),
        "settings": len(rows),
        "feasible": len(good),
        "best": best,
        "pareto": _pareto(good),
        "all": rows,
    }


def _rank(row: dict[str, Any]) -> tuple[float, int, int]:
    return (round(row["worst_mean_abs_hourly_error"], 4), row["worst_step"], row["chunk_micros"])


def _pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(r: dict[str, Any]) -> tuple[float, int, int]:
        return (r["worst_mean_abs_hourly_error"], r["worst_step"], r["stall_exposure_micros"])

    front = [r for r in rows if not any(_dominates(key(o), key(r)) for o in rows)]
    return sorted(front, key=key)


def _dominates(a: tuple[float, int, int], b: tuple[float, int, int]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
