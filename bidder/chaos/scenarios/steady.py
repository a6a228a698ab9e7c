"""``steady``: no fault. The acceptance replay.

The sample stream (``fixtures/openrtb/sample-stream.jsonl.gz``, 6,000 requests)
against 2 workers on a 3-master local Valkey Cluster, at half of saturation: no 5xx,
at least 99.99% of answers within the deadline, and the ledger summing to DynamoDB's
spend totals. Saturation is found by a short probe unless a rate is given: 2 s slices
of the stream at rising rates (100 to 3,200 req/s, notices off), after a warm-up slice
that is not judged; the first rate at which the bidder sheds or misses its own deadline
on more than 1% of a slice, or the client times out on more than 0.1%, is saturated,
and the rate before it is taken as saturation. The short form replays the first 1,500
requests at 300 req/s without the probe. A full run first measures, for 10 s with the
stack up and no worker yet, how late the machine wakes a sleeping thread
(``bidder.chaos.host``): the floor under the acceptance figure.

The check is the client's corrected figure. Beside it, to tell where late answers
were late: the replay's share within the deadline from each request's write (the
client's own late sends left out), and the workers' own count of answers over the
deadline (their histogram, handler entry to answer, warm-up included).
"""

from __future__ import annotations

import asyncio

from bidder.chaos.harness import (
    SAMPLE_STREAM,
    STEADY_MIN_RATIO,
    Live,
    ScenarioOptions,
    live_bidder,
    records,
)
from bidder.chaos.host import summarize, wake_lateness
from bidder.chaos.observe import BID_LATENCY, histogram
from bidder.chaos.result import ScenarioResult, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, check_budgets, replay_pass, run_on_stack
from bidder.replay.report import ReplayResult

NAME = "steady"
INJECTED = "nothing: the sample stream, 2 workers, a 3-master local Valkey Cluster"
PROBE_RATES = (100.0, 200.0, 400.0, 800.0, 1200.0, 1600.0, 2400.0, 3200.0)
PROBE_SLICE_S = 2.0
SHORT_REQUESTS, SHORT_RATE = 1500, 300.0
WARMUP_S = 2.0
"""Like ``make demo``: the first seconds of a fresh worker are excluded."""
HOST_PROBE_S = 10.0
"""How long the host's wake-up lateness is measured (``bidder.chaos.host``)."""


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run, {"cluster": 3}, workers=2)


async def _run(run: Run) -> None:
    if not run.short:  # the machine's own floor, before any worker runs
        lateness = await asyncio.to_thread(wake_lateness, HOST_PROBE_S)
        run.scenario.figures["host_wake_lateness"] = summarize(lateness, HOST_PROBE_S)
    async with live_bidder(run.stack, run.settings) as live:
        if run.options.rate is not None:
            rate = run.options.rate
        else:
            rate = SHORT_RATE if run.short else await _half_saturation(live, run.scenario)
        stream = records(SAMPLE_STREAM, SHORT_REQUESTS if run.short else None)
        before = await histogram(live.bidder.admin_url, BID_LATENCY)
        result = await replay_pass(live, stream, rate, warmup_s=WARMUP_S)
        after = await histogram(live.bidder.admin_url, BID_LATENCY)
        run.scenario.figures.update(
            rate_rps=rate, warmup_s=WARMUP_S, replay=pass_summary(result),
            bidder_answers=after.count(since=before),
            bidder_answers_over_deadline=after.over(run.settings.deadline_ms / 1000, before),
        )  # fmt: skip
        record_answers(run.checks, run.scenario, [result], run.options.min_ratio(STEADY_MIN_RATIO))
        audit = await audit_money(live, run.scenario, run.checks)
    check_budgets(run.scenario, run.checks, audit)


def saturated(result: ReplayResult) -> bool:
    """The bidder no longer keeps up: it sheds or misses its own deadline on more than
    1% of the slice, or the client times out on more than 0.1%. (Not the client's
    within-deadline ratio: that is what the acceptance measures at half this rate.)"""
    gave_up = result.nbr_reasons["overloaded"] + result.nbr_reasons["deadline"]
    requests = max(result.requests, 1)
    return gave_up > 0.01 * requests or result.timeouts > 0.001 * requests


async def _half_saturation(live: Live, scenario: ScenarioResult) -> float:
    stream = records(SAMPLE_STREAM)
    probes: dict[str, dict[str, float]] = {}
    # Fresh workers first get a slice that is not judged, as every measured pass
    # excludes its first WARMUP_S: a cold start once counted 3 give-ups in the 200
    # requests of the first slice, and the replay then ran at 25 req/s.
    start = int(PROBE_RATES[0] * WARMUP_S)
    await replay_pass(live, stream[:start], PROBE_RATES[0], notices=False, warmup_s=WARMUP_S)
    good = PROBE_RATES[0] / 2  # saturated from the lowest rate: half of it
    for rate in PROBE_RATES:
        count = int(rate * PROBE_SLICE_S)
        part = [stream[(start + i) % len(stream)] for i in range(count)]
        start += count
        result = await replay_pass(live, part, rate, notices=False)
        probes[f"{rate:g}"] = {
            "within_deadline": round(result.within_deadline_share, 4),
            "overloaded": result.nbr_reasons["overloaded"],
            "deadline": result.nbr_reasons["deadline"],
            "timeouts": result.timeouts,
        }
        if saturated(result):
            break
        good = rate
    scenario.figures.update(saturation_rps=good, saturation_probe=probes)
    return good / 2
