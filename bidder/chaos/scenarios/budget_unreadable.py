"""``budget_unreadable``: budget state unreadable -> fail closed.

What is injected: the Valkey server holding the pacing leases is frozen (SIGSTOP)
mid-replay, after the workers have read their leases: from then on no node can read
budget state (lease refreshes hang until their timeout) and the reconciler cannot
write any. The design's rule: budget that cannot be read means no spend beyond the
leases already held (``pacing.node``): those expire two ticks after they were written,
then every campaign answers ``budget_unavailable``, as a 204 within the deadline.

Phases (one replay pass each, 300 req/s, pacing tick 1 s): ``healthy``; ``draining``
(Valkey frozen, held leases still valid: 2 ticks + 1 s); ``closed`` (every held lease
has expired: not one bid); Valkey resumed (SIGCONT); ``recovered``.

Measured: ``overspend_micros`` = per campaign, spend on bids made after the freeze
beyond the amounts of the leases held at the freeze (bound: 0); bids billed after the
last held lease expired (0); ``recovery_s`` = resume -> first bid on the probe.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from bidder.bidstream.stream import StreamRecord
from bidder.chaos.faults import pause, resume
from bidder.chaos.harness import ScenarioOptions, live_bidder, stream_file
from bidder.chaos.harness import records as read_records
from bidder.chaos.observe import Prober, bid_ms, first_bid_after, held_leases, wall_ms
from bidder.chaos.result import ScenarioResult, check_ratio_drop, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, replay_pass, run_on_stack
from bidder.replay.ledger_audit import LedgerAudit
from bidder.replay.report import ReplayResult
from pacing.lease import Lease

NAME = "budget_unreadable"
INJECTED = "Valkey (pacing leases) frozen with SIGSTOP mid-replay, then resumed"
RATE = 300.0
TICK_S = 1.0
# Seconds per phase (short, full): the freeze stays under the 10 s worker-id lease.
PHASES = {"healthy": (2.0, 3.0), "draining": (3.0, 3.0), "closed": (2.0, 5.0),
          "recovered": (3.0, 6.0)}  # fmt: skip
RECOVERY_BOUND_S = 3 * TICK_S + 2.0
"""A resumed Valkey answers at once; leases come on the reconciler's next tick and are
read within ``lease_refresh_s``: a few ticks at most."""


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run, workers=2, pacing_tick_s=TICK_S)


def _split(run: Run) -> dict[str, list[StreamRecord]]:
    counts = {name: int(RATE * spans[0 if run.short else 1]) for name, spans in PHASES.items()}
    stream = read_records(stream_file(run.workdir, "stream", sum(counts.values()), seed=41))
    out, start = {}, 0
    for name, count in counts.items():
        out[name], start = stream[start : start + count], start + count
    return out


async def _run(run: Run) -> None:
    phases, results = _split(run), {}
    valkey = run.stack.pids["valkey"]
    async with live_bidder(run.stack, run.settings) as live:
        prober = Prober(live.target)
        prober.start()
        results["healthy"] = await replay_pass(live, phases["healthy"], RATE)
        held = await asyncio.to_thread(held_leases, run.settings, live.nodes)
        frozen_ms = wall_ms()
        pause(valkey)
        try:
            results["draining"] = await replay_pass(live, phases["draining"], RATE)
            closed_from_ms, closed_from = wall_ms(), time.monotonic()
            results["closed"] = await replay_pass(live, phases["closed"], RATE)
        finally:
            resume(valkey)
        resumed, resumed_ms = time.monotonic(), wall_ms()
        results["recovered"] = await replay_pass(live, phases["recovered"], RATE)
        answers = await prober.stop()
        audit = await audit_money(live, run.scenario, run.checks)
    run.scenario.recovery_s = first_bid_after(answers, resumed)
    closed_probes = [a for a in answers if closed_from <= a.sent_at and a.sent_at + 1 < resumed]
    run.checks.expect("probe_bids_in_the_closed_phase", sum(a.bid for a in closed_probes), "==", 0)
    _check(run, results, held, (frozen_ms, closed_from_ms, resumed_ms), audit)


def _check(
    run: Run,
    results: dict[str, ReplayResult],
    held: dict[str, list[Lease]],
    times: tuple[int, int, int],
    audit: LedgerAudit,
) -> None:
    scenario, checks = run.scenario, run.checks
    frozen_ms, closed_from_ms, resumed_ms = times
    outage = [e for e in audit.entries if frozen_ms <= bid_ms(e) < resumed_ms]
    expires_ms = max((lease.expires_ms for leases in held.values() for lease in leases), default=0)
    scenario.figures.update(passes={name: pass_summary(r) for name, r in results.items()})
    record_answers(checks, scenario, list(results.values()), None)
    faulted = [results["draining"], results["closed"]]
    check_ratio_drop(checks, scenario, [results["healthy"]], faulted, run.options.drop_margin())
    checks.expect("held_leases_at_the_freeze", sum(map(len, held.values())), ">", 0)
    checks.expect("held_leases_expired_before_the_closed_phase", expires_ms, "<=", closed_from_ms)
    closed = results["closed"]
    checks.expect("bids_in_the_closed_phase", closed.status[200], "==", 0)
    checks.expect(
        "budget_unavailable_in_the_closed_phase", closed.nbr_reasons["budget_unavailable"], ">", 0
    )
    late = [e for e in outage if bid_ms(e) > expires_ms + scenario_deadline(results)]
    checks.expect("bids_billed_after_the_held_leases_expired", len(late), "==", 0)
    spent: dict[str, int] = defaultdict(int)
    for entry in outage:
        spent[entry.campaign_id] += entry.cost_micros
    allowed = {c: sum(lease.amount_micros for lease in leases) for c, leases in held.items()}
    scenario.overspend_micros = sum(max(0, s - allowed.get(c, 0)) for c, s in spent.items())
    scenario.overspend_bound_micros = 0
    scenario.figures.update(
        spend_after_freeze_micros=sum(spent.values()), held_lease_micros=sum(allowed.values())
    )
    checks.expect("spend_beyond_held_leases_micros", scenario.overspend_micros, "<=", 0)
    checks.expect("recovery_s", scenario.recovery_s, "<=", RECOVERY_BOUND_S)
    checks.expect("bids_after_recovery", results["recovered"].status[200], ">", 0)


def scenario_deadline(results: dict[str, ReplayResult]) -> int:
    """A bid admitted just before its lease expired gets its id within the deadline."""
    return round(next(iter(results.values())).deadline_ms)
