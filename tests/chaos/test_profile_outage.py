"""A DynamoDB (moto) outage in the middle of a replay, on the whole running service.

One private stack (Valkey + moto: this test kills moto), one ``running_bidder`` (a worker
process, the reconciler process, the admin port), replays of generated streams (after
a warm-up pass):

1. baseline: the same kind of traffic with moto alive (new users: the cache misses
   and fills from DynamoDB as in any cold start);
2. fault: moto is frozen (SIGSTOP: reads hang until their timeout) once a third of the
   stream has been answered, and killed (SIGKILL: connections refused) after two thirds;
3. after: once the leases have run out, a short stream with moto still dead.

moto holds more than profiles, and each part has its own answer to losing it:

* profiles (stage 5): fills fail in the background, the bid path never waits; cached
  users keep their profiles, the others are served without one;
* campaigns: the worker keeps the last good copy (a refresh only replaces it on success);
* spend stream: billed impressions go to the local spool, shipped when Kinesis is back;
* the reconciler cannot apply spend nor read budgets, so it writes no leases: they expire
  two ticks later and every campaign answers ``no_lease``. Budget that cannot be read
  means no spend: this part fails closed on purpose, as 204s, not as errors.

So what "no 5xx, no deadline miss" covers: every request of every pass is answered,
with a 200 or a 204, none with a 5xx, none timed out or dropped by the transport, and
the fault pass has no more ``deadline`` no-bids than the baseline (plus a margin for a
busy 2-core machine). What fails closed: bids, once the leases lapse (pass 3 has none).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from bidder.replay.generator import generate
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, status_classes
from bidder.replay.stream import StreamRecord, read_stream
from bidder.server import running_bidder
from bidder.settings import Settings
from bidder.stack import LocalStack
from models.cli import add_commands
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import stack_settings
from tests.bidder.openrtb_checks import with_fresh_user

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
PASS_REQUESTS = 1_500
RATE = 400.0
# Deadline no-bids the fault pass may show beyond the baseline: 3% of the pass. On the
# shared, loaded 2-core machine warm passes showed 0-11 without the fault, 0-22 with it;
# the failure this guards against, the loop waiting on a hung store read (1 s for a
# profile fill, 5 s for other boto3 calls), costs every request of that second: 400.
DEADLINE_MARGIN = PASS_REQUESTS * 3 // 100
_POLL_S = 0.05
_WAIT_BOUND_S = 20.0

# (name, generator seed, requests). A fresh worker's first seconds miss deadlines that
# later ones do not (measured: 7-76 against 0-6), so a warm-up pass comes first and
# the baseline is a warm worker meeting new users, like the fault pass.
PASSES = (
    ("warmup", 20, 800),
    ("baseline", 21, PASS_REQUESTS),
    ("fault", 22, PASS_REQUESTS),
    ("after", 23, 400),
)

pytestmark = pytest.mark.chaos


def _streams(tmp_path: Path) -> dict[str, list[StreamRecord]]:
    """Streams of new users each (a seed each), at the rate of the sample stream."""
    streams = {}
    for name, seed, count in PASSES:
        path = tmp_path / f"{name}.jsonl.gz"
        generate(path, requests=count, seed=seed, mean_rate=RATE)
        streams[name] = list(read_stream(path))
    return streams


def _load_profiles(endpoint: str, paths: list[Path]) -> None:
    parser = argparse.ArgumentParser(prog="bidsim")
    add_commands(parser.add_subparsers())
    argv = ["profiles", "load", "--aws-endpoint", endpoint]
    for path in paths:
        argv += ["--stream", str(path)]
    args = parser.parse_args(argv)
    assert args.command(args) == 0


async def _metric(admin_url: str, name: str, labels: dict[str, str] | None = None) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items())
    )


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll a condition of the running system (bounded); the test waits on events, not time."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + _WAIT_BOUND_S
    while not await condition():
        if loop.time() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(_POLL_S)


async def _answered(admin_url: str) -> float:
    return await _metric(admin_url, "bidsim_bid_latency_seconds_count")


async def _fault_when_answered(admin_url: str, moto_pid: int, start: float) -> None:
    """SIGSTOP moto after a third of the fault pass is answered, SIGKILL after two thirds."""
    for share, sig in ((1 / 3, signal.SIGSTOP), (2 / 3, signal.SIGKILL)):
        mark = start + PASS_REQUESTS * share

        async def reached(mark: float = mark) -> bool:
            return await _answered(admin_url) >= mark

        await _until(reached, f"{mark:.0f} answers")
        os.kill(moto_pid, sig)


async def _banner_reason(bid_url: str) -> str | None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{bid_url}/openrtb2/bid", data=with_fresh_user(SIMPLE_BANNER)) as resp,
    ):
        return resp.headers.get("x-nbr-reason")


def _no_errors(result: ReplayResult) -> dict[str, int]:
    """What must be zero in every pass, by name (so a failure shows which)."""
    classes = status_classes(result.status)
    answered = sum(result.status.values())
    return {
        "5xx": classes["5xx"],
        "other statuses": classes["other"],
        "timeouts": result.timeouts,
        "transport errors": result.transport_errors,
        "unanswered": result.requests - answered,
    }


@dataclass(frozen=True)
class Outage:
    baseline: ReplayResult
    fault: ReplayResult
    after: ReplayResult
    fill_errors: float


async def _run_passes(
    settings: Settings, streams: dict[str, list[StreamRecord]], moto_pid: int
) -> Outage:
    options = ReplayOptions(rate=RATE, deadline_ms=settings.deadline_ms)
    async with running_bidder(settings) as bidder:
        target = f"{bidder.bid_url}/openrtb2/bid"
        await replay(streams["warmup"], target, options)
        baseline = await replay(streams["baseline"], target, options)
        start = await _answered(bidder.admin_url)
        fault = asyncio.create_task(_fault_when_answered(bidder.admin_url, moto_pid, start))
        try:
            during = await replay(streams["fault"], target, options)
            await fault  # both signals were sent while the pass ran
        finally:
            fault.cancel()

        async def leases_lapsed() -> bool:
            return await _banner_reason(bidder.bid_url) == "no_lease"

        await _until(leases_lapsed, "the pacing leases to lapse")
        after = await replay(streams["after"], target, options)
        fill_errors = await _metric(
            bidder.admin_url, "bidsim_profile_fills_total", {"outcome": "error"}
        )
    return Outage(baseline, during, after, fill_errors)


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Outage:
    """The passes, run once for the module (about 20 s)."""
    return run_outage(tmp_path_factory.mktemp("outage"))


def run_outage(tmp_path: Path) -> Outage:
    streams = _streams(tmp_path)
    with LocalStack() as stack:  # private: moto is killed
        settings = stack_settings(stack, tmp_path)
        _load_profiles(stack.aws_endpoint, [tmp_path / f"{name}.jsonl.gz" for name in streams])
        return uvloop.run(_run_passes(settings, streams, stack.pids["moto"]))


def test_the_outage_reaches_the_profile_store(outage: Outage) -> None:
    assert outage.fill_errors > 0


@pytest.mark.parametrize("name", ["baseline", "fault", "after"])
def test_every_request_is_answered_200_or_204_in_time(outage: Outage, name: str) -> None:
    result: ReplayResult = getattr(outage, name)
    problems = _no_errors(result)
    assert problems == dict.fromkeys(problems, 0)


def test_the_outage_adds_no_deadline_nobids_beyond_the_baseline(outage: Outage) -> None:
    deadline = (outage.baseline.nbr_reasons["deadline"], outage.fault.nbr_reasons["deadline"])
    assert deadline[1] <= deadline[0] + DEADLINE_MARGIN, f"(baseline, fault) = {deadline}"


def test_win_and_billing_notices_keep_working_while_the_spend_stream_is_down(
    outage: Outage,
) -> None:
    auction = outage.fault.auction
    assert (auction.notices_ok > 0, auction.notices_failed) == (True, 0)


def test_bids_stop_once_the_pacing_leases_lapse(outage: Outage) -> None:
    after = outage.after
    assert (after.status[200], after.nbr_reasons["no_lease"] > 0) == (0, True)
