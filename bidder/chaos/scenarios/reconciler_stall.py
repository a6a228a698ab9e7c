"""``reconciler_stall``: a frozen reconciler bounds overspend to 2 chunks per node.

What is injected: the reconciler process is frozen (SIGSTOP) when the replay reaches a
given request; the leases it wrote last are read from Valkey at that moment. Budgets
are small (a chunk is ``CHUNK_MAX_COSTS`` impressions at the campaign's maximum bid)
and every curve puts the day's weight on the hours already passed, so the controller
keeps the rate at 1: the leases, not the controller, limit spend. Two workers, a 1 s
tick, a generous 50 ms deadline (money, not latency, is measured here). Then the
reconciler is resumed (SIGCONT) and bidding must come back.

From the billed ledger (bid times are the Snowflake times of the bid ids):
- no bid made after the last leases expired (+ one deadline) was billed;
- per campaign, spend on bids made since the last lease write is at most 2 chunks per
  node (``overspend_micros`` vs ``overspend_bound_micros``, summed over campaigns);
- ``no_lease``/``budget_unavailable`` answers take over; ``recovery_s`` = SIGCONT ->
  first bid on the probe.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import orjson

from bidder.chaos.faults import at_requests, pause, resume
from bidder.chaos.harness import (
    CAMPAIGNS,
    ScenarioOptions,
    live_bidder,
    records,
    stream_file,
)
from bidder.chaos.observe import bid_ms, held_leases, until_probe, wall_ms
from bidder.chaos.result import ScenarioResult, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, replay_pass, run_on_stack
from bidder.core.ledger import LedgerEntry, cost_of
from bidder.replay.report import ReplayResult
from pacing.lease import DEFAULT_CHUNK_PERIODS, Lease, chunk_micros

NAME = "reconciler_stall"
INJECTED = "the reconciler process frozen (SIGSTOP) mid-replay, resumed after the replay"
WORKERS = 2
CHUNK_MAX_COSTS = 3
"""A chunk holds this many impressions at the campaign's maximum bid."""
RATE, TICK_S = 400.0, 1.0
REQUESTS = {True: (3000, 1000), False: (8000, 2000)}
"""(requests, the request at which the reconciler is frozen): short, full."""
RECOVERY_BOUND_S = 5 * TICK_S


def stall_campaigns(path: Path) -> dict[str, int]:
    """The bundled campaigns with small budgets and an already-spent curve; id -> budget."""
    doc = orjson.loads(CAMPAIGNS.read_bytes())
    hour = datetime.now(UTC).hour
    budgets = {}
    for campaign in doc["campaigns"]:
        max_cost = cost_of(campaign["max_bid_cpm_micros"])
        campaign["daily_budget_micros"] = (
            CHUNK_MAX_COSTS * max_cost * WORKERS * DEFAULT_CHUNK_PERIODS
        )
        campaign["pacing_curve"] = [1 if h <= hour else 0 for h in range(24)]
        budgets[campaign["id"]] = campaign["daily_budget_micros"]
    path.write_bytes(orjson.dumps(doc))
    return budgets


def spend_since(
    entries: list[LedgerEntry], since_ms: int, until_ms: int | None = None
) -> dict[str, int]:
    """Spend per campaign on bids made from ``since_ms`` (and before ``until_ms``)."""
    spend: dict[str, int] = defaultdict(int)
    for entry in entries:
        made = bid_ms(entry)
        if made >= since_ms and (until_ms is None or made < until_ms):
            spend[entry.campaign_id] += entry.cost_micros
    return dict(spend)


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(
        NAME, INJECTED, options, _run, workers=WORKERS, pacing_tick_s=TICK_S, deadline_ms=50.0
    )


async def _run(run: Run) -> None:
    budgets = stall_campaigns(run.workdir / "campaigns.json")
    settings = run.settings.replace(campaigns_path=run.workdir / "campaigns.json")
    count, stall_at = REQUESTS[run.short]
    stream = records(stream_file(run.workdir, "stream", count, seed=5))
    stopped_ms: list[int] = []
    leases: dict[str, list[Lease]] = {}
    async with live_bidder(run.stack, settings) as live:
        reconciler = live.reconciler.pid

        def stall() -> None:
            # On the replay's loop: a few ms of blocking reads, once, so the leases read
            # are the last ones the frozen reconciler wrote (they expire with their TTL).
            pause(reconciler)
            stopped_ms.append(wall_ms())
            leases.update(held_leases(settings, live.nodes))

        try:
            frozen = at_requests(stream, {stall_at: stall})
            result = await replay_pass(live, frozen, RATE, timeout_ms=1000.0)
        finally:
            resume(reconciler)
        recovery_s = await until_probe(live.target, lambda a: a.bid, 3 * RECOVERY_BOUND_S)
        audit = await audit_money(live, run.scenario, run.checks)
    run.scenario.recovery_s = recovery_s
    flat = [lease for found in leases.values() for lease in found]
    _check(run, result, len(flat) == WORKERS * len(budgets))
    if flat and stopped_ms:
        _check_spend(run, flat, stopped_ms[0], audit.entries, budgets)


def _check(run: Run, result: ReplayResult, every_lease_read: bool) -> None:
    scenario, checks = run.scenario, run.checks
    scenario.figures["replay"] = pass_summary(result)
    record_answers(checks, scenario, [result], run.options.min_ratio())
    checks.expect("client_timeouts", result.timeouts, "==", 0)  # a generous 1 s timeout
    fail_closed = result.nbr_reasons["no_lease"] + result.nbr_reasons["budget_unavailable"]
    checks.expect("no_lease_or_budget_unavailable_after_the_stall", fail_closed, ">", 0)
    checks.expect("recovery_s", scenario.recovery_s, "<=", RECOVERY_BOUND_S)
    checks.expect("every_nodes_leases_read_at_the_stall", every_lease_read, "==", True)


def _check_spend(
    run: Run,
    leases: list[Lease],
    stopped_ms: int,
    entries: list[LedgerEntry],
    budgets: dict[str, int],
) -> None:
    scenario, checks = run.scenario, run.checks
    last_written = max(lease.lease_id for lease in leases)
    expires = max(lease.expires_ms for lease in leases)
    before = sum(bid_ms(e) < stopped_ms for e in entries)
    checks.expect("bids_billed_before_the_stall", before, ">", 0)
    checks.expect("lease_expiry_after_the_stall_ms", expires - stopped_ms, "<=", 2000 * TICK_S)
    # Every billed bid came from the replay, which ended while the reconciler was frozen.
    late = [e for e in entries if bid_ms(e) >= expires + run.settings.deadline_ms]
    checks.expect("bids_billed_after_the_leases_expired", len(late), "==", 0)
    spent = spend_since(entries, last_written)
    bound = {c: 2 * WORKERS * chunk_micros(budgets[c], WORKERS) for c in budgets}
    over = {c: [s, bound[c]] for c, s in spent.items() if s > bound[c]}
    scenario.overspend_micros = sum(spent.values())
    scenario.overspend_bound_micros = sum(bound[c] for c in spent)
    checks.holds(
        "spend_since_last_lease_write_within_2_chunks_per_node", over or "all within",
        not over, "per campaign <= 2 chunks x nodes",
    )  # fmt: skip
