"""``bidsim replay``: its options, the stack it starts, the clock it runs on, the report.

Without ``--target`` the replay starts the whole bidder on the embedded stack. With
``--clock stream`` (the default) the stack runs on the stream's simulated clock
(``bidder.replay.stream_clock``): it starts at the stream's first instant a lead time
from now, the stack comes up meanwhile (its clock holds at the start), and the first
send goes at that instant. With ``--target`` the bidder's clock is read from
``GET /clock`` and a bidder on another clock is refused.

The stream is never held in memory (``StreamFile``): one pass checks every line and
fits the clock (``ClockFit``) before anything starts, then the replay reads each line
as it is due, and a looped replay (``--duration`` past the stream's end) reads the file
again for each pass.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bidder.bidstream.stream import StreamFile
from bidder.core.campaigns import Campaign
from bidder.replay.campaign_outcomes import Budget, budgets_of
from bidder.replay.ledger_audit import acknowledged_bills, audit_line, audit_stream
from bidder.replay.load_shed import admission, render_shed, shed_section
from bidder.replay.offline_days import offline_settings
from bidder.replay.options import DEFAULT_CONNECTIONS
from bidder.replay.pacing_figures import pacing_section, render_loop, render_pacing
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, render_table, to_json
from bidder.replay.slowest import SLOWEST_KEPT
from bidder.replay.stream_clock import (
    ClockFit,
    StreamClock,
    clock_problem,
    on_clock,
    read_target_clock,
    target_problem,
)
from bidder.replay.throttle import ThrottleRule
from bidder.serve.cli_options import (
    add_bidder_options,
    local_regions,
    local_stack,
    on_stack,
    settings_from_args,
)
from bidder.serve.server import campaigns_of, running_bidder
from bidder.serve.settings import Settings
from bidder.stack.child import held_port
from fcap.rules import build_subjects
from pacing.config_file import load_pacing_file, settings_in_force, settings_line
from pacing.curves import BUILTIN, load_curve_dir

DEFAULT_LEAD_S = 20.0


def replay_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("stream", type=Path, help="bidstream file (.jsonl or .jsonl.gz)")
    p.add_argument("--target", metavar="URL", help="bidder URL; default: start the full bidder")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="time scale of the recorded sends")
    pace.add_argument("--rate", type=float, help="constant request rate instead (req/s)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--warmup", type=float, default=0.0, metavar="S", help="exclude the first S s")
    p.add_argument("--timeout-ms", type=float, default=100.0, help="client timeout (tmax)")
    p.add_argument(
        "--clock", choices=("auto", "stream", "real"), default="auto",
        help="the bidder's wall clock: the stream's simulated one (each request arrives at "
        "its ts; with --speed), the real one, or (auto) the stream's where the stack can "
        "pace on it",
    )  # fmt: skip
    p.add_argument(
        "--lead-s", type=float, default=DEFAULT_LEAD_S, metavar="S",
        help="on the stream's clock: the stack's start-up time before the first send",
    )  # fmt: skip
    p.add_argument(
        "--supply-from", type=Path, metavar="REPORT",
        help="a JSON report of this stream replayed with budgets too large to bind: the "
        "supply of the offline pacing figures",
    )  # fmt: skip
    p.add_argument(
        "--audit-ledger", action="store_true",
        help="on the embedded stack, after the replay: every acknowledged bill in the spend "
        "stream, and DynamoDB's totals equal to the ledger's sums",
    )  # fmt: skip
    p.add_argument("--json", type=Path, metavar="OUT", help="also write the report as JSON")
    p.add_argument("--html", type=Path, metavar="OUT", help="also write the report as HTML")
    p.add_argument("--no-progress", action="store_true")
    _exchange_options(p)
    p.add_argument(
        "--stage-times", type=float, default=1.0, metavar="SHARE",
        help="share of requests that ask the bidder for its stage times (0-1; default all)",
    )  # fmt: skip
    p.add_argument(
        "--slowest", type=int, default=SLOWEST_KEPT, metavar="N",
        help=f"the JSON report lists the N slowest of those answers (default {SLOWEST_KEPT})",
    )  # fmt: skip
    p.add_argument(
        "--no-campaign-trace", action="store_true",
        help="don't ask the bidder what it decided per campaign (eligible, capped, shading)",
    )  # fmt: skip
    add_bidder_options(p)
    p.set_defaults(command=cmd_replay)


def _exchange_options(p: argparse.ArgumentParser) -> None:
    """How the replay behaves as the exchange: its connections, its notices, its throttle."""
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
        "--connections", type=int, default=DEFAULT_CONNECTIONS, metavar="N",
        help="connections to the bidder kept open and used in turn, as an exchange's servers "
        "keep theirs: the kernel spreads connections, not requests, over the bidder's workers "
        "(default %(default)s)",
    )  # fmt: skip
    exchange.add_argument(
        "--no-throttle", action="store_true",
        help="send every request, however late the answers (pure latency runs)",
    )  # fmt: skip
    exchange.add_argument(
        "--throttle-threshold", type=float, default=0.85, metavar="SHARE",
        help="cut the request rate below this share of answers within tmax (0-1)",
    )  # fmt: skip


def cmd_replay(args: argparse.Namespace) -> int:
    check_out_dirs(args.json, args.html)
    if args.audit_ledger and args.target:
        raise ValueError("--audit-ledger audits the embedded stack: it cannot with --target")
    settings = settings_from_args(args, 0, 0)
    campaigns = _campaigns(settings)
    options = ReplayOptions(
        speed=args.speed,
        rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        timeout_ms=args.timeout_ms,
        connections=args.connections,
        deadline_ms=args.deadline_ms,
        duplicate_notices=args.duplicate_notices,
        reorder_notices=args.reorder_notices,
        notice_window_ms=args.notice_window_ms,
        path_policy=settings.path_policy,
        budgets=_budgets(settings, campaigns),
        throttle=None if args.no_throttle else ThrottleRule(threshold=args.throttle_threshold),
        stage_times=args.stage_times,
        slowest=args.slowest,
        campaign_trace=not args.no_campaign_trace,
        cap_subjects=build_subjects(campaigns),
    )
    calibrated = read_calibration_report(args.supply_from) if args.supply_from else None
    calibration = calibrated["campaigns"] if calibrated else None
    records, fit = checked_stream(args.stream)
    clock = _wanted_clock(args, settings, fit)
    if args.target:
        result = uvloop.run(_replay_target(args, records, options, clock))
        pacing = None
    else:
        result = _replay_embedded(args, records, options, clock)
        pacing = settings_in_force(
            settings.pacing_config, settings.pacing_tick_s, settings.chunk_periods
        )
    report = {**to_json(result), "pacing": pacing}
    if clock is not None:
        offline = offline_settings(on_clock(settings, clock, 0), clock.speed)
        book = calibrated.get("supply_book") if calibrated else None
        report["pacing_day"] = pacing_section(
            report["campaigns"], options.budgets, calibration, offline, book,
            admission(report, calibrated),
        )  # fmt: skip
        report["pacing_day_shed"] = shed_section(report, calibrated)
        report["pacing_day_settings"] = {**offline.summary(), "speed": clock.speed}
    print_report(result, report, args.json, args.html)
    return 0


def checked_stream(path: Path) -> tuple[StreamFile, ClockFit]:
    """The stream to replay, read once to check every line and fit its clock.

    Before the stack starts, so a bad line is refused up front; nothing of it is kept:
    the replay reads the file again as it sends.
    """
    records = StreamFile(path)
    return records, ClockFit.of(records)


def read_calibration(path: Path) -> dict[str, Any]:
    """The campaigns of a saved replay report (``--supply-from``)."""
    campaigns: dict[str, Any] = read_calibration_report(path)["campaigns"]
    return campaigns


def read_calibration_report(path: Path) -> dict[str, Any]:
    """A saved replay report with campaigns (``--supply-from``), whole."""
    try:
        report: dict[str, Any] = orjson.loads(path.read_bytes())
        if not isinstance(report["campaigns"], dict):
            raise TypeError("campaigns is not an object")
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(
            f"--supply-from {path}: not a replay report with campaigns ({exc})"
        ) from None
    return report


def _wanted_clock(
    args: argparse.Namespace, settings: Settings, fit: ClockFit
) -> StreamClock | None:
    """The stream's clock this replay runs the bidder on; None: the real clock."""
    if args.lead_s < 0:
        raise ValueError(f"--lead-s must not be negative, got {args.lead_s}")
    if args.clock == "real" or (args.clock == "auto" and args.rate is not None):
        return None
    if args.rate is not None:
        raise ValueError("--rate ignores the stream's times: use --speed, or --clock real")
    clock = fit.clock(args.speed)
    problem = "the stream's t_ms and ts do not both advance" if clock is None else None
    if clock is not None and not args.target:
        problem = clock_problem(clock, settings.pacing_tick_s)
    if problem is None:
        print(
            f"bidsim: the bidder runs on the stream's clock ({clock_text(clock)})", file=sys.stderr
        )
        return clock
    if args.clock == "stream":
        raise ValueError(problem)
    print(f"bidsim: the bidder runs on the real clock: {problem}", file=sys.stderr)
    return None


async def _replay_target(
    args: argparse.Namespace,
    records: StreamFile,
    options: ReplayOptions,
    wanted: StreamClock | None,
) -> ReplayResult:
    try:
        target = await read_target_clock(args.target)
    except LookupError as exc:
        if wanted is not None:
            raise ValueError(f"{exc}; with --clock real the replay does not ask") from None
        target = None
    problem = target_problem(wanted, target, time.time_ns() // 1_000_000)
    if problem is not None:
        raise ValueError(problem)
    if target is not None:
        await _until(target.at_ms)
    return await replay(records, args.target, options, not args.no_progress)


def _replay_embedded(
    args: argparse.Namespace,
    records: StreamFile,
    options: ReplayOptions,
    clock: StreamClock | None,
) -> ReplayResult:
    settings = settings_from_args(args, held_port(), 0)
    start_at_ms = time.time_ns() // 1_000_000 + round(args.lead_s * 1000)
    if clock is not None:
        settings = on_clock(settings, clock, start_at_ms)
    with local_stack(args, settings) as stack, local_regions(args, settings) as regional:
        settings = on_stack(regional, stack)

        async def run() -> ReplayResult:
            async with running_bidder(settings) as bidder:
                if clock is not None:
                    late_s = (time.time_ns() // 1_000_000 - start_at_ms) / 1000
                    if late_s > 0:
                        raise ValueError(
                            f"the stack took {late_s:.1f} s longer to start than --lead-s "
                            f"{args.lead_s:g}: the first requests would arrive after their ts"
                        )
                    await _until(start_at_ms)
                target = f"{bidder.bid_url}/openrtb2/bid"
                result = await replay(records, target, options, not args.no_progress)
                if args.audit_ledger:
                    flush_s = settings.metrics_flush_s
                    acknowledged = await acknowledged_bills(bidder.admin_url, flush_s)
                    result.ledger = (await audit_stream(settings, acknowledged)).figures()
                return result

        return uvloop.run(run())


def clock_text(clock: StreamClock | None) -> str:
    return "real" if clock is None else f"starts at {clock.start_ms}, runs {clock.speed:g}x"


async def _until(epoch_ms: int) -> None:
    await asyncio.sleep(max(epoch_ms / 1000 - time.time(), 0.0))


def check_out_dirs(*outs: Path | None) -> None:
    """Refuse a report path in a missing directory before the work, not after it."""
    for out in outs:
        if out is not None and not out.parent.is_dir():
            raise ValueError(f"no such directory for the report: {out.parent}")


def _campaigns(settings: Settings) -> list[Campaign]:
    """The campaign file's campaigns (budgets scaled); none without a file."""
    if settings.campaigns_path is None:
        return []
    return campaigns_of(settings.campaigns_path, settings)


def _budgets(settings: Settings, campaigns: list[Campaign]) -> dict[str, Budget]:
    """The campaigns' budgets and curves: what spend is measured against."""
    if not campaigns:
        return {}
    named = dict(BUILTIN)
    if settings.pacing_curves is not None:
        named.update(load_curve_dir(settings.pacing_curves))
    if settings.pacing_config is not None:
        named.update(load_pacing_file(settings.pacing_config).curves())
    return budgets_of(campaigns, named)


def print_report(
    result: ReplayResult, report: dict[str, Any], json_out: Path | None, html_out: Path | None
) -> None:
    """``report["pacing"]``: the settings the embedded bidder ran with (None: a bidder
    elsewhere); ``report["pacing_day"]``: the day's pacing figures, on the stream's clock."""
    print(render_table(result))
    pacing = report.get("pacing")
    print(settings_line(pacing) if pacing else "pacing: set by the bidder at --target")
    if result.ledger is not None:
        print(audit_line(result.ledger))
    if report.get("pacing_day"):
        print()
        print(render_pacing(report["pacing_day"]))
        print(render_shed(report.get("pacing_day_shed") or {}))
        print(render_loop(report.get("pacing_day_settings") or {}))
    if json_out is not None:
        json_out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"report written to {json_out}")
    if html_out is not None:
        from bidder.replay.html import write_html  # matplotlib: only when asked for

        write_html(report, html_out)
        print(f"HTML report written to {html_out}")


__all__ = [
    "check_out_dirs",
    "checked_stream",
    "cmd_replay",
    "print_report",
    "read_calibration",
    "replay_parser",
]
