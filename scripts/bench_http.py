"""HTTP benchmark: the full bidder against a bare aiohttp + orjson + uvloop echo app.

Both servers run as one worker process each, on the same machine as this client,
driven by the same client (bidder.replay's lean HTTP/1.1 pool), in the same run.
With ``--workers N`` (N > 1) a second bidder with N workers runs beside the first
(each on its own embedded stack) and takes part in every measurement, so the
scaling from 1 to N workers is measured in the same run too:

1. saturation: closed loop, ``--connections`` requests in flight, for ``--duration``
   seconds; throughput = answers per second after a warm-up second;
2. latency: open loop at fixed rates (``--rates``) and at half of the echo app's
   saturation rate, p99 corrected for coordinated omission (from each request's
   intended send time).

Each measurement is repeated ``--rounds`` times, alternating the two servers, and
the medians are compared. Workloads: ``banner`` is the OpenRTB 2.6 spec's simple
banner request (the bundled campaigns bid on it: the full path) and ``sample`` the
bundled sample bidstream (mostly no-bids, like real traffic). The last line printed
is one JSON object; ``throughput_ratio`` and ``p99_ratio`` are bidder / echo (the
1-worker bidder), ``workers_scaling_ratio`` is the N-worker bidder's saturation over
the 1-worker one's. On a 2-core machine the load generator shares the cores.

    .venv/bin/python scripts/bench_http.py [--duration 5 --rounds 3 --workload banner]
    .venv/bin/python scripts/bench_http.py --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bidder.nobid import NoBid
from bidder.replay.client import HttpPool
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import latency_ms
from bidder.replay.stream import StreamRecord, read_stream
from bidder.server import running_bidder
from bidder.settings import Settings
from bidder.stack import LocalStack, free_port

ROOT = Path(__file__).resolve().parents[1]
BANNER = ROOT.parent / "shared/external/openrtb/requests/001_iab26_spec-6.2.1-simple-banner.json"
SAMPLE = ROOT / "fixtures/openrtb/sample-stream.jsonl.gz"
CAMPAIGNS = ROOT / "fixtures/openrtb/campaigns.json"
BID_PATH = "/openrtb2/bid"
HEADERS = {"Content-Type": "application/json", "X-Openrtb-Version": "2.6"}


def workload(name: str) -> list[StreamRecord]:
    if name == "banner":
        return [StreamRecord(t_ms=0, ts=0, ssp="ssp-alpha", body=BANNER.read_bytes())]
    return list(read_stream(SAMPLE))


async def saturate(
    port: int, bodies: Sequence[bytes], duration_s: float, connections: int
) -> float:
    """Closed-loop answers per second, the first second excluded. A request the bidder
    shed (204 ``overloaded``, answered before its body is read) is not an answer: it
    would count the shedder's speed, not the bid path's."""
    pool = HttpPool("127.0.0.1", port, max_connections=connections)
    counted = 0
    start = time.perf_counter()
    warm_until, stop_at = start + 1.0, start + 1.0 + duration_s

    async def loop(offset: int) -> None:
        nonlocal counted
        n = offset
        while (now := time.perf_counter()) < stop_at:
            response = await pool.request(
                "POST", BID_PATH, bodies[n % len(bodies)], HEADERS, timeout_s=1.0
            )
            n += connections
            shed = response.headers.get("x-nbr-reason") == NoBid.OVERLOADED.value
            counted += now >= warm_until and not shed

    await asyncio.gather(*(loop(i) for i in range(connections)))
    await pool.close()
    return counted / duration_s


async def open_loop(
    port: int, records: list[StreamRecord], rate: float, duration_s: float
) -> dict[str, Any]:
    options = ReplayOptions(rate=rate, duration_s=duration_s + 1.0, warmup_s=1.0, notices=False)
    result = await replay(records, f"http://127.0.0.1:{port}{BID_PATH}", options)
    figures = latency_ms(result.corrected)
    sent = result.samples + result.warmup_requests
    return {"p99_ms": figures["p99"], "late_share": result.late_sends / max(sent, 1)}


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    port = free_port()
    script = str(ROOT / "scripts/echo_server.py")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, script, "--port", str(port), stdout=asyncio.subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)  # type: ignore[union-attr]
        if line.strip() != b"ready":
            raise SystemExit("bench_http: the echo server did not start")
        yield port
    finally:
        proc.terminate()
        await proc.wait()


async def check_full_path(port: int, records: list[StreamRecord], attempts: int = 20) -> None:
    """The banner workload must be bid on (the full path). A few tries: on a busy
    machine the first requests can miss the 8 ms deadline or come before the leases."""
    pool = HttpPool("127.0.0.1", port)
    try:
        for _ in range(attempts):
            answer = await pool.request("POST", BID_PATH, records[0].body, HEADERS, timeout_s=5)
            if len(records) > 1 or answer.status == 200:
                return
            await asyncio.sleep(0.5)
    finally:
        await pool.close()
    reason = answer.headers.get("x-nbr-reason", "?")
    raise SystemExit(f"bench_http: the bidder answered {answer.status} ({reason}), not a bid")


def bidder_name(workers: int) -> str:
    return "bidder" if workers == 1 else f"bidder_{workers}w"


async def measure(args: argparse.Namespace, bidders: dict[str, Settings]) -> dict[str, Any]:
    """``bidders``: name -> settings of each bidder to measure beside the echo app."""
    records = workload(args.workload)
    bodies = [r.body for r in records]
    async with contextlib.AsyncExitStack() as servers:
        ports = {"echo": await servers.enter_async_context(echo_server())}
        for name, settings in bidders.items():
            await servers.enter_async_context(running_bidder(settings))
            await check_full_path(settings.port, records)
            ports[name] = settings.port
        sat: dict[str, list[float]] = {name: [] for name in ports}
        for _ in range(args.rounds):
            for name, port in ports.items():
                sat[name].append(await saturate(port, bodies, args.duration, args.connections))
        half = statistics.median(sat["echo"]) / 2
        rates = {**{f"{r:g}": r for r in args.rates}, "half_echo_saturation": half}
        p99 = {label: await p99_at(args, ports, records, rate) for label, rate in rates.items()}
    return summarize(args, sat, p99, half)


async def p99_at(
    args: argparse.Namespace, ports: dict[str, int], records: list[StreamRecord], rate: float
) -> dict[str, dict[str, list[float]]]:
    """Per server, corrected p99 (ms) and late-send share at one rate, one value per round.

    A large late-send share means the load generator itself could not keep the
    schedule: the machine, not the server under test, is the limit at that rate.
    """
    out: dict[str, dict[str, list[float]]] = {n: {"p99_ms": [], "late_share": []} for n in ports}
    for _ in range(args.rounds):
        for name, port in ports.items():
            figures = await open_loop(port, records, rate, args.duration)
            for key in ("p99_ms", "late_share"):
                out[name][key].append(figures[key])
    return out


def summarize(
    args: argparse.Namespace,
    sat: dict[str, list[float]],
    runs: dict[str, dict[str, dict[str, list[float]]]],
    half: float,
) -> dict[str, Any]:
    med = {f"{k}_rps": round(statistics.median(v)) for k, v in sat.items()}
    p99 = {rate: {n: _median(f["p99_ms"]) for n, f in by.items()} for rate, by in runs.items()}
    late = {rate: {n: _median(f["late_share"]) for n, f in by.items()} for rate, by in runs.items()}
    half_p99 = p99["half_echo_saturation"]
    scaling = {}
    if args.workers > 1:
        many = med[f"{bidder_name(args.workers)}_rps"]
        scaling = {
            "workers": args.workers,
            "workers_scaling_ratio": round(many / med["bidder_rps"], 3),
            "throughput_ratio_many_workers": round(many / med["echo_rps"], 3),
        }
    return {
        "benchmark": "bench_http",
        "workload": args.workload,
        "throughput_ratio": round(med["bidder_rps"] / med["echo_rps"], 3),
        "p99_ratio": round(half_p99["bidder"] / half_p99["echo"], 3),
        **scaling,
        **med,
        "half_rate_rps": round(half),
        "p99_ms_by_rate": p99,
        "p99_ratio_by_rate": {k: round(v["bidder"] / v["echo"], 3) for k, v in p99.items()},
        "cpus": os.cpu_count(),
        "late_send_share_by_rate": late,
        "rounds": args.rounds,
        "duration_s": args.duration,
        "connections": args.connections,
        "saturation_rounds_rps": {k: [round(x) for x in v] for k, v in sat.items()},
    }


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("banner", "sample"), default="banner")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32, help="closed-loop concurrency")
    parser.add_argument(
        "--rates", type=float, nargs="*", default=[1000.0, 4000.0], help="fixed open-loop rates"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="also measure a bidder with this many workers (compared with 1 worker)",
    )
    args = parser.parse_args()
    if not 1 <= args.workers <= 64:
        parser.error(f"--workers must be 1-64, got {args.workers}")
    counts = sorted({1, args.workers})
    with contextlib.ExitStack() as stacks:
        bidders = {
            bidder_name(n): bidder_settings(stacks.enter_context(LocalStack()), n) for n in counts
        }
        result = uvloop.run(measure(args, bidders))
    print(orjson.dumps(result).decode())


def bidder_settings(stack: LocalStack, workers: int) -> Settings:
    """A bidder on its own stack (its own Valkey, moto and reconciler)."""
    return Settings(
        port=free_port(),
        admin_port=free_port(),
        campaigns_path=CAMPAIGNS,
        valkey_url=stack.valkey_url,
        aws_endpoint=stack.aws_endpoint,
        workers=workers,
    ).validate()


if __name__ == "__main__":
    main()
