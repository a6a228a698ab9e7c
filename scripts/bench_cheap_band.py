"""Cheap band benchmark: what rejecting junk costs next to the full path of a bid.

In-process, no HTTP, but with the worker's real stages: ``bidder.serve.assemble.build_state``
against a private LocalStack (Valkey + moto) holding the bundled campaigns, its
background jobs running (lease refresh, campaign and supply refresh, id lease), and a
real reconciler process handing out pacing leases; timing starts once the worker holds
them. So the full path has everything a live bid has: the profile cache (a miss starts
a DynamoDB fill in the background, as live), the pacer, the frequency-cap round trip to
Valkey, LightGBM scoring, and the Snowflake ids and signed notice URLs of the response.

* junk: the requests of the bundled sample stream (the generator's mix: malformed
  bodies, junk traffic, consent, eligibility and supply-chain failures) that die in
  stages 1-4; a junk request costs parse + ``run_stages`` over the worker's first four
  stages (rate limit, consent, eligibility, supply chain).
* full path: the OpenRTB 2.6 spec's simple banner with a fresh ``user.id`` each run
  (so caps never bite and the cap check always reaches Valkey): parse +
  ``run_stages`` over every stage + ``build_response``.

The two are timed alike and interleaved, so machine noise hits both: ``--runs`` times,
one junk request (the next of the shuffled junk list) then one full run, each after
``--gap-ms`` of idle loop, as requests reach a live worker (the gap also lets the
previous run's profile fill, a boto3 call in a worker thread, finish untimed). Each
figure is the median wall time per request (the full path's over the runs that bid).
For reference, ``--rounds`` passes over every junk request back to back (caches warm)
give the mean per junk request.

The last line printed is one JSON object; ``cheap_band_ratio`` is the junk figure
over the full-path median (goal < 0.1).

    .venv/bin/python scripts/bench_cheap_band.py [--runs 2000 --gap-ms 10 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bidder.bidstream.stream import read_stream
from bidder.core.deadlines import TaskDeadlines
from bidder.core.nobid import NoBid
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.pipeline.response import build_response
from bidder.pipeline.runner import Context, Stage, run_stages
from bidder.serve.app import BidderState
from bidder.serve.assemble import build_state, pacing_node_id
from bidder.serve.reconciler_process import running_reconciler
from bidder.serve.server import prepare_resources, wait_for_leases
from bidder.serve.settings import Settings
from bidder.serve.worker import start_background, stop_background
from bidder.stack.child import held_port
from bidder.stack.local import LocalStack

ROOT = Path(__file__).resolve().parents[1]
BANNER = ROOT.parent / "shared/external/openrtb/requests/001_iab26_spec-6.2.1-simple-banner.json"
SAMPLE = ROOT / "fixtures/openrtb/sample-stream.jsonl.gz"
CAMPAIGNS = ROOT / "fixtures/openrtb/campaigns.json"
CHEAP_STAGES = 4
"""Stages 2-4 are the first four of the worker's list: rate limit, consent, eligibility,
supply chain (``bidder.serve.assemble``)."""


class Paths:
    """The cheap band and the full path over one worker's real state."""

    def __init__(self, state: BidderState) -> None:
        self.state = state
        self.cheap_stages: Sequence[Stage] = state.stages[:CHEAP_STAGES]
        self.budget_s = state.settings.deadline_ms / 1000
        self.bounds = TaskDeadlines()

    def _context(self, body: bytes, ssp: str) -> tuple[Context, float] | NoBid:
        try:
            request = parse_bid_request(body)
        except InvalidRequest:
            return NoBid.INVALID
        received = self.state.clock.monotonic()
        return Context(request=request, ssp=ssp, received=received), received + self.budget_s

    async def cheap(self, body: bytes, ssp: str) -> NoBid | None:
        made = self._context(body, ssp)
        if isinstance(made, NoBid):
            return made
        ctx, deadline = made
        staged = run_stages(self.cheap_stages, ctx, deadline, self.bounds)
        return staged if staged is None or isinstance(staged, NoBid) else await staged

    async def full(self, body: bytes, ssp: str) -> bytes | NoBid:
        made = self._context(body, ssp)
        if isinstance(made, NoBid):
            return made
        ctx, deadline = made
        try:
            staged = run_stages(self.state.stages, ctx, deadline, self.bounds)
            reason = staged if staged is None or isinstance(staged, NoBid) else await staged
        except TimeoutError:
            return NoBid.DEADLINE
        if reason is not None:
            return reason
        state = self.state
        return build_response(ctx, state.settings.seat, state.notice_urls, state.next_bid_id)


def fresh_users(runs: int) -> list[bytes]:
    """The banner with a new user.id per run: no cap was ever counted for any of them."""
    doc = orjson.loads(BANNER.read_bytes())
    bodies = []
    for i in range(runs):
        doc["user"]["id"] = f"bench-user-{i:08d}"
        doc["id"] = f"bench-{i}"
        bodies.append(orjson.dumps(doc))
    return bodies


class Timings:
    def __init__(self) -> None:
        self.junk_us: list[float] = []
        self.bid_us: list[float] = []
        self.outcomes: Counter[str] = Counter()


async def interleaved(
    paths: Paths, junk: list[tuple[bytes, str]], bodies: list[bytes], gap_s: float
) -> Timings:
    """One junk request, then one full run, each after ``gap_s`` of idle loop."""
    timings = Timings()
    for i, body in enumerate(bodies):
        await asyncio.sleep(gap_s)
        start = time.perf_counter_ns()
        await paths.cheap(*junk[i % len(junk)])
        timings.junk_us.append((time.perf_counter_ns() - start) / 1000)
        await asyncio.sleep(gap_s)
        start = time.perf_counter_ns()
        outcome = await paths.full(body, "ssp-alpha")
        spent = (time.perf_counter_ns() - start) / 1000
        if isinstance(outcome, NoBid):
            timings.outcomes[outcome.value] += 1
        else:
            timings.outcomes["bid"] += 1
            timings.bid_us.append(spent)
    return timings


async def hot_junk_round(paths: Paths, junk: list[tuple[bytes, str]]) -> float:
    """Mean cost (us) per junk request, all of them back to back (caches warm)."""
    start = time.perf_counter_ns()
    for body, ssp in junk:
        await paths.cheap(body, ssp)
    return (time.perf_counter_ns() - start) / len(junk) / 1000


async def bench(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    state = await build_state(settings)
    background = await start_background(state)
    try:
        await wait_for_leases(settings, [pacing_node_id(os.getpid())])
        return await measure(Paths(state), args)
    finally:
        await stop_background(state, background)


async def measure(paths: Paths, args: argparse.Namespace) -> dict[str, Any]:
    junk: list[tuple[bytes, str]] = []
    reasons: Counter[str] = Counter()
    for record in read_stream(SAMPLE):
        outcome = await paths.cheap(record.body, record.ssp)
        if isinstance(outcome, NoBid):
            junk.append((record.body, record.ssp))
            reasons[outcome.value] += 1
    random.Random(1).shuffle(junk)  # each run's junk request is a draw from the mix
    bodies = fresh_users(args.runs)
    gc.collect()
    gc.freeze()  # as the worker does after start-up
    hot = [await hot_junk_round(paths, junk) for _ in range(args.rounds)]
    t = await interleaved(paths, junk, bodies, args.gap_ms / 1000)
    if not t.bid_us:
        raise SystemExit(f"no run of the banner ended in a bid: {dict(t.outcomes)}")
    junk_us, full_us = statistics.median(t.junk_us), statistics.median(t.bid_us)
    print(f"junk requests: {len(junk)} of the sample stream; by reason: {dict(reasons)}")
    print(f"cheap band, back to back, mean per junk request by round (us): {_r(hot)}")
    print(f"full path runs by outcome: {dict(t.outcomes)}")
    return {
        "junk_requests": len(junk),
        "runs": args.runs,
        "gap_ms": args.gap_ms,
        "cheap_band_junk_us": round(junk_us, 2),
        "cheap_band_junk_mean_us": round(statistics.fmean(t.junk_us), 2),
        "cheap_band_junk_hot_us": round(statistics.median(hot), 2),
        "full_path_outcomes": dict(t.outcomes.most_common()),
        "full_path_bid_us": round(full_us, 2),
        "full_path_bid_p90_us": round(_p90(t.bid_us), 2),
        "cheap_band_ratio": round(junk_us / full_us, 3),
        "cheap_band_ratio_mean_junk": round(statistics.fmean(t.junk_us) / full_us, 3),
    }


def _r(values: list[float]) -> list[float]:
    return [round(v, 2) for v in values]


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="back-to-back junk passes")
    parser.add_argument("--runs", type=int, default=2000, help="full-path runs (fresh users)")
    parser.add_argument("--gap-ms", type=float, default=10.0, help="pause between full runs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cheap-band-") as tmp, LocalStack() as stack:
        settings = Settings(
            port=held_port(),
            admin_port=0,
            campaigns_path=CAMPAIGNS,
            valkey_url=stack.valkey_url,
            aws_endpoint=stack.aws_endpoint,
            spool_dir=Path(tmp) / "spool",
        ).validate()
        prepare_resources(settings)
        with running_reconciler(settings):
            result = uvloop.run(bench(settings, args))
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
