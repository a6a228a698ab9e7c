"""Search PID gains and chunk sizes on a scenario; report the best and the trade-offs.

Every setting runs the scenario's full day and the two +-50% step responses. A setting
is *feasible* when it meets the acceptance bounds (EOD 98-100%, cumulative error within
3% at every hour, >= 90% of hours in band, back in band within 30 steps after both
steps). The best feasible setting has the smallest mean |hourly error|, then the fewest
steps back into band, then the smallest chunk. The trade-off table is the Pareto front
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


def evaluate(sc: Scenario, kp: float, ki: float, kd: float, periods: int) -> dict[str, Any]:
    gains = replace(sc.config.gains, kp=kp, ki=ki, kd=kd)
    tuned = replace(sc, config=replace(sc.config, gains=gains, chunk_periods_per_day=periods))
    figures = tracking(run(tuned))
    up, down = step_response(tuned, 1.5), step_response(tuned, 0.5)
    errors = [abs(e) for e in figures["hourly_error_ratio"]]
    worst_step = None if up is None or down is None else max(up, down)
    return {
        "kp": kp, "ki": ki, "kd": kd, "chunk_periods_per_day": periods,
        "chunk_micros": tuned.chunk,
        "stall_exposure_micros": 2 * tuned.chunk * sc.nodes,
        "eod_spend_ratio": figures["eod_spend_ratio"],
        "max_cum_error_ratio": figures["max_cum_error_ratio"],
        "hours_in_band_ratio": figures["hours_in_band_ratio"],
        "mean_abs_hourly_error": sum(errors) / len(errors),
        "step_up_steps": up, "step_down_steps": down, "worst_step": worst_step,
    }  # fmt: skip


def feasible(row: dict[str, Any]) -> bool:
    return (
        0.98 <= row["eod_spend_ratio"] <= 1.0
        and row["max_cum_error_ratio"] <= 0.03
        and row["hours_in_band_ratio"] >= 0.9
        and row["worst_step"] is not None
        and row["worst_step"] <= 30
    )


def tune(
    sc: Scenario,
    settings: Sequence[tuple[float, float, float, int]],
    progress: Callable[[int], None] | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Evaluate every setting (in ``jobs`` processes); the result is the same for any jobs."""
    rows = []
    with contextlib.ExitStack() as stack:
        if jobs > 1:
            pool = stack.enter_context(ProcessPoolExecutor(jobs))
            results = pool.map(evaluate, *zip(*[(sc, *s) for s in settings], strict=True))
        else:
            results = (evaluate(sc, *s) for s in settings)
        for row in results:
            rows.append(row)
            if progress is not None:
                progress(1)
    good = [r for r in rows if feasible(r)]
    best = min(good, key=_rank) if good else None
    return {
        "settings": len(rows),
        "feasible": len(good),
        "best": best,
        "pareto": _pareto(good),
        "all": rows,
    }


def _rank(row: dict[str, Any]) -> tuple[float, int, int]:
    return (round(row["mean_abs_hourly_error"], 4), row["worst_step"], row["chunk_micros"])


def _pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(r: dict[str, Any]) -> tuple[float, int, int]:
        return (r["mean_abs_hourly_error"], r["worst_step"], r["stall_exposure_micros"])

    front = [r for r in rows if not any(_dominates(key(o), key(r)) for o in rows)]
    return sorted(front, key=key)


def _dominates(a: tuple[float, int, int], b: tuple[float, int, int]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
