"""``runaway_spend``: the circuit breaker pauses a runaway campaign.

What is injected: a rogue node (``bidder.chaos.rogue``) bills one campaign straight
into the spend stream at ``MULTIPLE`` x its target rate, while a stream is replayed.
The campaign is the one the bidder billed most in a healthy first pass, so "the
bidder stops bidding it" is not vacuous.

The reconciler's breaker pauses a campaign whose spend stays over 3x its target, within
its window of the runaway's start (production: 60 s; ``pacing.breaker``), then writes
empty leases (amount 0, rate 0) for the campaign for the rest of the day. A full run
uses the production window; the short form runs the reconciler with a 4 s window
(``--breaker-window-s``).

Measured: ``breaker_pause_s`` = first rogue entry -> the paused lease written (its
lease id is the tick's wall ms), expected within the window (the breaker trips at the
last tick before the window is up, counted from the earliest the runaway can have
begun); the short form, which runs beside other tests where ticks come irregularly,
allows the window + 2 ticks. The live bidder's own bids of the campaign made after the
pause was readable (+ lease refresh + deadline): none (``overspend_micros``, bound 0);
the reconciler's log names the trip.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from bidder.adapters.aws import aws_client
from bidder.chaos.harness import (
    CAMPAIGNS,
    Live,
    ScenarioOptions,
    live_bidder,
    records,
    stream_file,
)
from bidder.chaos.observe import Background, bid_ms, held_leases, wall_ms
from bidder.chaos.result import (
    Checks,
    ScenarioResult,
    check_ratio_drop,
    pass_summary,
    record_answers,
)
from bidder.chaos.rogue import ROGUE_NODE, RogueNode, target_micros_per_s
from bidder.chaos.steps import Run, audit_money, replay_pass, run_on_stack
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import Campaign
from bidder.replay.ledger_audit import LedgerAudit, distinct, read_ledger
from bidder.replay.report import ReplayResult
from bidder.serve.settings import Settings

NAME = "runaway_spend"
INJECTED = "a rogue node bills one campaign into the spend stream at 20x its target rate"
RATE = 200.0
TICK_S = 1.0
MULTIPLE = 20
WINDOW_S = {True: 4.0, False: 60.0}
"""The breaker window: short form, full run (production default)."""
PASS_S = {True: 2.0, False: 5.0}
HEALTHY_S = {True: 3.0, False: 5.0}
AFTER_PAUSE_S = 3.0


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run, workers=2, pacing_tick_s=TICK_S)


class _Passes:
    """Consecutive slices of one generated stream, one replay pass each."""

    def __init__(self, workdir: Path, short: bool) -> None:
        window, per_pass = WINDOW_S[short], PASS_S[short]
        total_s = HEALTHY_S[short] + window + 6 * TICK_S + 3 * per_pass
        self._stream = records(stream_file(workdir, "stream", int(total_s * RATE), seed=43))
        self._next = 0
        self.results: list[ReplayResult] = []

    async def run(self, live: Live, seconds: float) -> bool:
        """Replay the next ``seconds`` of the stream; False once it is used up."""
        count = int(seconds * RATE)
        part = self._stream[self._next : self._next + count]
        self._next += count
        if not part:
            return False
        self.results.append(await replay_pass(live, part, RATE))
        return True


def _top_campaign(settings: Settings) -> Campaign:
    kinesis = aws_client("kinesis", settings.aws_endpoint or "", settings.aws_region)
    billed = Counter(e.campaign_id for e in distinct(read_ledger(kinesis, settings.spend_stream)))
    if not billed:
        raise RuntimeError("the healthy pass billed no campaign: nothing to run away with")
    top = billed.most_common(1)[0][0]
    return next(c for c in load_campaign_file(CAMPAIGNS) if c.id == top)


class _PauseWatch(Background):
    """Polls the campaign's lease every 100 ms; keeps the id (the tick's wall ms) of the
    first paused lease seen. Leases are rewritten every tick with a new id, so polling
    between passes would see a later tick's id, not the tripping one."""

    def __init__(self, settings: Settings, nodes: list[str], campaign: str) -> None:
        super().__init__()
        self._args = (settings, nodes, campaign)
        self.paused_ms: int | None = None

    async def _run(self) -> None:
        while self.paused_ms is None:
            self.paused_ms = await asyncio.to_thread(_paused_lease_ms, *self._args)
            await asyncio.sleep(0.1)


def _paused_lease_ms(settings: Settings, nodes: list[str], campaign: str) -> int | None:
    """The lease id (tick wall ms) of the campaign's lease if it is a paused one."""
    for lease in held_leases(settings, nodes).get(campaign, []):
        if lease.amount_micros == 0 and lease.rate_ppm == 0:
            return lease.lease_id
    return None


async def _run(run: Run) -> None:
    passes = _Passes(run.workdir, run.short)
    window, per_pass, settings = WINDOW_S[run.short], PASS_S[run.short], run.settings
    async with live_bidder(run.stack, settings, breaker_window_s=window) as live:
        await passes.run(live, HEALTHY_S[run.short])
        await asyncio.sleep(2 * TICK_S)  # the healthy pass's bills reach the stream
        campaign = _top_campaign(settings)
        rogue_rate = MULTIPLE * target_micros_per_s(campaign, wall_ms())
        watch = _PauseWatch(settings, live.nodes, campaign.id)
        watch.start()
        with RogueNode(settings, campaign, rogue_rate) as rogue:
            give_up = time.monotonic() + window + 8 * TICK_S + per_pass
            while watch.paused_ms is None and time.monotonic() < give_up:
                if not await passes.run(live, per_pass):
                    break
        await watch.stop()
        await passes.run(live, AFTER_PAUSE_S)
        audit = await audit_money(live, run.scenario, run.checks, rogue_nodes={ROGUE_NODE})
        log = live.reconciler.log_tail(200)
    run.scenario.figures.update(
        campaign=campaign.id, breaker_window_s=window, rogue_micros_per_s=rogue_rate,
        rogue_spend_micros=rogue.spent_micros, rogue_entries=rogue.entries,
        passes=[pass_summary(r) for r in passes.results],
    )  # fmt: skip
    record_answers(run.checks, run.scenario, passes.results, None)
    healthy, faulted = passes.results[:1], passes.results[1:]
    check_ratio_drop(run.checks, run.scenario, healthy, faulted, run.options.drop_margin())
    times = (rogue.first_ms, watch.paused_ms)
    bound = window if not run.short else window + 2 * TICK_S
    _check_pause(run.scenario, run.checks, campaign.id, times, bound, log)
    _check_bids(run.scenario, run.checks, settings, campaign.id, watch.paused_ms, audit)


def _check_pause(
    scenario: ScenarioResult,
    checks: Checks,
    campaign: str,
    times: tuple[int | None, int | None],
    bound_s: float,
    log: str,
) -> None:
    first_ms, paused_ms = times
    pause_s = None if first_ms is None or paused_ms is None else (paused_ms - first_ms) / 1000
    scenario.figures["breaker_pause_s"] = pause_s
    checks.expect("breaker_pause_s", pause_s, "<=", bound_s)
    tripped = f"circuit breaker paused campaign {campaign}" in log
    checks.holds("reconciler_logged_the_trip", tripped, tripped, "the reconciler log names it")


def _check_bids(
    scenario: ScenarioResult,
    checks: Checks,
    settings: Settings,
    campaign: str,
    paused_ms: int | None,
    audit: LedgerAudit,
) -> None:
    ours = [e for e in audit.entries if e.node != ROGUE_NODE and e.campaign_id == campaign]
    stop_ms = (paused_ms or 0) + round(settings.lease_refresh_s * 1000 + settings.deadline_ms)
    before = [e for e in ours if bid_ms(e) < (paused_ms or 0)]
    after = [e for e in ours if paused_ms is not None and bid_ms(e) > stop_ms]
    scenario.overspend_micros = sum(e.cost_micros for e in after)
    scenario.overspend_bound_micros = 0
    checks.expect("campaign_bids_billed_before_the_pause", len(before), ">", 0)
    checks.expect("campaign_bids_billed_after_the_pause", len(after), "==", 0)
