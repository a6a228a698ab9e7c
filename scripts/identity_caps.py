"""Over-cap people by ground truth, identity graph off vs on, per cap class.

See ``bidder/chaos/identity_caps.py``. Starts its own Valkey and moto server.

    .venv/bin/python scripts/identity_caps.py [--requests 3000 --rate 300]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import orjson

from bidder.chaos.identity_caps import Plan, measure
from bidder.stack.local import LocalStack


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Plan()
    p.add_argument("--requests", type=int, default=default.requests)
    p.add_argument("--rate", type=float, default=default.rate)
    p.add_argument("--seed", type=int, default=default.seed)
    args = p.parse_args()
    plan = Plan(requests=args.requests, rate=args.rate, seed=args.seed)
    with LocalStack() as aws, tempfile.TemporaryDirectory() as tmp:
        endpoint = aws.aws_endpoint

        def private() -> LocalStack:
            return LocalStack(aws_endpoint=endpoint)

        figures = asyncio.run(measure(private, endpoint, Path(tmp), plan))
    sys.stdout.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
