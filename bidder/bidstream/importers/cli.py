"""``bidsim import openrtb|ipinyou FILE... --out STREAM``: the command-line side.

Errors are ValueErrors with one message naming the problem (``ImportInputError``
names the file and line); ``bidder.cli`` prints them and exits with status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bidder.bidstream.generator import DEFAULT_DAY_START
from bidder.bidstream.importers.errors import RowError
from bidder.bidstream.importers.ipinyou import CNY_PER_USD, IpinyouFormat
from bidder.bidstream.importers.openrtb import OpenRtbFormat
from bidder.bidstream.importers.rows import Format
from bidder.bidstream.importers.run import import_files
from bidder.bidstream.importers.timing import Timeline, epoch_ms


def add_commands(subparsers: Any) -> None:
    """Add ``import`` with its ``openrtb`` and ``ipinyou`` formats to a subparsers object."""
    top = subparsers.add_parser("import", help="turn recorded logs into a bidstream")
    sub = top.add_subparsers(required=True, metavar="FORMAT")
    openrtb = sub.add_parser("openrtb", help="BidRequest JSON, one per line (gzip or plain)")
    _common(openrtb)
    when = openrtb.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--time-field", metavar="PATH",
        help="field holding the request time, epoch ms or RFC 3339 (e.g. ts, ext.received_at)",
    )  # fmt: skip
    when.add_argument("--rate", type=float, metavar="R", help="no time field: R requests/s")
    openrtb.add_argument(
        "--start", default=DEFAULT_DAY_START.isoformat(), metavar="RFC3339",
        help="with --rate: the wall-clock time of the first request",
    )  # fmt: skip
    ssp = openrtb.add_mutually_exclusive_group(required=True)
    ssp.add_argument("--ssp-field", metavar="PATH", help="field naming the SSP (e.g. ext.ssp)")
    ssp.add_argument("--ssp", metavar="NAME", help="one SSP name for every line")
    openrtb.set_defaults(command=_cmd_openrtb)
    ipinyou = sub.add_parser("ipinyou", help="iPinYou 2013 logs (raw or processed layout)")
    _common(ipinyou)
    ipinyou.add_argument(
        "--cny-per-usd", type=float, default=CNY_PER_USD, metavar="RATE",
        help="prices are CNY fen per CPM; USD CPM = fen / 100 / RATE (default %(default)s)",
    )  # fmt: skip
    ipinyou.set_defaults(command=_cmd_ipinyou)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", type=Path, nargs="+", metavar="FILE", help="input (gzip or plain)")
    p.add_argument("--out", type=Path, required=True, help="bidstream (.jsonl or .jsonl.gz)")
    p.add_argument("--no-progress", action="store_true")


def _cmd_openrtb(args: argparse.Namespace) -> int:
    fmt = OpenRtbFormat(time_field=args.time_field, ssp_field=args.ssp_field, ssp=args.ssp)
    timeline = Timeline(args.rate, _start_ms(args.start)) if args.rate is not None else Timeline()
    return _run(args, fmt, timeline)


def _cmd_ipinyou(args: argparse.Namespace) -> int:
    return _run(args, IpinyouFormat(cny_per_usd=args.cny_per_usd), Timeline())


def _run(args: argparse.Namespace, fmt: Format, timeline: Timeline) -> int:
    tally = import_files(args.files, args.out, fmt, timeline, progress=not args.no_progress)
    print(tally.render(args.out))
    return 0


def _start_ms(text: str) -> int:
    try:
        return epoch_ms(text)
    except RowError as exc:
        raise ValueError(f"--start: {exc.detail}") from None
