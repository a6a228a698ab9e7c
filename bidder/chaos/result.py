"""What a chaos scenario reports: named checks and the common figures.

A scenario measures, then states each expectation as a ``Check`` (name, expected,
measured, ok), so a failed run explains itself without a debugger. The common
figures every scenario carries (``answered_within_deadline_ratio``, ``status_5xx``,
``lost_ledger_entries``, ``overspend_micros``, ``overspend_bound_micros``,
``recovery_s``) sit beside scenario-specific ``figures``.

``answered_within_deadline_ratio`` is the replay client's view: answers (200 or 204)
whose corrected latency (from the intended send) is within the bidder's deadline,
over every request sent (a timeout or a transport error counts as a miss). On a
shared 2-core machine the client competes with the bidder for the cores, so this is
pessimistic; the bidder's own view is its ``deadline`` no-bid count.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bidder.replay.report import ReplayResult, latency_ms, status_classes

PASSED, FAILED, PENDING = "passed", "failed", "pending"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    expected: str
    measured: Any
    ok: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "expected": self.expected, "measured": self.measured,
                "ok": self.ok}  # fmt: skip


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}


class Checks:
    """Collects a scenario's checks; ``measured`` None (not measurable) fails the check."""

    def __init__(self) -> None:
        self.items: list[Check] = []

    def expect(self, name: str, measured: Any, op: str, bound: Any) -> bool:
        ok = measured is not None and _OPS[op](measured, bound)
        self.items.append(Check(name, f"{op} {bound}", measured, bool(ok)))
        return bool(ok)

    def holds(self, name: str, measured: Any, ok: bool, expected: str) -> bool:
        """A check whose expectation is not a comparison (``expected`` says what it is)."""
        self.items.append(Check(name, expected, measured, bool(ok)))
        return bool(ok)

    @property
    def failing(self) -> list[Check]:
        return [check for check in self.items if not check.ok]


@dataclass
class ScenarioResult:
    name: str
    injected: str
    """What the scenario did to the stack, in words (for the report)."""
    short: bool
    checks: list[Check] = field(default_factory=list)
    answered_within_deadline_ratio: float | None = None
    status_5xx: int = 0
    lost_ledger_entries: int | None = None
    overspend_micros: int | None = None
    overspend_bound_micros: int | None = None
    recovery_s: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    pending: str | None = None
    """Why the scenario could not run yet (a feature it needs is absent)."""
    error: str | None = None
    """An unexpected error that stopped the scenario (a failure)."""
    elapsed_s: float = 0.0

    @property
    def status(self) -> str:
        if self.pending is not None:
            return PENDING
        ok = self.error is None and bool(self.checks) and all(c.ok for c in self.checks)
        return PASSED if ok else FAILED

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def explain(self) -> str:
        """The failing checks (or the error, or why it is pending), one per line."""
        if self.pending is not None:
            return f"pending: {self.pending}"
        lines = [f"error: {self.error}"] if self.error else []
        lines += [
            f"{c.name}: expected {c.expected}, measured {c.measured!r}"
            for c in self.checks
            if not c.ok
        ]
        return "\n".join(lines) or ("no checks were made" if not self.checks else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.passed,
            "short": self.short,
            "injected": self.injected,
            "answered_within_deadline_ratio": self.answered_within_deadline_ratio,
            "status_5xx": self.status_5xx,
            "lost_ledger_entries": self.lost_ledger_entries,
            "overspend_micros": self.overspend_micros,
            "overspend_bound_micros": self.overspend_bound_micros,
            "recovery_s": self.recovery_s,
            "figures": self.figures,
            "checks": [check.to_json() for check in self.checks],
            "pending": self.pending,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 1),
        }


@dataclass(frozen=True, slots=True)
class ReplayFigures:
    """The answer figures of one or more replay passes, summed."""

    requests: int
    within_deadline: int
    status_5xx: int
    other_status: int
    timeouts: int
    transport_errors: int
    bids: int
    deadline_nobids: int

    @property
    def ratio(self) -> float | None:
        return round(self.within_deadline / self.requests, 6) if self.requests else None


def replay_figures(results: Sequence[ReplayResult]) -> ReplayFigures:
    classes = [status_classes(r.status) for r in results]
    return ReplayFigures(
        requests=sum(r.requests for r in results),
        within_deadline=sum(r.within_deadline for r in results),
        status_5xx=sum(c["5xx"] for c in classes),
        other_status=sum(c["other"] for c in classes),
        timeouts=sum(r.timeouts for r in results),
        transport_errors=sum(r.transport_errors for r in results),
        bids=sum(r.status[200] for r in results),
        deadline_nobids=sum(r.nbr_reasons["deadline"] for r in results),
    )


def pass_summary(result: ReplayResult) -> dict[str, Any]:
    """A compact summary of one pass for the figures (reasons: the top 6)."""
    return {
        "requests": result.requests,
        "rate_rps": round(result.rate_rps, 1),
        "status": {str(k): v for k, v in sorted(result.status.items())},
        "reasons": dict(result.nbr_reasons.most_common(6)),
        "within_deadline_share": round(result.within_deadline_share, 5),
        "within_deadline_from_write_share": round(result.within_deadline_from_write_share, 5),
        "timeouts": result.timeouts,
        "late_sends": result.late_sends,
        "max_send_lag_ms": round(result.max_send_lag_ms, 1),
        "latency_ms": {k: round(v, 2) for k, v in latency_ms(result.corrected).items()},
        "wins": result.auction.wins,
        "spend_micros": result.auction.spend_micros,
        "notices_failed": result.auction.notices_failed,
    }


def record_answers(
    checks: Checks,
    scenario: ScenarioResult,
    results: Sequence[ReplayResult],
    min_ratio: float | None,
    transport_errors: int = 0,
) -> ReplayFigures:
    """Put the replay's common figures on ``scenario`` and check the answers: no 5xx, no
    other status, at most ``transport_errors`` transport errors (a killed worker's open
    connections), and the within-deadline ratio at least ``min_ratio`` (None: a
    scenario that compares its fault phase with its healthy one instead)."""
    figures = replay_figures(results)
    scenario.answered_within_deadline_ratio = figures.ratio
    scenario.status_5xx = figures.status_5xx
    scenario.figures["deadline_nobids"] = figures.deadline_nobids
    checks.expect("status_5xx", figures.status_5xx, "==", 0)
    # Timeouts (the 100 ms client bound) are deadline misses, counted in the ratio.
    checks.expect("other_statuses", figures.other_status, "==", 0)
    checks.expect("transport_errors", figures.transport_errors, "<=", transport_errors)
    scenario.figures["client_timeouts"] = figures.timeouts
    if min_ratio is not None:
        checks.expect("answered_within_deadline_ratio", figures.ratio, ">=", min_ratio)
    return figures


def check_ratio_drop(
    checks: Checks,
    scenario: ScenarioResult,
    healthy: Sequence[ReplayResult],
    fault: Sequence[ReplayResult],
    margin: float,
    phase: str = "fault",
) -> None:
    """The ``phase`` answers within the deadline about as often as the healthy one: at
    most ``margin`` less (``ScenarioOptions.drop_margin``)."""
    before, during = replay_figures(healthy).ratio, replay_figures(fault).ratio
    drop = None if before is None or during is None else round(before - during, 4)
    scenario.figures.update({"healthy_within_deadline": before, f"{phase}_within_deadline": during})
    checks.expect(f"within_deadline_drop_under_the_{phase}", drop, "<=", margin)
