"""Command line: ``bidsim pacing curve|simulate|tune`` and ``bidsim reconciler``.

``add_commands(subparsers)`` adds both to the ``bidsim`` parser; each handler takes the
parsed arguments and returns the exit status. Bad input is one line on stderr naming
the problem and status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from redis.exceptions import RedisError
from tqdm import tqdm

from bidder.adapters.campaign_store import CampaignTable, StoreError
from bidder.bidstream.stream import StreamFormatError
from bidder.core.clock import Clock, SimClockError, SimTime, SystemClock
from bidder.stack.child import StackError
from pacing.actual import Actual
from pacing.actual_options import actuals_from_args, add_actual_options
from pacing.config_file import (
    PacingFileError,
    chunk_conflict,
    chunk_periods_in_force,
    load_pacing_file,
    pacing_doc,
)
from pacing.curves import BUILTIN, Curve, CurveError, curve_from_stream, load_curve_file
from pacing.forecast_error import render, scenario_report
from pacing.pid import PidGains
from pacing.reconcile import DEFAULT_GAINS, PacingConfig
from pacing.reconciler import DEFAULT_STREAM, build_reconciler, campaigns_from_store, run_reconciler
from pacing.report import day_report, describe
from pacing.simulate import Market, Scenario, run
from pacing.spend_table import SpendStoreError
from pacing.stop_flag import SignalStop
from pacing.tune import grid, tune

_USER_ERRORS = (
    CurveError, PacingFileError, StreamFormatError, StoreError, SpendStoreError, StackError,
    SimClockError, OSError,
)  # fmt: skip
Handler = Callable[[argparse.Namespace], int]
MAX_LEDGER_LAG_TICKS = 1000
"""The largest ``--ledger-lag-ticks``: any finite bound that no real ledger comes near."""


def add_commands(subparsers: Any) -> None:
    """Add ``pacing`` (curve, simulate, tune) and ``reconciler`` to a subparsers object."""
    pacing = subparsers.add_parser("pacing", help="pacing curves, simulated days and tuning")
    sub = pacing.add_subparsers(required=True, metavar="COMMAND")
    curve = sub.add_parser("curve", help="derive a target curve from a recorded bidstream")
    curve.add_argument("stream", type=Path, metavar="STREAM")
    curve.add_argument("-o", "--out", type=Path, help="write the curve JSON here (default: stdout)")
    curve.set_defaults(command=cmd_curve)
    simulate = sub.add_parser("simulate", help="simulate a pacing day; JSON report and plots")
    _scenario_options(simulate)
    simulate.add_argument("--plots", type=Path, metavar="DIR", help="PNG directory")
    simulate.set_defaults(command=cmd_simulate)
    tune_p = sub.add_parser("tune", help="search PID gains and chunk sizes")
    _scenario_options(tune_p)
    tune_p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    tune_p.add_argument("--quick", action="store_true", help="a 12-setting grid")
    tune_p.add_argument(
        "--setting", action="append", default=[], metavar="KP,KI,KD,PERIODS",
        help="evaluate only these settings (repeatable) instead of a grid",
    )  # fmt: skip
    tune_p.add_argument(
        "--out", type=Path, metavar="FILE",
        help="write the chosen gains, chunk and curve here (serve/replay/reconciler"
        " --pacing-config)",
    )  # fmt: skip
    tune_p.set_defaults(command=cmd_tune)
    add_reconciler_command(subparsers)


def reconciler_main(argv: list[str]) -> int:
    """``bidsim reconciler ARGV`` without the bidder's other commands (loading those, the
    model library among them, costs about a second of CPU): how ``bidsim serve`` and the
    tests run the reconciler as their child (``bidder.serve.reconciler_process``)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    parser = argparse.ArgumentParser(prog="bidsim reconciler")
    _reconciler_options(parser)
    return cmd_reconciler(parser.parse_args(argv))


def add_reconciler_command(subparsers: Any) -> None:
    rec = subparsers.add_parser("reconciler", help="run the pacing reconciler until Ctrl-C")
    _reconciler_options(rec)
    rec.set_defaults(command=cmd_reconciler)


def _user_errors(handler: Handler) -> Handler:
    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except _USER_ERRORS as exc:
            print(f"bidsim: error: {exc}", file=sys.stderr)
            return 2

    return wrapped


def _scenario_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget-micros", type=int, default=10_000_000_000)
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--tick-s", type=float, default=5.0)
    p.add_argument("--curve", default="standard", help="built-in name or a curve JSON file")
    p.add_argument("--stream", type=Path, help="take the supply shape from this bidstream")
    p.add_argument("--supply-ratio", type=float, default=2.5,
                   help="spend at rate 1 / target spend (default 2.5)")  # fmt: skip
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kp", type=float, default=DEFAULT_GAINS.kp)
    p.add_argument("--ki", type=float, default=DEFAULT_GAINS.ki)
    p.add_argument("--kd", type=float, default=DEFAULT_GAINS.kd)
    p.add_argument("--chunk-periods", type=int, default=PacingConfig().chunk_periods_per_day,
                   help="chunk = budget / nodes / this (default 288)")  # fmt: skip
    p.add_argument("--ledger-lag-ticks", type=float, default=0.0, metavar="N",
                   help="each tick sees the spend applied N ticks before, fractions "
                        "allowed (default 0)")  # fmt: skip
    p.add_argument("--json", type=Path, metavar="OUT", help="write the JSON report here")
    add_actual_options(p)


def _reconciler_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--valkey", metavar="URL", required=True)
    p.add_argument(
        "--valkey-cluster", action="store_true", help="--valkey is a Valkey Cluster node"
    )
    p.add_argument("--aws-endpoint", metavar="URL", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--tick-s", type=float, default=5.0)
    p.add_argument(
        "--chunk-periods", type=int,
        help="lease chunk = budget / nodes / this (default 288; a --pacing-config file sets"
        " it instead)",
    )  # fmt: skip
    p.add_argument(
        "--breaker-window-s", type=float, default=PacingConfig().breaker_window_s, metavar="S",
        help="pause a campaign whose spend stays above 3x its target for S seconds",
    )  # fmt: skip
    p.add_argument(
        "--lag-threshold-s", type=float, default=PacingConfig().lag_threshold_s, metavar="S",
        help="grant no lease while the spend stream's consumer is more than S seconds behind",
    )  # fmt: skip
    p.add_argument("--stream", default=DEFAULT_STREAM, help="Kinesis spend stream")
    p.add_argument("--spend-table", default="bidsim-spend")
    p.add_argument("--campaign-table", default="bidsim-campaigns")
    p.add_argument("--curves", type=Path, metavar="DIR", help="named curves: DIR/NAME.json")
    p.add_argument(
        "--pacing-config", type=Path, metavar="FILE",
        help="gains, chunk and default curve from bidsim pacing tune --out",
    )  # fmt: skip
    p.add_argument(
        "--sim-clock", metavar="START_MS:SPEED[:AT_MS]",
        help="run on simulated wall time: START_MS at AT_MS (default now), SPEED x real time",
    )  # fmt: skip


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The scenario the options describe; raises CurveError/ValueError naming the option."""
    problems = []
    if args.budget_micros < 1:
        problems.append("--budget-micros must be at least 1")
    if args.nodes < 1:
        problems.append("--nodes must be at least 1")
    if args.supply_ratio <= 0:
        problems.append("--supply-ratio must be above 0")
    if not 0 <= args.ledger_lag_ticks <= MAX_LEDGER_LAG_TICKS:
        problems.append(f"--ledger-lag-ticks must be 0-{MAX_LEDGER_LAG_TICKS}")
    config = PacingConfig(tick_s=args.tick_s, chunk_periods_per_day=args.chunk_periods)
    problems += [f"--{p.replace('_', '-')}" for p in config.problems()]
    try:
        gains = PidGains(args.kp, args.ki, args.kd)
    except ValueError as exc:
        problems.append(f"--kp/--ki/--kd: {exc}")
        gains = DEFAULT_GAINS
    if problems:
        raise CurveError("; ".join(problems))
    return Scenario(
        budget_micros=args.budget_micros,
        nodes=args.nodes,
        curve=_curve(args.curve),
        supply=curve_from_stream(args.stream)[0] if args.stream else None,
        supply_ratio=args.supply_ratio,
        market=Market(),
        config=replace(config, gains=gains),
        seed=args.seed,
        ledger_lag_ticks=args.ledger_lag_ticks,
    )


def _curve(spec: str) -> Curve:
    if spec in BUILTIN:
        return BUILTIN[spec]
    if Path(spec).suffix == ".json" or os.sep in spec:
        return load_curve_file(spec)
    raise CurveError(f"--curve: {spec!r} is neither a built-in curve nor a .json file")


@_user_errors
def cmd_curve(args: argparse.Namespace) -> int:
    curve, counts = curve_from_stream(args.stream)
    doc = {**curve.to_doc(args.stream.stem), "requests_per_hour": counts}
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if args.out:
        args.out.write_bytes(text + b"\n")
    else:
        print(text.decode())
    return 0


@_user_errors
def cmd_simulate(args: argparse.Namespace) -> int:
    from pacing.plots import write_plots

    sc = scenario_from_args(args)
    actuals = actuals_from_args(args)
    plots_dir = args.plots or (args.json.parent if args.json else Path("pacing-plots"))
    if actuals:
        return _simulate_actuals(sc, actuals, args.json, plots_dir)
    ticks = int((sc.end_s - sc.start_s) / sc.config.tick_s)
    with tqdm(total=ticks, desc="simulated day", unit="tick", disable=None) as bar:
        report = day_report(sc, bar.update)
    trace, asap = run(sc), run(replace(sc, pacing=False))
    report["plots"] = [str(p) for p in write_plots(trace, plots_dir, asap)]
    _emit(report, args.json)
    return 0


def _simulate_actuals(
    sc: Scenario, actuals: dict[str, Actual], out: Path | None, plots_dir: Path
) -> int:
    """Each actual day paced and ASAP against its achievable curve: tables, JSON, plots."""
    from pacing.plots import write_day_plot

    reports = {}
    for name, actual in tqdm(actuals.items(), desc="days", unit="day", disable=None):
        reports[name] = scenario_report(replace(sc, actual=actual))
    plots = [str(write_day_plot(name, report, plots_dir)) for name, report in reports.items()]
    for name, report in reports.items():
        print(render(name, report) + "\n")
    doc = {"scenario": describe(sc), "scenarios": reports, "plots": plots}
    if out is not None:
        out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    return 0 if all(r["meets"] for r in reports.values()) else 1


@_user_errors
def cmd_tune(args: argparse.Namespace) -> int:
    sc = scenario_from_args(args)
    if args.out is not None and not args.out.parent.is_dir():
        raise CurveError(f"--out: no such directory: {args.out.parent}")
    actuals = actuals_from_args(args) or None
    settings = [_setting(spec) for spec in args.setting] or (
        grid((0.02, 0.03, 0.05), (0.001, 0.002), (0.0,), (288, 5_760)) if args.quick else grid()
    )
    with tqdm(total=len(settings), desc="tuning", unit="setting", disable=None) as bar:
        result = tune(sc, settings, bar.update, jobs=max(args.jobs, 1), actuals=actuals)
    _emit(result, args.json)
    best = result["best"]
    if best is None:
        print("bidsim: no setting met the acceptance bounds", file=sys.stderr)
        return 1
    print(
        f"best: kp {best['kp']:g}, ki {best['ki']:g}/s, kd {best['kd']:g} s, chunk"
        f" budget/nodes/{best['chunk_periods_per_day']}; worst-case mean |hourly error|"
        f" {best['worst_mean_abs_hourly_error']:.3%} over the forecast day and"
        f" {', '.join(result['scenarios'])}",
        file=sys.stderr,
    )
    if args.out is not None:
        gains = PidGains(best["kp"], best["ki"], best["kd"])
        doc = pacing_doc(gains, best["chunk_periods_per_day"], sc.curve, _curve_name(args), best)
        args.out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"pacing settings written to {args.out}", file=sys.stderr)
    return 0


def _setting(spec: str) -> tuple[float, float, float, int]:
    try:
        kp, ki, kd, periods = spec.split(",")
        setting = (float(kp), float(ki), float(kd), int(periods))
        PidGains(*setting[:3])
    except ValueError:
        raise CurveError(
            f"--setting: expected KP,KI,KD,PERIODS (gains >= 0), e.g. 0.03,0.001,0,288: {spec!r}"
        ) from None
    if setting[3] < 1:
        raise CurveError(f"--setting: PERIODS must be at least 1, got {spec!r}")
    return setting


def _curve_name(args: argparse.Namespace) -> str:
    return args.curve if args.curve in BUILTIN else Path(args.curve).stem


def _emit(doc: dict[str, Any], path: Path | None) -> None:
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    if path is not None:
        path.write_bytes(text + b"\n")
    summary = {k: v for k, v in doc.items() if not isinstance(v, list | dict)}
    print(orjson.dumps(summary).decode() if path is not None else text.decode())


@_user_errors
def cmd_reconciler(args: argparse.Namespace) -> int:
    from bidder.adapters.aws import aws_client
    from pacing.curves import load_curve_dir

    clock = _clock(args.sim_clock)
    config = PacingConfig(
        # Each real tick_s covers speed x as much wall time: the controller and the
        # leases' lifetime see that, while the ticks themselves come every real tick_s.
        tick_s=args.tick_s * clock.speed,
        breaker_window_s=args.breaker_window_s,
        lag_threshold_s=args.lag_threshold_s,
        chunk_periods_per_day=chunk_periods_in_force(args.chunk_periods, None),
    )
    conflict = chunk_conflict(args.chunk_periods, args.pacing_config)
    if conflict is not None:
        raise PacingFileError(conflict)
    if config.problems():
        raise CurveError("; ".join(f"--{p.replace('_', '-')}" for p in config.problems()))
    curves = load_curve_dir(args.curves) if args.curves else {}
    if args.pacing_config is not None:
        settings = load_pacing_file(args.pacing_config)
        config = settings.apply(config)
        curves.update(settings.curves())
        print(f"bidsim: pacing settings from {args.pacing_config}: {settings.summary()}",
              file=sys.stderr)  # fmt: skip
    store = CampaignTable(
        aws_client("dynamodb", args.aws_endpoint, args.region), args.campaign_table
    )
    try:
        reconciler = build_reconciler(
            args.valkey, args.aws_endpoint, campaigns_from_store(store), config,
            args.stream, args.spend_table, args.region, clock=clock, curves=curves,
            valkey_cluster=args.valkey_cluster,
        )  # fmt: skip
    except RedisError as exc:
        raise StackError(f"valkey at {args.valkey} is not reachable: {exc}") from exc
    stop = SignalStop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    on_sim = f" (simulated: {config.tick_s:g} s each)" if args.sim_clock else ""
    print(f"bidsim: reconciler ticking every {args.tick_s:g} s{on_sim}", file=sys.stderr)
    run_reconciler(reconciler, args.tick_s, stop, clock)
    return 0


def _clock(sim_clock: str | None) -> Clock:
    if sim_clock is None:
        return SystemClock()
    return SimTime.parse(sim_clock, SystemClock().wall_ms()).clock()
