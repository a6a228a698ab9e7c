"""``worker_kill9``: a worker killed with SIGKILL mid-replay; nothing acknowledged is lost.

What is injected: one of two workers is killed (SIGKILL: no handler, no flush) at the
first request of the second of three passes (healthy, killed, after: 40% of the
requests in). ``WorkerPool`` does not restart workers: the survivor takes every new
connection on the shared port (SO_REUSEPORT) and adopts the dead worker's spool
segments within ``adopt_every_s`` (30 s), shipping what the dead one had not
delivered. Requests in flight on the dead worker's connections are lost to the client
(transport errors or timeouts; at most its in-flight bound).

Checked: no 5xx; transport errors at most ``max_in_flight``; the passes after the kill
answer within the deadline about as often as the healthy one; bids go on after the
kill; every acknowledged bill (the dead worker's included: its metric files stay)
reaches the stream and DynamoDB's totals equal the ledger. ``recovery_s`` = kill ->
the first bid on the probe (served by the survivor).
"""

from __future__ import annotations

import time

from bidder.chaos.faults import at_requests, kill9
from bidder.chaos.harness import ScenarioOptions, live_bidder, records, stream_file
from bidder.chaos.observe import Prober, first_bid_after
from bidder.chaos.result import ScenarioResult, check_ratio_drop, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, check_budgets, replay_pass, run_on_stack, split
from bidder.replay.report import ReplayResult

NAME = "worker_kill9"
INJECTED = "one of two workers killed with SIGKILL at 40% of the replay"
RATE = 200.0
PASSES = {True: (800, 1200, 600), False: (2400, 3600, 1500)}
"""Requests of the healthy, killed (the kill at its first request) and after passes."""
RECOVERY_BOUND_S = 2.0


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run, workers=2)


async def _run(run: Run) -> None:
    counts = PASSES[run.short]
    stream = records(stream_file(run.workdir, "stream", sum(counts), seed=53))
    healthy, faulted, after = split(stream, counts)
    killed: list[float] = []
    async with live_bidder(run.stack, run.settings) as live:
        victim = live.bidder.pool.pids[0]
        prober = Prober(live.target)
        prober.start()

        def kill() -> None:
            kill9(victim)
            killed.append(time.monotonic())

        passes = [await replay_pass(live, healthy, RATE)]
        passes.append(await replay_pass(live, at_requests(faulted, {0: kill}), RATE))
        passes.append(await replay_pass(live, after, RATE))
        answers = await prober.stop()
        alive = live.bidder.pool.alive()
        audit = await audit_money(live, run.scenario, run.checks)
    run.scenario.recovery_s = first_bid_after(answers, killed[0]) if killed else None
    _check(run, passes, alive)
    check_budgets(run.scenario, run.checks, audit)


def _check(run: Run, passes: list[ReplayResult], alive: int) -> None:
    checks, workers = run.checks, run.settings.workers
    run.scenario.figures.update(
        passes=dict(zip(("healthy", "killed", "after"), map(pass_summary, passes), strict=True)),
        workers_alive_after=alive, restarted_by_pool=alive == workers,
    )  # fmt: skip
    record_answers(checks, run.scenario, passes, None, run.settings.max_in_flight)
    check_ratio_drop(checks, run.scenario, passes[:1], passes[1:])
    checks.expect("workers_alive_after_the_kill", alive, "==", workers - 1)
    checks.expect("bids_after_the_kill", passes[2].status[200], ">", 0)
    checks.expect("recovery_s", run.scenario.recovery_s, "<=", RECOVERY_BOUND_S)
