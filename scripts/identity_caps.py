"""Over-cap people by ground truth, identity graph off vs on, per cap class.

See ``bidder/chaos/identity_caps.py``. Starts its own Valkey and moto server.

    .venv/bin/python scripts/identity_caps.py [--requests 3000 --rate 300]
    .venv/bin/python scripts/identity_caps.py --fallback [--anonymous-share 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import orjson

from bidder.chaos.identity_caps import CLASS_RUNS, FALLBACK_RUNS, GRAPH_RUNS, Plan, measure
from bidder.stack.local import LocalStack

FALLBACK_SHARE = 0.3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Plan()
    p.add_argument("--requests", type=int, default=default.requests)
    p.add_argument("--rate", type=float, default=default.rate)
    p.add_argument("--seed", type=int, default=default.seed)
    p.add_argument(
        "--fallback", action="store_true",
        help="graph on, campaigns without then with a household fallback",
    )  # fmt: skip
    p.add_argument("--anonymous-share", type=float, default=None, metavar="F")
    p.add_argument("--limit", type=int, default=default.limit, help="the day cap")
    p.add_argument("--heavy-people", type=int, default=default.heavy_people)
    p.add_argument("--heavy-share", type=float, default=default.heavy_share)
    p.add_argument(
        "--per-class", action="store_true",
        help="graph on, one replay per class with that class's campaign alone",
    )  # fmt: skip
    args = p.parse_args()
    share = args.anonymous_share
    if share is None:
        share = FALLBACK_SHARE if args.fallback else default.anonymous_share
    plan = Plan(
        requests=args.requests, rate=args.rate, seed=args.seed, anonymous_share=share,
        limit=args.limit, heavy_people=args.heavy_people, heavy_share=args.heavy_share,
    )  # fmt: skip
    runs = FALLBACK_RUNS if args.fallback else GRAPH_RUNS
    if args.per_class:
        runs = CLASS_RUNS
    with LocalStack() as aws, tempfile.TemporaryDirectory() as tmp:
        endpoint = aws.aws_endpoint

        def private() -> LocalStack:
            return LocalStack(aws_endpoint=endpoint)

        figures = asyncio.run(measure(private, endpoint, Path(tmp), plan, runs))
    sys.stdout.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
