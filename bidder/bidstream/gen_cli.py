"""``bidsim gen``: write a synthetic bidstream (``bidder.bidstream.generator``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from bidder.bidstream.generator import DUPLICATE_SHARE, generate, parse_ssp_boost


def add_command(subparsers: Any) -> None:
    p = subparsers.add_parser("gen", help="generate a realistic bidstream")
    p.add_argument("--out", type=Path, required=True, help="output file (.jsonl or .jsonl.gz)")
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--requests", type=int)
    size.add_argument(
        "--minutes", type=float, metavar="M",
        help="the day's sends last M minutes at --rate: rate x 60 x M requests",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=400.0, help="mean send rate (req/s)")
    p.add_argument(
        "--ssp-boost", action="append", default=[], metavar="SSP=FACTOR",
        help="multiply one SSP's share of the traffic (repeatable), e.g. ssp-delta=10",
    )  # fmt: skip
    p.add_argument(
        "--heavy-users", type=int, default=0, metavar="N",
        help="the N most active people also get --heavy-share of all auctions",
    )  # fmt: skip
    p.add_argument("--heavy-share", type=float, default=0.0, metavar="F")
    p.add_argument(
        "--duplicate-share", type=float, default=DUPLICATE_SHARE, metavar="F",
        help="share of auctions sent through 2-3 SSPs (sharing source.tid)",
    )  # fmt: skip
    p.add_argument(
        "--multi-id", action="store_true",
        help="people use 1-3 devices or browsers, each with ids of its own",
    )  # fmt: skip
    p.add_argument(
        "--anonymous-share", type=float, default=0.0, metavar="F",
        help="about this share of faces send no id at all, only their household's IP",
    )  # fmt: skip
    p.set_defaults(command=cmd_gen)


def cmd_gen(args: argparse.Namespace) -> int:
    if args.minutes is not None:
        if not args.minutes > 0:
            raise ValueError("--minutes must be positive")
        args.requests = round(args.rate * 60 * args.minutes)
    if args.requests <= 0 or args.rate <= 0:
        raise ValueError("--requests and --rate must be positive")
    boost = parse_ssp_boost(args.ssp_boost) if args.ssp_boost else None
    summary = generate(
        args.out,
        requests=args.requests,
        seed=args.seed,
        mean_rate=args.rate,
        ssp_boost=boost,
        heavy_users=args.heavy_users,
        heavy_share=args.heavy_share,
        duplicate_share=args.duplicate_share,
        multi_id=args.multi_id,
        anonymous_share=args.anonymous_share,
    )
    print(orjson.dumps(summary.to_dict(), option=orjson.OPT_INDENT_2).decode())
    print(f"wrote {summary.requests} requests to {args.out}", file=sys.stderr)
    return 0
