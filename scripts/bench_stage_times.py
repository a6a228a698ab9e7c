"""Benchmark per-stage timing of a bid request; prints one JSON line last.

    .venv/bin/python scripts/bench_stage_times.py [--rounds 200000]

A request that asks for its stage times (``X-Stage-Times: 1``,
``bidder.pipeline.stage_times``) pays one ``StageTimes.mark`` per step and one
``header()`` for the answer; a request that does not ask pays a None check per step
(``ctx.times is not None``) and one header lookup. CPU time each, the median of 5
blocks:

``mark_ns``      one step recorded (``perf_counter_ns``, the span, the append)
``header_us``    the answer header of a request of ``STEPS`` steps
``per_step_ns``  a timed request's whole cost divided by its steps (marks and header)
``check_ns``     the None check an untimed request pays per step
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import orjson

from bidder.pipeline.stage_times import StageTimes

STEPS = ("read", "ConsentStage", "EligibilityStage", "SupplyChainStage", "IdentityStage",
         "PacingStage", "FcapStage", "ScoreStage", "SupplyDedupStage", "respond")  # fmt: skip


def _cpu_ns(run: Callable[[int], None], rounds: int) -> float:
    samples = []
    for _ in range(5):
        start = time.process_time_ns()
        run(rounds)
        samples.append((time.process_time_ns() - start) / rounds)
    return statistics.median(samples)


def _marks(rounds: int) -> None:
    for _ in range(rounds // len(STEPS)):
        times = StageTimes()
        for name in STEPS:
            times.mark(name)


def _timed_request(rounds: int) -> None:
    for _ in range(rounds):
        times = StageTimes()
        for name in STEPS:
            times.mark(name)
        times.header()


def _checks(rounds: int) -> None:
    times = None
    for _ in range(rounds):
        if times is not None:
            times.mark("never")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200_000)
    rounds = parser.parse_args().rounds
    mark_ns = _cpu_ns(_marks, rounds)
    request_ns = _cpu_ns(_timed_request, rounds // 10)
    full = StageTimes()
    for name in STEPS:
        full.mark(name)
    header_us = (request_ns - mark_ns * len(STEPS)) / 1000
    figures = {
        "mark_ns": round(mark_ns, 1),
        "header_us": round(header_us, 3),
        "per_step_ns": round(request_ns / len(STEPS), 1),
        "check_ns": round(_cpu_ns(_checks, rounds), 1),
        "steps": len(STEPS),
        "header_bytes": len(full.header()),
    }
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
