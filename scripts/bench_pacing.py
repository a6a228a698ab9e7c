"""Benchmark: one simulated pacing day, and a 100-setting tune (wall time, JSON lines).

    .venv/bin/python scripts/bench_pacing.py [--jobs N] [--skip-tune]

Prints one JSON line per figure. Not a test: the times depend on the machine.
"""

from __future__ import annotations

import argparse
import time

import orjson

from pacing.simulate import Scenario, timed_run
from pacing.tune import grid, tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--skip-tune", action="store_true")
    parser.add_argument("--days", type=int, default=3, help="simulated days to time (best of)")
    args = parser.parse_args()
    times = [timed_run(Scenario(seed=seed))[1] for seed in range(1, args.days + 1)]
    line = {"bench": "simulated_day", "best_s": min(times), "runs_s": times}
    print(orjson.dumps(line).decode())
    if not args.skip_tune:
        settings = grid()
        began = time.perf_counter()
        result = tune(Scenario(), settings, jobs=args.jobs)
        elapsed = time.perf_counter() - began
        line = {
            "bench": "tune",
            "settings": len(settings),
            "jobs": args.jobs,
            "seconds": round(elapsed, 2),
            "feasible": result["feasible"],
            "best": result["best"],
        }
        print(orjson.dumps(line).decode())


if __name__ == "__main__":
    main()
