"""Benchmark the scoring path; prints one JSON line last.

    .venv/bin/python scripts/bench_score.py [--rounds 5000] [--artifact DIR]

Stage 8 on the banner workload (the OpenRTB 2.6 spec's simple banner against the
bundled campaigns: its eligible candidates, no profile), CPU and wall time per request,
each the median of ``STAGE_ROUNDS`` blocks of ``--rounds`` / 5 requests interleaved
with the baseline:

``stage8_cpu_us``, ``stage8_wall_us``  ``ScoreStage`` as the worker runs it: feature
                     rows, one predict, value, cap, floor and shading per candidate
``stage8_baseline_cpu_us``  one row through ``Booster.predict(row, num_threads=1)``
``stage8_ratio``     stage8_cpu_us / stage8_baseline_cpu_us

Figures on 10 candidates of one generated request (medians over ``--rounds``
interleaved rounds, one process):

``single_us``        one row through ``Booster.predict(row, num_threads=1)``: the yardstick
``one_row_us``       the same row through the serving call (``Scorer.predict``)
``one_row_ratio``    one_row_us / single_us
``contended_single_us``, ``contended_one_row_us``, ``contended_ratio``: the same two
                     (means per call, not medians) while another thread of the process
                     runs Python in bursts (2 ms of work, 3 ms asleep), as a worker's
                     boto3 threads do beside the event loop. ``Booster.predict`` releases
                     the GIL in its C call, so the caller then waits for the other thread
                     to give it back; the serving call keeps it (``models.scorer``)
``batch_us``         10 candidates' rows through the serving call (``Scorer.predict``)
``batch_ratio``      batch_us / single_us (goal <= 1.5)
``booster_batch_ratio`` the same 10 rows through ``Booster.predict`` / single_us, for context
``per_request_us``   ``Pricer.price`` for 10 candidates of a first-price request: feature
                     rows (creatives' columns from the load-time table) + one predict +
                     value, cap, floor and shading for each
``max_abs_diff``     serving vs ``Booster.predict`` scores of the 10 rows (must be 0)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import msgspec
import numpy as np
import orjson

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import Campaign
from bidder.core.clock import ManualClock, SystemClock
from bidder.decide.eligibility import CampaignIndex, Candidate, EligibilityPolicy, select
from bidder.decide.identity import identify
from bidder.openrtb.request import parse_bid_request
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.response import bid_templates
from bidder.pipeline.runner import Context
from bidder.pipeline.stages import ScoreStage
from models import features
from models.logs import impressions
from models.scorer import DEFAULT_DIR, ModelHandle
from models.serving import Pricer

REPO = Path(__file__).resolve().parents[1]
BANNER = REPO.parent / "shared/external/openrtb/requests/001_iab26_spec-6.2.1-simple-banner.json"
BANNER_SSP = "ssp-alpha"
CANDIDATES = 10
STAGE_ROUNDS = 7


class BannerBook:
    """What the stages read of a campaign book, built from the bundled campaigns as
    ``CampaignBook.refresh`` builds it, without a store."""

    def __init__(self, campaigns: list[Campaign]) -> None:
        self.index = CampaignIndex(campaigns)
        self.feature_columns = features.creative_table(campaigns)
        self.bid_templates = bid_templates(campaigns)


def banner_context(book: BannerBook) -> Context:
    """The banner request after stages 1-7: its eligible candidates and user keys."""
    request = parse_bid_request(BANNER.read_bytes())
    candidates = select(request, book.index, EligibilityPolicy())
    if not isinstance(candidates, list):
        raise SystemExit(f"the banner request gets no candidates ({candidates})")
    ctx = Context(request=request, ssp=BANNER_SSP, received=0.0, candidates=candidates)
    ctx.user_key, ctx.household_key = identify(request, BANNER_SSP)
    return ctx


def blocks(fn: Callable[[], object], count: int) -> tuple[float, float]:
    """(CPU us, wall us) per call, over ``count`` calls in a row."""
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    for _ in range(count):
        fn()
    cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
    return cpu / count / 1000, wall / count / 1000


def _stage8(handle: ModelHandle, rounds: int) -> dict[str, float]:
    book = BannerBook(load_campaign_file(REPO / "fixtures" / "openrtb" / "campaigns.json"))
    ctx = banner_context(book)
    stage = ScoreStage(Pricer(handle, SystemClock()), cast(CampaignBook, book))
    one = features.build_rows(ctx.request, ctx.ssp, None, ctx.candidates[:1], 0)
    booster = handle.current.booster

    def score() -> None:
        ctx.priced.clear()
        stage(ctx, 0.0)

    stage_cpu, stage_wall, base_cpu = [], [], []
    n = max(rounds // 5, 1)
    for _ in range(STAGE_ROUNDS):
        base_cpu.append(blocks(lambda: booster.predict(one, num_threads=1), n)[0])
        cpu, wall = blocks(score, n)
        stage_cpu.append(cpu)
        stage_wall.append(wall)
    cpu_us, base_us = statistics.median(stage_cpu), statistics.median(base_cpu)
    return {
        "stage8_candidates": len(ctx.candidates),
        "stage8_priced": len(ctx.priced),
        "stage8_cpu_us": round(cpu_us, 2),
        "stage8_wall_us": round(statistics.median(stage_wall), 2),
        "stage8_baseline_cpu_us": round(base_us, 2),
        "stage8_ratio": round(cpu_us / base_us, 3),
    }


def _median_us(fn: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def _mean_us(fn: Callable[[], object], rounds: int) -> float:
    """The mean, not the median: a wait for the GIL hits a few calls hard."""
    start = time.perf_counter_ns()
    for _ in range(rounds):
        fn()
    return (time.perf_counter_ns() - start) / rounds / 1000


class _Contender:
    """A thread that wants the GIL in bursts: ``BURST_S`` of Python, then ``REST_S`` asleep."""

    BURST_S = 0.002
    REST_S = 0.003

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Contender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            end = time.perf_counter() + self.BURST_S
            while time.perf_counter() < end:
                sum(range(100))
            time.sleep(self.REST_S)


class _Subject:
    """What is timed: the model both ways, and one request's pricing."""

    def __init__(self, artifact: Path) -> None:
        campaigns = load_campaign_file(REPO / "fixtures" / "openrtb" / "campaigns.json")
        first = next(impressions(1, 1, campaigns))
        # First price: shading is the costly pricing path.
        request = msgspec.structs.replace(first.request, at=1)
        pairs = [(c, cr) for c in campaigns for cr in c.creatives if c.click_value_micros]
        candidates = [Candidate(first.candidate.imp, c, cr) for c, cr in pairs[:CANDIDATES]]
        table = features.creative_table(campaigns)
        self.handle = ModelHandle.load(artifact)
        self.scorer, self.booster = self.handle.current, self.handle.current.booster
        pricer = Pricer(self.handle, ManualClock(start_wall_ms=first.ts))
        self.rows = features.build_rows(request, first.ssp, first.profile, candidates, first.ts)
        self.one = self.rows[:1]
        self.packed, self.packed_one = self.rows.tobytes(), self.one.tobytes()
        self.candidates = len(candidates)
        self.price = lambda: pricer.price(request, first.ssp, first.profile, candidates, table)


def _timings(subject: _Subject, rounds: int) -> dict[str, list[float]]:
    """Microseconds per call, one figure per interleaved block (drift hits all alike)."""
    booster, scorer, one = subject.booster, subject.scorer, subject.one
    names = ("single", "one_row", "contended_single", "contended_one_row", "batch")
    times: dict[str, list[float]] = {name: [] for name in (*names, "booster_batch", "per_request")}
    gc.collect()
    for _ in range(5):
        n = max(rounds // 5, 1)
        times["single"].append(_median_us(lambda: booster.predict(one, num_threads=1), n))
        times["one_row"].append(_median_us(lambda: scorer.predict(subject.packed_one), n))
        with _Contender():
            single = _mean_us(lambda: booster.predict(one, num_threads=1), n)
            times["contended_single"].append(single)
            times["contended_one_row"].append(
                _mean_us(lambda: scorer.predict(subject.packed_one), n)
            )
        times["batch"].append(_median_us(lambda: scorer.predict(subject.packed), n))
        times["booster_batch"].append(
            _median_us(lambda: booster.predict(subject.rows, num_threads=1), n)
        )
        times["per_request"].append(_median_us(subject.price, n))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5000)
    parser.add_argument("--artifact", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    subject = _Subject(args.artifact)
    booster = subject.booster
    median = {name: statistics.median(ts) for name, ts in _timings(subject, args.rounds).items()}
    single_us, one_row_us, batch_us = median["single"], median["one_row"], median["batch"]
    contended = median["contended_single"], median["contended_one_row"]
    predicted = np.asarray(subject.scorer.predict(subject.packed))
    diff = np.max(np.abs(predicted - booster.predict(subject.rows)))
    result = {
        "trees": booster.num_trees(),
        "candidates": subject.candidates,
        "priced": len(subject.price()),
        "rounds": args.rounds,
        "single_us": round(single_us, 2),
        "one_row_us": round(one_row_us, 2),
        "one_row_ratio": round(one_row_us / single_us, 3),
        "contended_single_us": round(contended[0], 2),
        "contended_one_row_us": round(contended[1], 2),
        "contended_ratio": round(contended[1] / contended[0], 3),
        "batch_us": round(batch_us, 2),
        "batch_ratio": round(batch_us / single_us, 3),
        "booster_batch_ratio": round(median["booster_batch"] / single_us, 3),
        "per_request_us": round(median["per_request"], 2),
        "max_abs_diff": float(diff),
        **_stage8(subject.handle, args.rounds),
    }
    print(f"scored {subject.candidates} candidates with a {booster.num_trees()}-tree model")
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
