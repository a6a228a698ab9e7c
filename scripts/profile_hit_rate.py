"""Profile cache hit rate on a live replay: a warm-up pass, then the measured pass.

Starts the embedded stack (Valkey + moto) and the whole service once
(``bidder.serve.server.running_bidder``: workers, reconciler, admin port), bulk-loads the
generated profiles of the stream's users through ``bidsim profiles load``'s own handler,
then replays the stream twice through that one bidder: the cache lives in the worker
process, so both passes must meet the same one. The hit rate is read from the admin
port's ``/metrics`` (``bidsim_profile_lookups_total{result}``, summed over workers) as the
difference between the counters after the first and after the second pass.

Only requests that reach stage 5 look a profile up: those that eligibility or the
supply-chain check turn down earlier, and those without consent or without any user id,
never do. With ``--workers`` above 1 each worker has its own cache, and a user's requests
reach whichever worker the kernel gave the connection to.

    .venv/bin/python scripts/profile_hit_rate.py [--stream FILE] [--workers 1] [--speed 1]

The last line printed is one JSON object (``hit_rate`` of the second pass, raw counts,
``goal`` 0.95, ``meets_goal``); the exit status is 0 when the goal is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from bidder.bidstream.stream import StreamRecord, read_stream
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, status_classes
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.child import free_port, held_port
from bidder.stack.local import LocalStack
from models.cli import add_commands

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
CAMPAIGNS = ROOT / "fixtures" / "openrtb" / "campaigns.json"
GOAL = 0.95
LOOKUPS = "bidsim_profile_lookups_total"
FILLS = "bidsim_profile_fills_total"
Counts = dict[tuple[str, str], float]


def load_profiles(endpoint: str, table: str, streams: list[Path]) -> None:
    """Run ``bidsim profiles load`` (its parser and handler); its report goes to stderr."""
    parser = argparse.ArgumentParser(prog="bidsim")
    add_commands(parser.add_subparsers())
    argv = ["profiles", "load", "--aws-endpoint", endpoint, "--table", table]
    for stream in streams:
        argv += ["--stream", str(stream)]
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):
        status = args.command(args)
    if status != 0:
        raise SystemExit(f"profile_hit_rate: loading the profiles failed (status {status})")


async def profile_counters(admin_url: str) -> Counts:
    """{(metric, label value): count} of the profile lookup and fill counters."""
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    counts: Counts = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == LOOKUPS:
                counts[LOOKUPS, sample.labels["result"]] = sample.value
            elif sample.name == FILLS:
                counts[FILLS, sample.labels["outcome"]] = sample.value
    return counts


def delta(after: Counts, before: Counts, metric: str, label: str) -> int:
    return round(after.get((metric, label), 0.0) - before.get((metric, label), 0.0))


def pass_figures(before: Counts, after: Counts, result: ReplayResult) -> dict[str, Any]:
    hits = delta(after, before, LOOKUPS, "hit")
    misses = delta(after, before, LOOKUPS, "miss")
    fills = ("found", "absent", "unanswered", "error", "dropped")
    return {
        "hit_rate": round(hits / (hits + misses), 4) if hits + misses else 0.0,
        "hits": hits,
        "misses": misses,
        "fills": {outcome: delta(after, before, FILLS, outcome) for outcome in fills},
        "requests": result.requests,
        "status": status_classes(result.status),
        "deadline_nobids": result.nbr_reasons["deadline"],
        "timeouts": result.timeouts,
    }


async def measure(settings: Settings, records: list[StreamRecord], speed: float) -> dict[str, Any]:
    options = ReplayOptions(speed=speed, deadline_ms=settings.deadline_ms)
    async with running_bidder(settings) as bidder:
        target = f"{bidder.bid_url}/openrtb2/bid"
        start = await profile_counters(bidder.admin_url)
        warmup = await replay(records, target, options)
        middle = await profile_counters(bidder.admin_url)
        measured = await replay(records, target, options)
        end = await profile_counters(bidder.admin_url)
    return {
        "warmup": pass_figures(start, middle, warmup),
        "measured": pass_figures(middle, end, measured),
    }


def run(stream: Path, workers: int, speed: float) -> dict[str, Any]:
    records = list(read_stream(stream))
    with LocalStack() as stack:
        settings = Settings(
            port=held_port(),
            admin_port=free_port(),
            workers=workers,
            campaigns_path=CAMPAIGNS,
            valkey_url=stack.valkey_url,
            aws_endpoint=stack.aws_endpoint,
        ).validate()
        load_profiles(stack.aws_endpoint, settings.profiles_table, [stream])
        passes = uvloop.run(measure(settings, records, speed))
    second = passes["measured"]
    return {
        "stream": str(stream),
        "requests_per_pass": len(records),
        "workers": workers,
        "speed": speed,
        "hit_rate": second["hit_rate"],
        "hits": second["hits"],
        "misses": second["misses"],
        "goal": GOAL,
        "meets_goal": second["hit_rate"] >= GOAL,
        **passes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", type=Path, default=SAMPLE, help="default: the sample stream")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--speed", type=float, default=1.0, help="time scale of the replay")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    report = run(args.stream, args.workers, args.speed)
    print(orjson.dumps(report).decode())
    return 0 if report["meets_goal"] else 1


if __name__ == "__main__":
    sys.exit(main())
