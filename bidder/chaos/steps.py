"""Steps most scenarios share: run on a private stack, replay a pass, audit the money."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Collection, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from bidder.bidstream.stream import StreamRecord
from bidder.chaos.harness import (
    CAMPAIGNS,
    Live,
    ScenarioOptions,
    campaign_budgets,
    chaos_settings,
)
from bidder.chaos.result import Checks, ScenarioResult
from bidder.replay.ledger_audit import (
    LEDGER_BOUND_S,
    LedgerAudit,
    acknowledged_bills,
    audit_stream,
    spend_beyond_budgets,
)
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult
from bidder.serve.settings import Settings
from bidder.stack.local import LocalStack


async def replay_pass(
    live: Live, records: Iterable[StreamRecord], rate: float, **options: object
) -> ReplayResult:
    """One open-loop pass at ``rate`` with the bidder's own deadline."""
    opts = ReplayOptions(rate=rate, deadline_ms=live.settings.deadline_ms, **options)  # type: ignore[arg-type]
    return await replay(records, live.target, opts)


def split(stream: list[StreamRecord], counts: Sequence[int]) -> list[list[StreamRecord]]:
    """Consecutive slices of ``stream`` of the given sizes (one per pass)."""
    out, start = [], 0
    for count in counts:
        out.append(stream[start : start + count])
        start += count
    return out


async def audit_money(
    live: Live,
    scenario: ScenarioResult,
    checks: Checks,
    rogue_nodes: Collection[int] = (),
    bound_s: float = LEDGER_BOUND_S,
) -> LedgerAudit:
    """Every acknowledged bill in the stream, and the stream's sums in DynamoDB: checked."""
    acknowledged = await acknowledged_bills(live.bidder.admin_url)
    return await audit_ledger(live.settings, acknowledged, scenario, checks, rogue_nodes, bound_s)


async def audit_ledger(
    settings: Settings,
    acknowledged: int,
    scenario: ScenarioResult,
    checks: Checks,
    rogue_nodes: Collection[int] = (),
    bound_s: float = LEDGER_BOUND_S,
) -> LedgerAudit:
    """``audit_money`` for ``acknowledged`` bills from any number of bidders sharing
    ``settings``' spend stream and totals."""
    audit = await audit_stream(settings, acknowledged, bound_s, rogue_nodes)
    scenario.lost_ledger_entries = audit.lost
    scenario.figures.update(audit.figures())
    checks.expect("lost_ledger_entries", audit.lost, "==", 0)
    checks.holds(
        "ledger_sum_equals_spend_totals", audit.mismatches or "equal", audit.totals_match,
        "DynamoDB campaign totals == ledger sums",
    )  # fmt: skip
    return audit


@dataclass(frozen=True)
class Run:
    """What a scenario's body works with: its options, its result and checks to fill,
    its own stack, default settings on that stack, and a scratch directory."""

    options: ScenarioOptions
    scenario: ScenarioResult
    checks: Checks
    stack: LocalStack
    settings: Settings
    workdir: Path

    @property
    def short(self) -> bool:
        return self.options.short


def run_on_stack(
    name: str,
    injected: str,
    options: ScenarioOptions,
    body: Callable[[Run], Coroutine[Any, Any, None]],
    stack: dict[str, Any] | None = None,
    **changes: Any,
) -> ScenarioResult:
    """Start a private stack (``LocalStack(**stack)``), run ``body`` on a uvloop loop,
    stop the stack. ``changes`` adjust the default settings (``chaos_settings``). An
    exception is a failure carrying its message, never an escaped traceback."""
    scenario = ScenarioResult(name, injected, options.short)
    checks = Checks()
    started = time.monotonic()
    workdir = options.workdir / name
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with LocalStack(**(stack or {})) as local:
            settings = chaos_settings(local, workdir, **changes)
            uvloop.run(body(Run(options, scenario, checks, local, settings, workdir)))
    except Exception as exc:  # reported in the result; the suite goes on
        scenario.error = f"{type(exc).__name__}: {exc}"
        scenario.figures["traceback"] = traceback.format_exc(limit=6).splitlines()[-6:]
    scenario.checks = checks.items
    scenario.elapsed_s = time.monotonic() - started
    return scenario


def check_budgets(
    scenario: ScenarioResult, checks: Checks, audit: LedgerAudit, campaigns: Path = CAMPAIGNS
) -> None:
    """Where a scenario has no bound of its own: no campaign of ``campaigns`` spent
    beyond its budget."""
    scenario.overspend_micros = spend_beyond_budgets(audit.entries, campaign_budgets(campaigns))
    scenario.overspend_bound_micros = 0
    checks.expect("spend_beyond_daily_budgets_micros", scenario.overspend_micros, "==", 0)
