"""``bidsim``: the command line.

Every subcommand turns bad input into one line naming the problem and exit
status 2; an unexpected failure prints a short message and leaves the
traceback in a log file, never on the user's terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
import uvloop

from bidder.adapters.campaign_store import StoreError
from bidder.bidstream.gen_cli import add_command as gen_command
from bidder.bidstream.identity_cli import add_commands as identity_commands
from bidder.bidstream.importers.cli import add_commands as import_commands
from bidder.bidstream.stream import StreamFormatError
from bidder.core.campaign_docs import campaign_to_doc, load_campaign_file
from bidder.core.campaign_warnings import never_in_effect
from bidder.core.campaigns import CampaignError
from bidder.decide.identity_table import IdentityStoreError
from bidder.replay.command import check_out_dirs, read_calibration, replay_parser
from bidder.replay.compare import DEFAULT_THRESHOLD, compare, render_comparison
from bidder.replay.pacing_figures import sized
from bidder.serve.cli_options import (
    add_bidder_options,
    local_regions,
    local_stack,
    on_stack,
    settings_from_args,
)
from bidder.serve.server import load_campaigns, running_bidder
from bidder.serve.settings import Settings, SettingsError
from bidder.serve.workers import WorkerPoolError
from bidder.stack.child import StackError
from bidder.stack.local import LocalStack
from fcap.replicator_cli import add_commands as regions_commands
from models.cli import add_commands as model_commands
from pacing.cli import add_commands as pacing_commands

log = logging.getLogger("bidsim")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_STREAM = REPO_ROOT / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"

# Errors that are the user's input or environment, reported in one line.
_USER_ERRORS = (
    CampaignError,
    SettingsError,
    StackError,
    StoreError,
    IdentityStoreError,
    StreamFormatError,
    WorkerPoolError,
    ValueError,
    OSError,
)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = _parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    previous = signal.signal(signal.SIGTERM, _stop_as_ctrl_c)
    try:
        return command(args)
    except KeyboardInterrupt:
        print("bidsim: interrupted", file=sys.stderr)
        return 130
    except _USER_ERRORS as exc:
        print(f"bidsim: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        return _report_bug(exc)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops a command the way Ctrl-C does, through SIGINT's handler of the
    moment (a replay's event loop cancels its main task, so the bidder and the stack it
    started shut down in order), or as a KeyboardInterrupt where SIGINT has no handler
    of Python's (ignored, as in a job a shell started in the background). SIGTERM's own
    default ends the process at once: its children then stop on their parent's death all
    together, the workers after the Valkey and moto their last writes need."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _report_bug(exc: Exception) -> int:
    with tempfile.NamedTemporaryFile("w", prefix="bidsim-crash-", suffix=".log", delete=False) as f:
        traceback.print_exception(exc, file=f)
    print(f"bidsim: internal error: {exc!r} (traceback in {f.name})", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bidsim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    _serve_parser(
        sub.add_parser("serve", help="run the bidder (embedded Valkey + moto by default)")
    )
    replay_parser(sub.add_parser("replay", help="replay a bidstream open-loop and report"))
    gen_command(sub)
    import_commands(sub)
    _campaigns_parser(sub.add_parser("campaigns", help="check or load a campaign file"))
    _report_parser(sub.add_parser("report", help="work with saved replay reports"))
    stack = sub.add_parser("stack", help="run embedded Valkey + moto until Ctrl-C")
    stack.set_defaults(command=_cmd_stack)
    pacing_commands(sub)
    identity_commands(sub)
    regions_commands(sub)
    model_commands(sub)
    return parser


# --- serve -----------------------------------------------------------------------------


def _serve_parser(p: argparse.ArgumentParser) -> None:
    add_bidder_options(p)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--admin-port", type=int, default=8081, help="0: any free port (printed)")
    p.set_defaults(command=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, args.port, args.admin_port)
    with local_stack(args, settings) as stack, local_regions(args, settings) as regional:
        settings = on_stack(regional, stack)
        return uvloop.run(_serve_until_stopped(settings))


async def _serve_until_stopped(settings: Settings) -> int:
    async with running_bidder(settings) as bidder:
        print(f"bidsim: bidding at {bidder.bid_url}/openrtb2/bid", file=sys.stderr)
        print(f"bidsim: admin at {bidder.admin_url}/metrics and /healthz", file=sys.stderr)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()  # a worker that dies meanwhile is replaced by the pool
    return 0


# --- replay ----------------------------------------------------------------------------


def _report_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(required=True, metavar="ACTION")
    compare = sub.add_parser("compare", help="every figure's change between two JSON reports")
    compare.add_argument("base", type=Path, help="the report to compare against")
    compare.add_argument("new", type=Path)
    compare.add_argument(
        "--base-run", type=Path, action="append", default=[], metavar="JSON",
        help="another run of the base build (repeatable): widens the noise by their spread",
    )  # fmt: skip
    compare.add_argument(
        "--threshold", type=float, default=100 * DEFAULT_THRESHOLD, metavar="PCT",
        help="a latency rise beyond noise and over PCT%% of the base exits 1 (default 10)",
    )  # fmt: skip
    compare.add_argument("--html", type=Path, metavar="OUT", help="also write it as HTML")
    compare.set_defaults(command=_cmd_report_compare)


def _cmd_report_compare(args: argparse.Namespace) -> int:
    check_out_dirs(args.html)
    if not args.threshold >= 0:
        raise ValueError(f"--threshold must be a percentage >= 0, got {args.threshold}")
    threshold = args.threshold / 100
    base, new = _read_report(args.base), _read_report(args.new)
    more = [_read_report(path) for path in args.base_run]
    comparison = compare(base, new, threshold, more)
    print(render_comparison(comparison, threshold))
    if args.html is not None:
        from bidder.replay.html import write_compare_html  # matplotlib: only when asked for

        write_compare_html(base, new, comparison, threshold, args.html)
        print(f"HTML comparison written to {args.html}")
    return 1 if comparison.regressions else 0


def _read_report(path: Path) -> dict[str, Any]:
    try:
        report = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(report, dict) or "latency_ms" not in report:
        raise ValueError(f"{path}: not a replay report (bidsim replay --json)")
    return report


# --- campaigns, stack ------------------------------------------------------------------


def _campaigns_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate a campaign file")
    check.add_argument("file", type=Path)
    check.set_defaults(command=_cmd_campaigns_check)
    load = sub.add_parser("load", help="validate and load a campaign file into DynamoDB")
    load.add_argument("file", type=Path)
    load.add_argument("--aws-endpoint", metavar="URL", required=True)
    load.set_defaults(command=_cmd_campaigns_load)
    size = sub.add_parser("size", help="budgets that bind on a stream, from a calibration replay")
    size.add_argument("file", type=Path)
    size.add_argument("--supply-from", type=Path, required=True, metavar="REPORT")
    size.add_argument("--supply-ratio", type=float, default=2.5, metavar="R")
    size.add_argument("--nodes", type=int, default=2, help="bid workers of the paced replay")
    size.add_argument("--chunk-periods", type=int, default=4, metavar="N", help="its chunk periods")
    size.add_argument(
        "--min-wins", type=float, metavar="N",
        help="keep campaigns that won at least N impressions at rate 1 (default: 100 x R)",
    )  # fmt: skip
    size.add_argument(
        "--curve", choices=("keep", "supply"), default="keep",
        help="supply: each campaign paces to its own spend per hour at rate 1 (the forecast)",
    )  # fmt: skip
    size.add_argument("--out", type=Path, required=True)
    size.set_defaults(command=_cmd_campaigns_size)


def _cmd_campaigns_check(args: argparse.Namespace) -> int:
    campaigns = load_campaign_file(args.file)
    warnings = never_in_effect(campaigns)
    for warning in warnings:
        print(f"{args.file}: warning: {warning}")
    plural = "" if len(warnings) == 1 else "s"
    print(f"{args.file}: {len(campaigns)} campaigns, all valid, {len(warnings)} warning{plural}")
    return 0


def _cmd_campaigns_load(args: argparse.Namespace) -> int:
    settings = Settings(aws_endpoint=args.aws_endpoint).validate()
    count = load_campaigns(args.file, settings)
    print(f"loaded {count} campaigns into {settings.campaigns_table} at {args.aws_endpoint}")
    return 0


def _cmd_campaigns_size(args: argparse.Namespace) -> int:
    check_out_dirs(args.out)
    calibration = read_calibration(args.supply_from)
    chunks = args.nodes * args.chunk_periods
    campaigns = sized(
        load_campaign_file(args.file), calibration, args.supply_ratio, chunks,
        min_wins=args.min_wins, curve_from_supply=args.curve == "supply",
    )  # fmt: skip
    docs = {"version": 1, "campaigns": [campaign_to_doc(c) for c in campaigns]}
    args.out.write_bytes(orjson.dumps(docs, option=orjson.OPT_INDENT_2) + b"\n")
    for c in campaigns:
        print(f"  {c.id:<32} {c.daily_budget_micros:>14,} micros")
    print(f"wrote {len(campaigns)} campaigns to {args.out} (spend at rate 1 = "
          f"{args.supply_ratio:g}x budget)")  # fmt: skip
    return 0


def _cmd_stack(args: argparse.Namespace) -> int:
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with LocalStack() as stack:
        print(f"valkey: {stack.valkey_url}\naws:    {stack.aws_endpoint}\nCtrl-C stops both.")
        signal.sigwait(stop_signals)
    return 0
