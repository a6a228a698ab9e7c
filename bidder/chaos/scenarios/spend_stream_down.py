"""``spend_stream_down``: Kinesis unreachable -> bills acknowledged from the spool, none lost.

What is injected: the moto server (Kinesis, and DynamoDB with it) is frozen (SIGSTOP)
for a replay pass, then resumed (SIGCONT). Passes at 300 req/s, two workers:
``healthy``, ``outage`` (moto frozen; the held pacing leases keep bidding for two
ticks, so there are bills to acknowledge), ``after`` (moto back).

A billing notice is acknowledged once its ledger entry is fsync'd in the worker's
spool (``bidder.winloop.spend_stream``): the outage must not fail a notice, entries must wait
in the spool (``bidsim_spool_depth`` > 0 at the end of the outage), and once the stream
is back every acknowledged bill must reach it and DynamoDB's totals must equal the
ledger. ``recovery_s`` = SIGCONT -> the spool drained (depth 0 on every worker).
"""

from __future__ import annotations

import asyncio
import time

from bidder.chaos.faults import pause, resume
from bidder.chaos.harness import (
    Live,
    ScenarioOptions,
    live_bidder,
    records,
    stream_file,
)
from bidder.chaos.result import ScenarioResult, check_ratio_drop, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, check_budgets, replay_pass, run_on_stack, split
from bidder.replay.admin_metrics import metric
from bidder.replay.report import ReplayResult

NAME = "spend_stream_down"
INJECTED = "moto (Kinesis spend stream) frozen (SIGSTOP) for a replay pass, then resumed"
RATE = 300.0
PHASES = {"healthy": (2.0, 4.0), "outage": (3.0, 10.0), "after": (2.0, 5.0)}
"""Seconds per pass: short, full."""
DRAIN_BOUND_S = 40.0


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run, workers=2)


async def _spool_drained(live: Live, since: float) -> float | None:
    while time.monotonic() - since < DRAIN_BOUND_S:
        if await metric(live.bidder.admin_url, "bidsim_spool_depth") == 0:
            return round(time.monotonic() - since, 3)
        await asyncio.sleep(0.1)
    return None


async def _run(run: Run) -> None:
    counts = [int(RATE * spans[0 if run.short else 1]) for spans in PHASES.values()]
    stream = records(stream_file(run.workdir, "stream", sum(counts), seed=47))
    healthy, outage, after = split(stream, counts)
    moto = run.stack.pids["moto"]
    async with live_bidder(run.stack, run.settings) as live:
        passes = [await replay_pass(live, healthy, RATE)]
        pause(moto)
        try:
            passes.append(await replay_pass(live, outage, RATE))
            depth = await metric(live.bidder.admin_url, "bidsim_spool_depth")
        finally:
            resume(moto)
        resumed = time.monotonic()
        passes.append(await replay_pass(live, after, RATE))
        run.scenario.recovery_s = await _spool_drained(live, resumed)
        audit = await audit_money(live, run.scenario, run.checks)
    _check(run, passes, depth)
    check_budgets(run.scenario, run.checks, audit)


def _check(run: Run, passes: list[ReplayResult], depth: float) -> None:
    checks = run.checks
    run.scenario.figures.update(
        passes=dict(zip(PHASES, map(pass_summary, passes), strict=True)),
        spool_depth_at_the_end_of_the_outage=int(depth),
    )
    record_answers(checks, run.scenario, passes, None)
    check_ratio_drop(checks, run.scenario, passes[:1], passes[1:2], run.options.drop_margin())
    outage = passes[1].auction
    checks.expect("outage_notices_acknowledged", outage.notices_ok, ">", 0)
    checks.expect("outage_notices_failed", outage.notices_failed, "==", 0)
    checks.expect("spool_depth_at_the_end_of_the_outage", depth, ">", 0)
    checks.expect("spool_drained_after_resume_s", run.scenario.recovery_s, "<=", DRAIN_BOUND_S)
