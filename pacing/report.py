"""The acceptance figures of a simulated day, and the side runs that produce them.

``day_report`` runs the scenario's whole day plus short windows around each event
(a +-50% supply step, a stalled reconciler, a late tick, a runaway campaign) and the
ASAP baseline, and returns one flat JSON-able dict. The figures are defined here:

- ``eod_spend_ratio``: spend at 24:00 / budget.
- ``max_cum_error_ratio``: worst |cumulative spend - target| / budget at the 24 hour ends.
- ``hours_in_band_ratio``: share of hours whose spend is within +-10% of the hour's target.
- ``step_up_steps`` / ``step_down_steps``: control steps after a +50% / -50% supply step
  until the per-tick spend is within +-10% of the per-tick achievable spend (the target
  where the stepped supply allows it; ``pacing.actual.achievable``, tick by tick) and
  stays there for the rest of the window (noise-free run: expected values, so only
  control shows).
- ``stall_overspend_chunks_per_node``: the most any node spent from the reconciler's
  last tick on, in chunks, with runaway supply (nodes bid on everything and the
  market would take 4 chunks a tick), so only the leases stop it;
  ``stall_spend_stopped_after_s``: when the last spend happened, after that last tick.
- ``late_tick_overspend_micros``: spend above target from the last on-time tick until
  a tick that comes one tick late (runaway supply again); the bound is
  ``late_tick_bound_micros`` = nodes x chunk.
- ``breaker_seconds``: from a runaway's start (nodes ignore the rate, supply x4) to
  the breaker opening.
- ``asap_eod_hour``: the hour at which the ASAP baseline (no pacing) has spent 98% of
  the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pacing.actual import achievable
from pacing.curves import HOUR_S
from pacing.simulate import Progress, Scenario, Trace, run, timed_run, window

BAND = 0.10
EVENT_AT_S = 12 * HOUR_S
"""Side-run events happen at noon UTC: mid-day supply, nothing special about it."""
WARMUP_S = 900.0


def hourly(trace: Trace) -> tuple[list[int], list[int]]:
    """Spend and target per hour (hours the trace covers fully)."""
    spend, target = [], []
    first = int(np.ceil(trace.t_s[0] / HOUR_S - 1e-9))
    last = int((trace.t_s[-1] + trace.scenario.config.tick_s) // HOUR_S)
    for h in range(first, last):
        a, b = h * HOUR_S, (h + 1) * HOUR_S
        spend.append(trace.spent_by(b) - trace.spent_by(a))
        target.append(trace.target_at(b) - trace.target_at(a))
    return spend, target


def day_figures(
    spend: Sequence[float], target: Sequence[float], budget_micros: int
) -> dict[str, float]:
    """The three day figures from 24 hourly spends and targets (from 00:00)."""
    cum_spend = np.cumsum(np.asarray(spend, dtype=float))
    cum_target = np.cumsum(np.asarray(target, dtype=float))
    in_band = [abs(s - t) <= BAND * t for s, t in zip(spend, target, strict=True)]
    return {
        "eod_spend_ratio": float(cum_spend[-1]) / budget_micros,
        "max_cum_error_ratio": float(np.abs(cum_spend - cum_target).max()) / budget_micros,
        "hours_in_band_ratio": sum(in_band) / len(in_band),
    }


def tracking(trace: Trace) -> dict[str, Any]:
    """The day figures of a whole-day trace, and its hourly series."""
    sc = trace.scenario
    spend, target = hourly(trace)
    total = trace.spent_by(24 * HOUR_S)
    return {
        "eod_spend_micros": total,
        **day_figures(spend, target, sc.budget_micros),
        "over_budget_micros": max(0, total - sc.budget_micros),
        "hourly_spend_micros": spend,
        "hourly_target_micros": target,
        "hourly_error_ratio": [(s - t) / t for s, t in zip(spend, target, strict=True)],
        "invariant_violations": len(trace.violations),
    }


def steps_to_band(trace: Trace, at_s: float) -> int | None:
    """Control steps after ``at_s`` until per-tick spend stays within the band around the
    achievable per-tick spend (the target where supply allows it; ``pacing.actual``)."""
    sc = trace.scenario
    tick, by_hour = sc.config.tick_s, sc.available_by_hour()
    targets = [trace.target_at(t + tick) - trace.target_at(t) for t in trace.t_s]
    available = [sc.full_rate_spend(t, by_hour) for t in trace.t_s.tolist()]
    ratio = trace.spend / np.maximum(achievable(targets, available), 1)
    out = np.abs(ratio - 1.0) > BAND
    after = np.flatnonzero(trace.t_s >= at_s - 1e-9)
    outside = [k for k in after if out[k]]
    if not outside:
        return 0
    if outside[-1] == len(trace.t_s) - 1:
        return None
    return int(outside[-1] - after[0] + 1)


def step_response(sc: Scenario, factor: float) -> int | None:
    stepped = replace(sc, step_at_s=EVENT_AT_S, step_factor=factor, expected_values=True)
    return steps_to_band(run(window(stepped, EVENT_AT_S, WARMUP_S, 600.0)), EVENT_AT_S)


def _runaway(sc: Scenario) -> Scenario:
    """Supply far beyond what a chunk covers in a tick and no breaker: only leases limit."""
    per_node_tick = sc.budget_micros / 86_400 * sc.config.tick_s / sc.nodes
    return replace(
        sc,
        pacing=False,
        supply_ratio=max(sc.supply_ratio, 4 * sc.chunk / per_node_tick),
        config=replace(sc.config, breaker_ratio=float("inf")),
    )


def stall(sc: Scenario) -> dict[str, Any]:
    """The reconciler's last tick is one tick before ``EVENT_AT_S``; then nothing."""
    tick = sc.config.tick_s
    last_tick = EVENT_AT_S - tick
    trace = run(window(replace(_runaway(sc), stall_at_s=EVENT_AT_S), EVENT_AT_S, 300.0, 300.0))
    after = trace.node_spend_after_last_tick
    worst = int(after.max()) if after is not None else 0
    last = trace.last_spend_s
    return {
        "stall_overspend_chunks_per_node": worst / sc.chunk,
        "stall_overspend_micros": int(after.sum()) if after is not None else 0,
        "stall_spend_stopped_after_s": None if last is None else max(last - last_tick, 0.0),
    }


def late_tick(sc: Scenario, ticks: int = 1) -> dict[str, Any]:
    """Spend above target from the last on-time tick until the late tick arrives."""
    tick = sc.config.tick_s
    late = replace(_runaway(sc), late_at_s=EVENT_AT_S, late_ticks=ticks)
    trace = run(window(late, EVENT_AT_S, 300.0, 300.0))
    begin, end = EVENT_AT_S - tick, EVENT_AT_S + ticks * tick
    span = (trace.t_s >= begin - 1e-9) & (trace.t_s < end - 1e-9)
    target = trace.target_at(end) - trace.target_at(begin)
    return {
        "late_tick_overspend_micros": max(0, int(trace.spend[span].sum()) - target),
        "late_tick_bound_micros": sc.nodes * sc.chunk,
    }


def breaker(sc: Scenario) -> float | None:
    trace = run(window(replace(sc, runaway_at_s=EVENT_AT_S), EVENT_AT_S, WARMUP_S, 300.0))
    return None if trace.tripped_at_s is None else trace.tripped_at_s - EVENT_AT_S


def asap(sc: Scenario) -> dict[str, Any]:
    trace = run(replace(sc, pacing=False))
    reached = np.flatnonzero(trace.cum >= 0.98 * sc.budget_micros)
    hour = None if not len(reached) else float(trace.t_s[reached[0]] + sc.config.tick_s) / HOUR_S
    figures = tracking(trace)
    return {
        "asap_eod_hour": hour,
        "asap_eod_spend_ratio": figures["eod_spend_ratio"],
        "asap_max_cum_error_ratio": figures["max_cum_error_ratio"],
        "asap_hours_in_band_ratio": figures["hours_in_band_ratio"],
        "asap_hourly_spend_micros": figures["hourly_spend_micros"],
    }


def day_report(sc: Scenario, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Every acceptance figure for ``sc`` (see the module docstring)."""
    trace, seconds = timed_run(sc, progress)
    report: dict[str, Any] = {"scenario": describe(sc), "sim_seconds": round(seconds, 3)}
    report.update(tracking(trace))
    report["step_up_steps"] = step_response(sc, 1.5)
    report["step_down_steps"] = step_response(sc, 0.5)
    report.update(stall(sc))
    report.update(late_tick(sc))
    report["breaker_seconds"] = breaker(sc)
    report.update(asap(sc))
    report["chunk_micros"] = sc.chunk
    return report


def day_trace(sc: Scenario, progress: Progress | None = None) -> Trace:
    return run(sc, progress)


def describe(sc: Scenario) -> dict[str, Any]:
    cfg = sc.config
    return {
        "budget_micros": sc.budget_micros,
        "nodes": sc.nodes,
        "tick_s": cfg.tick_s,
        "seed": sc.seed,
        "supply_ratio": sc.supply_ratio,
        "kp": cfg.gains.kp,
        "ki": cfg.gains.ki,
        "kd": cfg.gains.kd,
        "chunk_micros": sc.chunk,
        "ledger_lag_ticks": sc.ledger_lag_ticks,
        "market": {
            "median_cpm_micros": sc.market.median_cpm_micros,
            "sigma": sc.market.sigma,
            "bid_cpm_micros": sc.market.bid_cpm_micros,
        },
    }
