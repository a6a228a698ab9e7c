"""Over-delivery vs replication delay across two regions: one Markdown table.

See ``bidder/chaos/region_delay.py``. Starts its own Valkey servers and moto server.

    .venv/bin/python scripts/region_delay.py [--delays-ms 0,500,2000] [--spread ssp|eu=1,us=1]
        [--requests 2000 --rate 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import orjson

from bidder.chaos.region_delay import REGIONS, Plan, measure, render
from bidder.replay.spread import parse_shares
from bidder.stack.local import LocalStack


def _plan(args: argparse.Namespace) -> Plan:
    delays = tuple(int(d) for d in args.delays_ms.split(","))
    if len(delays) < 1 or min(delays) < 0:
        raise ValueError("--delays-ms must be 0 or more, comma-separated")
    shares = None if args.spread == "ssp" else parse_shares(args.spread)
    if shares is not None and sorted(shares) != sorted(REGIONS):
        raise ValueError(f"--spread shares must name the regions {', '.join(REGIONS)}")
    return Plan(delays_ms=delays, requests=args.requests, rate=args.rate, shares=shares)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Plan()
    p.add_argument("--delays-ms", default=",".join(str(d) for d in default.delays_ms))
    p.add_argument("--spread", default="ssp", help="'ssp' or shares such as eu=1,us=1")
    p.add_argument("--requests", type=int, default=default.requests)
    p.add_argument("--rate", type=float, default=default.rate)
    p.add_argument("--json", type=Path, metavar="OUT")
    args = p.parse_args()
    try:
        plan = _plan(args)
    except ValueError as exc:
        p.error(str(exc))
    with LocalStack() as aws, tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(measure(aws.aws_endpoint, Path(tmp), plan))
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2) + b"\n")
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
