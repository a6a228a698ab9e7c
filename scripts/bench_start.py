"""How long a full bidder takes to start, and the CPU it spends doing it.

A process starts a local stack (Valkey, moto), then a bidder on it (``running_bidder``:
``--workers`` workers and the reconciler, until every worker holds its first leases)
``--starts`` times in a row, stopping each before the next. Per start: wall time and the
CPU of the process's whole tree (utime + stime from /proc). The first start of a
process also starts the fork server the workers and the reconciler are forked from;
the later ones are what a test process pays for each further bidder.

With ``--before DIR`` the same runs on another checkout (a git worktree of an earlier
commit, with its own ``.venv``), rounds alternating, so a change's before and after
come from one run. The last line printed is one JSON object.

    .venv/bin/python scripts/bench_start.py [--starts 5 --rounds 2 --before DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Run by each checkout's own Python, from that checkout (its modules come first on
# ``sys.path``); ``tree_cpu_s`` comes from this checkout's scripts.
_STARTS = """
import asyncio, json, os, sys, tempfile, time
from pathlib import Path

async def main(starts, workers):
    sys.path.insert(0, sys.argv[3])
    from bench_http_servers import tree_cpu_s
    from bidder.chaos.harness import chaos_settings
    from bidder.serve.server import running_bidder
    from bidder.stack.local import LocalStack

    with LocalStack() as stack, tempfile.TemporaryDirectory() as tmp:
        for i in range(starts):
            settings = chaos_settings(stack, Path(tmp) / str(i), reconciler=True,
                                      workers=workers, spend_stream=f"bench-start-{i}")
            cpu, wall = tree_cpu_s(os.getpid()), time.monotonic()
            async with running_bidder(settings):
                wall, cpu = time.monotonic() - wall, tree_cpu_s(os.getpid()) - cpu
            print(json.dumps({"wall_s": wall, "cpu_s": cpu}), flush=True)

if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
"""


def one_process(tree: Path, starts: int, workers: int) -> list[dict[str, float]]:
    python = tree / ".venv/bin/python"
    if not python.exists():
        raise SystemExit(f"bench_start: {tree} has no .venv (run make venv there)")
    argv = [str(python), "-c", _STARTS, str(starts), str(workers), str(ROOT / "scripts")]
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"bench_start: the starts in {tree} failed:\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def summarize(runs: list[list[dict[str, float]]]) -> dict[str, Any]:
    first = [run[0] for run in runs]
    later = [start for run in runs for start in run[1:]]
    later_wall = [s["wall_s"] for s in later]
    return {
        "first_wall_s": [round(s["wall_s"], 2) for s in first],
        "first_cpu_s": [round(s["cpu_s"], 2) for s in first],
        "later_wall_s_median": round(statistics.median(later_wall), 2),
        "later_cpu_s_median": round(statistics.median(s["cpu_s"] for s in later), 2),
        "later_wall_s_range": [round(min(later_wall), 2), round(max(later_wall), 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="bidder starts per process")
    parser.add_argument("--rounds", type=int, default=2, help="processes per checkout")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--before", type=Path, help="also measure this checkout")
    args = parser.parse_args()
    if args.starts < 2 or args.rounds < 1 or args.workers < 1:
        parser.error("--starts must be at least 2, --rounds and --workers at least 1")
    trees = {"this": ROOT}
    if args.before is not None:
        trees["before"] = args.before.resolve()
    runs: dict[str, list[list[dict[str, float]]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(one_process(tree, args.starts, args.workers))
    figures = {name: summarize(found) for name, found in runs.items()}
    for name, f in figures.items():
        print(f"{name}: first start {f['first_wall_s']} s ({f['first_cpu_s']} s CPU); "
              f"later starts {f['later_wall_s_median']} s ({f['later_cpu_s_median']} s CPU)",
              file=sys.stderr)  # fmt: skip
    result: dict[str, Any] = {"benchmark": "bench_start", "workers": args.workers, **figures}
    if "before" in figures:
        this, before = figures["this"], figures["before"]
        result["later_cpu_ratio"] = round(
            this["later_cpu_s_median"] / before["later_cpu_s_median"], 3
        )
        result["later_wall_ratio"] = round(
            this["later_wall_s_median"] / before["later_wall_s_median"], 3
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
