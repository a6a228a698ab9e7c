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
from typing import Any

import orjson
import uvloop

from bidder.adapters.campaign_store import StoreError
from bidder.bidstream.gen_cli import add_command as gen_command
from bidder.bidstream.identity_cli import add_commands as identity_commands
from bidder.bidstream.importers.cli import add_commands as import_commands
from bidder.bidstream.stream import StreamFormatError, StreamRecord, read_stream
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaign_warnings import never_in_effect
from bidder.core.campaigns import CampaignError
from bidder.replay.campaign_outcomes import Budget, budgets_of
from bidder.replay.compare import DEFAULT_THRESHOLD, compare, render_comparison
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, render_table, to_json
from bidder.replay.throttle import ThrottleRule
from bidder.serve.cli_options import (
    add_bidder_options,
    settings_from_args,
)
from bidder.serve.server import load_campaigns, running_bidder
from bidder.serve.settings import Settings, SettingsError
from bidder.serve.workers import WorkerPoolError
from bidder.stack.child import StackError, free_port, held_port
from bidder.stack.local import LocalStack
from models.cli import add_commands as model_commands
from pacing.cli import add_commands as pacing_commands
from pacing.config_file import load_pacing_file, settings_in_force, settings_line
from pacing.curves import BUILTIN, load_curve_dir

log = logging.getLogger("bidsim")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_STREAM = REPO_ROOT / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"

# Errors that are the user's input or environment, reported in one line.
_USER_ERRORS = (
    CampaignError,
    SettingsError,
    StackError,
    StoreError,
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
    _replay_parser(sub.add_parser("replay", help="replay a bidstream open-loop and report"))
    gen_command(sub)
    import_commands(sub)
    _campaigns_parser(sub.add_parser("campaigns", help="check or load a campaign file"))
    _report_parser(sub.add_parser("report", help="work with saved replay reports"))
    stack = sub.add_parser("stack", help="run embedded Valkey + moto until Ctrl-C")
    stack.set_defaults(command=_cmd_stack)
    pacing_commands(sub)
    identity_commands(sub)
    model_commands(sub)
    return parser


def _local_stack(args: argparse.Namespace, settings: Settings) -> LocalStack:
    """The embedded servers the settings do not point elsewhere (StackError explains)."""
    return LocalStack(
        valkey_url=settings.valkey_url,
        aws_endpoint=settings.aws_endpoint,
        cluster=args.local_cluster,
        cluster_replicas=args.local_cluster_replicas,
    )


def _on_stack(settings: Settings, stack: LocalStack) -> Settings:
    # --local-cluster already made the settings a cluster's (settings_from_args).
    return settings.replace(valkey_url=stack.valkey_url, aws_endpoint=stack.aws_endpoint)


# --- serve -----------------------------------------------------------------------------


def _serve_parser(p: argparse.ArgumentParser) -> None:
    add_bidder_options(p)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--admin-port", type=int, default=8081)
    p.set_defaults(command=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, args.port, args.admin_port)
    with _local_stack(args, settings) as stack:
        settings = _on_stack(settings, stack)
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


def _replay_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("stream", type=Path, help="bidstream file (.jsonl or .jsonl.gz)")
    p.add_argument("--target", metavar="URL", help="bidder URL; default: start the full bidder")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="time scale of the recorded sends")
    pace.add_argument("--rate", type=float, help="constant request rate instead (req/s)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--warmup", type=float, default=0.0, metavar="S", help="exclude the first S s")
    p.add_argument("--timeout-ms", type=float, default=100.0, help="client timeout (tmax)")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write the report as JSON")
    p.add_argument("--html", type=Path, metavar="OUT", help="also write the report as HTML")
    p.add_argument("--no-progress", action="store_true")
    faults = p.add_argument_group("exchange notice faults")
    faults.add_argument(
        "--duplicate-notices", type=float, default=0.0, metavar="SHARE",
        help="share of wins that send one notice twice (0-1)",
    )  # fmt: skip
    faults.add_argument(
        "--reorder-notices", action="store_true", help="bill before win, spread in a window"
    )
    faults.add_argument("--notice-window-ms", type=float, default=250.0, metavar="MS")
    exchange = p.add_argument_group("exchange rules")
    exchange.add_argument(
        "--no-throttle", action="store_true",
        help="send every request, however late the answers (pure latency runs)",
    )  # fmt: skip
    exchange.add_argument(
        "--throttle-threshold", type=float, default=0.85, metavar="SHARE",
        help="cut the request rate below this share of answers within tmax (0-1)",
    )  # fmt: skip
    p.add_argument(
        "--stage-times", type=float, default=1.0, metavar="SHARE",
        help="share of requests that ask the bidder for its stage times (0-1; default all)",
    )  # fmt: skip
    add_bidder_options(p)
    p.set_defaults(command=_cmd_replay)


def _cmd_replay(args: argparse.Namespace) -> int:
    _check_out_dirs(args.json, args.html)
    settings = settings_from_args(args, 0, 0)
    options = ReplayOptions(
        speed=args.speed,
        rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        timeout_ms=args.timeout_ms,
        deadline_ms=args.deadline_ms,
        duplicate_notices=args.duplicate_notices,
        reorder_notices=args.reorder_notices,
        notice_window_ms=args.notice_window_ms,
        path_policy=settings.path_policy,
        budgets=_budgets(settings),
        throttle=None if args.no_throttle else ThrottleRule(threshold=args.throttle_threshold),
        stage_times=args.stage_times,
    )
    records = list(read_stream(args.stream))
    if args.target:
        result = uvloop.run(replay(records, args.target, options, not args.no_progress))
        pacing = None
    else:
        result = _replay_embedded(args, records, options)
        pacing = settings_in_force(settings.pacing_config, settings.pacing_tick_s)
    _print_report(result, args.json, args.html, pacing)
    return 0


def _check_out_dirs(*outs: Path | None) -> None:
    """Refuse a report path in a missing directory before the work, not after it."""
    for out in outs:
        if out is not None and not out.parent.is_dir():
            raise ValueError(f"no such directory for the report: {out.parent}")


def _budgets(settings: Settings) -> dict[str, Budget]:
    """The campaign file's budgets and curves: what spend is measured against."""
    if settings.campaigns_path is None:
        return {}
    named = dict(BUILTIN)
    if settings.pacing_curves is not None:
        named.update(load_curve_dir(settings.pacing_curves))
    if settings.pacing_config is not None:
        named.update(load_pacing_file(settings.pacing_config).curves())
    return budgets_of(load_campaign_file(settings.campaigns_path), named)


def _replay_embedded(
    args: argparse.Namespace, records: list[StreamRecord], options: ReplayOptions
) -> ReplayResult:
    settings = settings_from_args(args, held_port(), free_port())
    with _local_stack(args, settings) as stack:
        settings = _on_stack(settings, stack)

        async def run() -> ReplayResult:
            async with running_bidder(settings) as bidder:
                target = f"{bidder.bid_url}/openrtb2/bid"
                return await replay(records, target, options, not args.no_progress)

        return uvloop.run(run())


def _print_report(
    result: ReplayResult,
    json_out: Path | None,
    html_out: Path | None,
    pacing: dict[str, Any] | None = None,
) -> None:
    """``pacing``: the settings the embedded bidder ran with (None: a bidder elsewhere)."""
    print(render_table(result))
    print(settings_line(pacing) if pacing else "pacing: set by the bidder at --target")
    report = {**to_json(result), "pacing": pacing}
    if json_out is not None:
        json_out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"report written to {json_out}")
    if html_out is not None:
        from bidder.replay.html import write_html  # matplotlib: only when asked for

        write_html(report, html_out)
        print(f"HTML report written to {html_out}")


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
    _check_out_dirs(args.html)
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


def _cmd_stack(args: argparse.Namespace) -> int:
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with LocalStack() as stack:
        print(f"valkey: {stack.valkey_url}\naws:    {stack.aws_endpoint}\nCtrl-C stops both.")
        signal.sigwait(stop_signals)
    return 0
