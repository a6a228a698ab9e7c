"""Benchmark the scoring path; prints one JSON line last.

    .venv/bin/python scripts/bench_score.py [--rounds 5000] [--artifact DIR]

Figures (medians over ``--rounds`` interleaved rounds, one process):

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
                     rows + one predict + value, cap, floor and shading for each
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

import numpy as np
import orjson

from bidder.campaigns import load_campaign_file
from bidder.clock import ManualClock
from bidder.eligibility import Candidate
from models import features
from models.logs import impressions
from models.scorer import DEFAULT_DIR, ModelHandle
from models.serving import Pricer

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = 10


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5000)
    parser.add_argument("--artifact", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()

    campaigns = load_campaign_file(REPO / "fixtures" / "openrtb" / "campaigns.json")
    first = next(impressions(1, 1, campaigns))
    request = first.request._replace(at=1)  # first price: shading is the costly pricing path
    pairs = [(c, cr) for c in campaigns for cr in c.creatives if c.click_value_micros]
    candidates = [Candidate(first.candidate.imp, c, cr) for c, cr in pairs[:CANDIDATES]]
    handle = ModelHandle.load(args.artifact)
    scorer, booster = handle.current, handle.current.booster
    pricer = Pricer(handle, ManualClock(start_wall_ms=first.ts))
    rows = features.build_rows(request, first.ssp, first.profile, candidates, first.ts).copy()
    one = rows[:1].copy()

    gc.collect()
    single, one_row, batch, booster_batch, per_request = [], [], [], [], []
    contended_single, contended_one_row = [], []
    for _ in range(5):  # interleaved blocks: drift hits every figure alike
        n = max(args.rounds // 5, 1)
        single.append(_median_us(lambda: booster.predict(one, num_threads=1), n))
        one_row.append(_median_us(lambda: scorer.predict(one), n))
        with _Contender():
            contended_single.append(_mean_us(lambda: booster.predict(one, num_threads=1), n))
            contended_one_row.append(_mean_us(lambda: scorer.predict(one), n))
        batch.append(_median_us(lambda: scorer.predict(rows), n))
        booster_batch.append(_median_us(lambda: booster.predict(rows, num_threads=1), n))
        per_request.append(
            _median_us(lambda: pricer.price(request, first.ssp, first.profile, candidates), n)
        )
    single_us, batch_us = statistics.median(single), statistics.median(batch)
    one_row_us = statistics.median(one_row)
    contended = statistics.median(contended_single), statistics.median(contended_one_row)
    diff = np.max(np.abs(np.asarray(scorer.predict(rows)) - booster.predict(rows)))
    priced = pricer.price(request, first.ssp, first.profile, candidates)
    result = {
        "trees": booster.num_trees(),
        "candidates": len(candidates),
        "priced": len(priced),
        "rounds": args.rounds,
        "single_us": round(single_us, 2),
        "one_row_us": round(one_row_us, 2),
        "one_row_ratio": round(one_row_us / single_us, 3),
        "contended_single_us": round(contended[0], 2),
        "contended_one_row_us": round(contended[1], 2),
        "contended_ratio": round(contended[1] / contended[0], 3),
        "batch_us": round(batch_us, 2),
        "batch_ratio": round(batch_us / single_us, 3),
        "booster_batch_ratio": round(statistics.median(booster_batch) / single_us, 3),
        "per_request_us": round(statistics.median(per_request), 2),
        "max_abs_diff": float(diff),
    }
    print(f"scored {len(candidates)} candidates with a {booster.num_trees()}-tree model")
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
