"""The chaos suite: every scenario by name, run one after the other, a table of results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

from bidder.chaos.harness import ScenarioOptions
from bidder.chaos.result import FAILED, ScenarioResult
from bidder.chaos.scenarios import (
    budget_unreadable,
    duplicate_auctions,
    master_failover,
    profile_store_down,
    reconciler_stall,
    region_partition,
    runaway_spend,
    spend_stream_down,
    spend_stream_lag,
    steady,
    surge,
    worker_kill9,
)

_MODULES: tuple[ModuleType, ...] = (
    steady, budget_unreadable, runaway_spend, surge, duplicate_auctions, profile_store_down,
    master_failover, reconciler_stall, spend_stream_down, spend_stream_lag, worker_kill9,
    region_partition,
)  # fmt: skip
SCENARIOS: dict[str, Callable[[ScenarioOptions], ScenarioResult]] = {
    module.NAME: module.run for module in _MODULES
}
"""Scenario name -> its function, in the order the suite runs them."""


class UnknownScenario(ValueError):
    """A scenario name the suite does not know; the message lists the known ones."""


def select(names: Sequence[str]) -> list[str]:
    """The scenarios to run, in suite order (all when ``names`` is empty)."""
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        raise UnknownScenario(
            f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}"
        )
    return [name for name in SCENARIOS if not names or name in names]


def run_scenarios(
    names: Sequence[str],
    options: ScenarioOptions,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    results = []
    for name in select(names):
        result = SCENARIOS[name](options)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def any_failed(results: Sequence[ScenarioResult]) -> bool:
    return any(result.status == FAILED for result in results)


_COLUMNS = ("scenario", "status", "in deadline", "5xx", "lost", "overspend / bound", "recovery")


def _row(r: ScenarioResult) -> tuple[str, ...]:
    ratio = (
        "-"
        if r.answered_within_deadline_ratio is None
        else f"{r.answered_within_deadline_ratio:.4%}"
    )
    spend = (
        "-"
        if r.overspend_micros is None
        else f"{r.overspend_micros:,} / {r.overspend_bound_micros or 0:,}"
    )
    lost = "-" if r.lost_ledger_entries is None else str(r.lost_ledger_entries)
    recovery = "-" if r.recovery_s is None else f"{r.recovery_s:.2f} s"
    return (r.name, r.status, ratio, str(r.status_5xx), lost, spend, recovery)


def render_table(results: Sequence[ScenarioResult]) -> str:
    rows = [_COLUMNS, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    for r in results:
        if r.status != "passed":
            lines.append(f"\n{r.name}: {r.explain()}")
    return "\n".join(lines)
