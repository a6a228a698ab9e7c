"""``profile_store_down``: DynamoDB stalled, then down -> fail-soft.

What is injected: the moto server (DynamoDB: profiles, campaigns, spend totals; and
Kinesis) is frozen (SIGSTOP: reads hang until their timeout) once a third of the fault
pass is answered, and killed (SIGKILL: connections refused) after two thirds. Passes
at 400 req/s: warm-up, baseline (moto alive, new users: the cache fills from
DynamoDB), fault, and after (once the pacing leases have lapsed, moto still dead).

Each part has its own answer to losing moto: profile fills fail in the background
(the bid path never waits); the worker keeps its last campaigns; billed impressions
go to the local spool; the reconciler can neither apply spend nor read budgets, so
leases lapse and every campaign answers ``no_lease`` (fail-closed, as 204s).

Checked: every request of every pass answered 200/204 (no 5xx, no transport error;
no client timeout in a full run, ``ScenarioOptions.timeouts_allowed`` in the short form);
the fault pass has no more ``deadline`` no-bids than the baseline plus 3% of the pass;
fills did fail; notices kept being acknowledged in the fault pass; no bid after the
leases lapsed. Not measured here: lost ledger entries (the stream dies with moto;
``spend_stream_down`` measures them with moto frozen and resumed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import signal
from pathlib import Path

from bidder.chaos.faults import kill9, pause
from bidder.chaos.harness import (
    Live,
    ScenarioOptions,
    live_bidder,
    records,
    stream_file,
)
from bidder.chaos.observe import until_probe
from bidder.chaos.result import ScenarioResult, check_ratio_drop, pass_summary, record_answers
from bidder.chaos.steps import Run, replay_pass, run_on_stack
from bidder.replay.admin_metrics import metric
from bidder.replay.report import ReplayResult
from models.cli import add_commands

NAME = "profile_store_down"
INJECTED = "moto (DynamoDB profiles) frozen (SIGSTOP) at 1/3 of a pass, killed (SIGKILL) at 2/3"
RATE = 400.0
# (name, seed, requests short, requests full)
PASSES = (("warmup", 20, 800, 800), ("baseline", 21, 1500, 4000), ("fault", 22, 1500, 4000),
          ("after", 23, 400, 1000))  # fmt: skip
DEADLINE_MARGIN_SHARE = 0.03
"""Deadline no-bids the fault pass may show beyond the baseline, as a share of the
pass, in a full run (the short form allows ``ScenarioOptions.drop_margin``): loaded warm
passes showed 0-22; the failure guarded against (the loop waiting on a hung store read)
costs every request of that second."""
LAPSE_BOUND_S = 20.0


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run)


def load_profiles(endpoint: str, paths: list[Path]) -> None:
    """``bidsim profiles load`` for the users of ``paths`` (its output swallowed)."""
    parser = argparse.ArgumentParser(prog="bidsim")
    add_commands(parser.add_subparsers())
    argv = ["profiles", "load", "--aws-endpoint", endpoint]
    for path in paths:
        argv += ["--stream", str(path)]
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()):
        if args.command(args) != 0:
            raise RuntimeError("bidsim profiles load failed")


async def _answered(live: Live, mark: float) -> None:
    """Until the workers have answered ``mark`` bid requests in all (polled: a metric)."""
    answered = 0.0
    while answered < mark:
        await asyncio.sleep(0.05)
        answered = await metric(live.bidder.admin_url, "bidsim_bid_latency_seconds_count")


async def _fault_when_answered(live: Live, moto: int, start: float, count: int) -> None:
    """SIGSTOP moto after a third of the pass is answered, SIGKILL after two thirds."""
    for share, sig in ((1 / 3, signal.SIGSTOP), (2 / 3, signal.SIGKILL)):
        await _answered(live, start + count * share)
        (pause if sig == signal.SIGSTOP else kill9)(moto)


async def _run(run: Run) -> None:
    streams = {
        name: stream_file(run.workdir, name, short if run.short else full, seed=seed)
        for name, seed, short, full in PASSES
    }
    endpoint = run.stack.aws_endpoint
    await asyncio.to_thread(load_profiles, endpoint, list(streams.values()))
    passes = {name: records(path) for name, path in streams.items()}
    results: dict[str, ReplayResult] = {}
    async with live_bidder(run.stack, run.settings) as live:
        await replay_pass(live, passes["warmup"], RATE)
        results["baseline"] = await replay_pass(live, passes["baseline"], RATE)
        start = await metric(live.bidder.admin_url, "bidsim_bid_latency_seconds_count")
        fault = asyncio.create_task(
            _fault_when_answered(live, run.stack.pids["moto"], start, len(passes["fault"]))
        )
        try:
            results["fault"] = await replay_pass(live, passes["fault"], RATE)
            await asyncio.wait_for(fault, 10)
        finally:
            fault.cancel()
        lapse_s = await until_probe(live.target, lambda a: a.reason == "no_lease", LAPSE_BOUND_S)
        results["after"] = await replay_pass(live, passes["after"], RATE)
        fill_errors = await metric(
            live.bidder.admin_url, "bidsim_profile_fills_total", {"outcome": "error"}
        )
    _check(run, results, fill_errors, lapse_s)


def _check(
    run: Run, results: dict[str, ReplayResult], fill_errors: float, lapse_s: float | None
) -> None:
    scenario, checks = run.scenario, run.checks
    scenario.figures.update(
        passes={name: pass_summary(r) for name, r in results.items()},
        profile_fill_errors=int(fill_errors), leases_lapsed_after_s=lapse_s,
        ledger="not measured: the spend stream dies with moto (see spend_stream_down)",
    )  # fmt: skip
    figures = record_answers(checks, scenario, list(results.values()), None)
    baseline, fault = results["baseline"], results["fault"]
    check_ratio_drop(checks, scenario, [baseline], [fault], run.options.drop_margin())
    allowed = run.options.timeouts_allowed(figures.requests)
    checks.expect("client_timeouts", figures.timeouts, "<=", allowed)
    checks.expect("profile_fill_errors", fill_errors, ">", 0)
    margin = round(fault.requests * run.options.drop_margin(DEADLINE_MARGIN_SHARE))
    checks.expect(
        "fault_deadline_nobids_beyond_baseline",
        fault.nbr_reasons["deadline"] - baseline.nbr_reasons["deadline"], "<=", margin,
    )  # fmt: skip
    checks.expect("fault_notices_acknowledged", fault.auction.notices_ok, ">", 0)
    checks.expect("fault_notices_failed", fault.auction.notices_failed, "==", 0)
    checks.expect("leases_lapsed_to_no_lease_s", lapse_s, "<=", LAPSE_BOUND_S)
    after = results["after"]
    checks.expect("bids_after_the_leases_lapsed", after.status[200], "==", 0)
    checks.expect("no_lease_after_the_leases_lapsed", after.nbr_reasons["no_lease"], ">", 0)
    # Spend once the leases lapsed (the exchange model's wins of the after pass): none.
    scenario.overspend_micros = after.auction.spend_micros
    scenario.overspend_bound_micros = 0
