"""``spend_stream_lag``: a lagging spend stream stops the grants; spend stops, then resumes.

What is injected: the reconciler reads the stack's moto through a delaying proxy
(``bidder.chaos.stream_delay``). When the second of three replay passes starts, the
proxy stops delivering the spend stream's new records to the reconciler; when it ends,
it delivers them all. The bidder's workers keep writing the stream, DynamoDB and
Valkey stay up, and the reconciler keeps ticking: only what it can see of the spend
lags. Budgets are small and curves already spent (as in ``reconciler_stall``), so
leases, not the controller, limit spend; 2 workers, a 1 s tick, a 50 ms deadline
(money, not latency, is measured here), the lag threshold 10 s in a full run (the
default), 1.5 s in the short form.

The stated bound. The reconciler measures the lag at each tick and, once it is above
the threshold, writes no lease (``pacing.stream_lag``); the leases out expire two
ticks after the last write. So, counted from the moment the stream starts lagging:

- the last lease is written within the threshold + 1 tick;
- spend stops within the threshold + 3 ticks (the last leases' expiry): no bid made
  after that (+ one deadline) is billed while the stream lags;
- spend the reconciler could not see (bids made while the stream lags) is at most
  (ceil(threshold / tick) + 3) chunks per node per campaign, and spend on bids made
  since the last lease write at most 2 chunks per node (the stalled-reconciler bound).

Checked besides: no lease held at the end of the lag; ``no_lease`` answers during it;
the reconciler's log names the hold and its end, and ``bidsim_pacing_lag_held_ticks``
counts it; once the stream delivers again, a probe bids within 3 ticks
(``recovery_s``); 0 5xx; every acknowledged bill in the stream and the totals equal
to the ledger (``audit_money``).
"""

from __future__ import annotations

import asyncio
import math

from bidder.chaos.harness import ScenarioOptions, live_bidder, records, stream_file
from bidder.chaos.observe import Background, bid_ms, held_leases, until_probe, wall_ms
from bidder.chaos.result import ScenarioResult, pass_summary, record_answers
from bidder.chaos.scenarios.reconciler_stall import spend_since, stall_campaigns
from bidder.chaos.steps import Run, audit_money, replay_pass, run_on_stack, split
from bidder.chaos.stream_delay import StreamDelay
from bidder.core.ledger import LedgerEntry
from bidder.replay.admin_metrics import metric
from bidder.replay.report import ReplayResult
from bidder.serve.settings import Settings
from pacing.lease import chunk_micros

NAME = "spend_stream_lag"
INJECTED = "the spend stream's delivery to the reconciler held back past the lag threshold"
WORKERS = 2
RATE, TICK_S = 400.0, 1.0
THRESHOLD_S = {True: 1.5, False: 10.0}
"""The reconciler's lag threshold: short form, full run (the default)."""
PHASES_S = {True: (1.0, 1.0, 0.5), False: (4.0, 5.0, 4.0)}
"""Seconds of replay: healthy; of the lag once spend has stopped; after it."""
RECOVERY_BOUND_S = 3 * TICK_S


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(
        NAME, INJECTED, options, _run, workers=WORKERS, pacing_tick_s=TICK_S,
        deadline_ms=50.0, spend_lag_threshold_s=THRESHOLD_S[options.short],
    )  # fmt: skip


class _LeaseWatch(Background):
    """Polls every node's leases each 100 ms: the newest lease written (its id is the
    tick's wall ms), the latest expiry, and how many leases the last poll found."""

    def __init__(self, settings: Settings, nodes: list[str]) -> None:
        super().__init__()
        self._settings, self._nodes = settings, nodes
        self.last_write_ms = 0
        self.last_expiry_ms = 0
        self.held_at_the_end = -1

    async def stop(self) -> None:
        await super().stop()
        await self._poll()

    async def _run(self) -> None:
        while True:
            await self._poll()
            await asyncio.sleep(0.1)

    async def _poll(self) -> None:
        found = await asyncio.to_thread(held_leases, self._settings, self._nodes)
        leases = [lease for held in found.values() for lease in held]
        self.held_at_the_end = len(leases)
        for lease in leases:
            self.last_write_ms = max(self.last_write_ms, lease.lease_id)
            self.last_expiry_ms = max(self.last_expiry_ms, lease.expires_ms)


async def _run(run: Run) -> None:
    budgets = stall_campaigns(run.workdir / "campaigns.json")
    settings = run.settings.replace(campaigns_path=run.workdir / "campaigns.json")
    healthy_s, quiet_s, after_s = PHASES_S[run.short]
    lag_s = THRESHOLD_S[run.short] + 3 * TICK_S + quiet_s
    counts = [int(RATE * seconds) for seconds in (healthy_s, lag_s, after_s)]
    healthy, lagging, after = split(
        records(stream_file(run.workdir, "stream", sum(counts), seed=53)), counts
    )
    with StreamDelay(run.stack.aws_endpoint) as delay:
        async with live_bidder(run.stack, settings, reconciler_aws_endpoint=delay.url) as live:
            passes = [await replay_pass(live, healthy, RATE, timeout_ms=1000.0)]
            watch = _LeaseWatch(settings, live.nodes)
            delay.hold()
            times = [wall_ms()]
            watch.start()
            try:
                passes.append(await replay_pass(live, lagging, RATE, timeout_ms=1000.0))
                await watch.stop()
            finally:
                delay.release()
            times.append(wall_ms())
            run.scenario.recovery_s = await until_probe(
                live.target, lambda a: a.bid, 3 * RECOVERY_BOUND_S
            )
            passes.append(await replay_pass(live, after, RATE, timeout_ms=1000.0))
            held_ticks = await metric(live.bidder.admin_url, "bidsim_pacing_lag_held_ticks_total")
            audit = await audit_money(live, run.scenario, run.checks)
            log = live.reconciler.log_tail(300)
    _check_answers(run, passes, held_ticks, log)
    _check_hold(run, watch, times[0])
    _check_spend(run, watch, (times[0], times[1]), audit.entries, budgets)


def _check_answers(run: Run, passes: list[ReplayResult], held_ticks: float, log: str) -> None:
    scenario, checks = run.scenario, run.checks
    scenario.figures.update(
        passes=dict(zip(("healthy", "lag", "after"), map(pass_summary, passes), strict=True)),
        lag_threshold_s=THRESHOLD_S[run.short],
        lag_held_ticks=int(held_ticks),
    )
    # Money, not latency, is measured here (as in reconciler_stall): the answers are held
    # to the floor ratio, not compared between passes a few hundred requests long.
    record_answers(checks, scenario, passes, run.options.min_ratio())
    checks.expect("client_timeouts", sum(p.timeouts for p in passes), "==", 0)
    reasons = passes[1].nbr_reasons
    checks.expect("no_lease_answers_during_the_lag", reasons["no_lease"], ">", 0)
    checks.expect("lag_held_ticks", held_ticks, ">", 0)
    checks.expect("recovery_s", scenario.recovery_s, "<=", RECOVERY_BOUND_S)
    checks.expect("bids_after_the_lag", passes[2].status[200], ">", 0)
    for name, text in (("hold", "holding leases"), ("clear", "lag cleared, granting leases")):
        logged = text in log
        checks.holds(f"reconciler_logged_the_{name}", logged, logged, f"its log says {text!r}")


def _check_hold(run: Run, watch: _LeaseWatch, lag_ms: int) -> None:
    checks, threshold_s = run.checks, THRESHOLD_S[run.short]
    last_write_s = (watch.last_write_ms - lag_ms) / 1000
    stopped_s = (watch.last_expiry_ms - lag_ms) / 1000
    run.scenario.figures.update(last_lease_written_s=last_write_s, spend_stopped_s=stopped_s)
    checks.expect("last_lease_written_s", last_write_s, "<=", threshold_s + TICK_S)
    checks.expect("spend_stopped_s", stopped_s, "<=", threshold_s + 3 * TICK_S)
    checks.expect("leases_held_at_the_end_of_the_lag", watch.held_at_the_end, "==", 0)


def _check_spend(
    run: Run,
    watch: _LeaseWatch,
    lag: tuple[int, int],
    entries: list[LedgerEntry],
    budgets: dict[str, int],
) -> None:
    scenario, checks = run.scenario, run.checks
    start_ms, end_ms = lag
    stop_ms = watch.last_expiry_ms + round(run.settings.deadline_ms)
    late = [e for e in entries if stop_ms <= bid_ms(e) < end_ms]
    checks.expect("bids_billed_after_the_leases_expired", len(late), "==", 0)
    unseen = spend_since(entries, start_ms, end_ms)
    billed = sum(start_ms <= bid_ms(e) < end_ms for e in entries)
    checks.expect("bids_billed_while_the_stream_lagged", billed, ">", 0)
    chunks = math.ceil(THRESHOLD_S[run.short] / TICK_S) + 3
    chunk = {c: WORKERS * chunk_micros(budget, WORKERS) for c, budget in budgets.items()}
    over = {c: [s, chunks * chunk[c]] for c, s in unseen.items() if s > chunks * chunk[c]}
    scenario.overspend_micros = sum(unseen.values())
    scenario.overspend_bound_micros = sum(chunks * chunk[c] for c in unseen)
    checks.holds(
        "unseen_spend_within_the_bound", over or "all within", not over,
        f"per campaign <= {chunks} chunks x nodes",
    )  # fmt: skip
    since_write = spend_since(entries, watch.last_write_ms, end_ms)
    beyond = {c: [s, 2 * chunk[c]] for c, s in since_write.items() if s > 2 * chunk[c]}
    scenario.figures["spend_since_the_last_lease_micros"] = sum(since_write.values())
    checks.holds(
        "spend_since_the_last_lease_within_2_chunks_per_node", beyond or "all within",
        not beyond, "per campaign <= 2 chunks x nodes",
    )  # fmt: skip
