"""HTTP benchmark: the full bidder against a bare aiohttp + orjson + uvloop echo app.

Every server runs as its own process tree on this machine, started here, measured in
the same run by the same clients, rounds alternating between the servers (for the
latency figures each server runs alone, started again for each round):

- ``echo``: ``scripts/echo_server.py`` (parses the request, answers a fixed bid);
- ``bidder``: ``bidsim serve`` with one worker and its own embedded Valkey, moto server
  and reconciler (the whole tree: supervisor, worker, Valkey, moto, reconciler);
- ``bidder_<N>w`` with ``--workers N``: the same with N workers;
- ``before`` with ``--before DIR``: the bidder of another checkout (e.g. a git worktree
  of an earlier commit, with its own ``.venv``), so a change's before and after come
  from one run; it is driven at the connection count chosen for ``bidder``.

Figures, each a median over ``--rounds`` (the last line printed is one JSON object):

1. saturation: wrk (a C load generator), the banner request; only HTTP 200 answers
   count (the bidder answers 200 only with a bid). Each server is driven with the
   number of connections, of ``--connections``, at which it answered most in a short
   probe of each: a closed loop with more requests queued than a worker can decide
   within the deadline measures its shedding, not its path (docs/benchmarks.md).
   ``throughput_ratio`` = bids/s / echo answers/s; ``cost_ratio`` = CPU µs per bid of
   the bidder's whole process tree (utime + stime from /proc) / CPU µs per echo answer.
2. latency at half the bidder's saturation rate, the same rate for every server:
   open loop (``bidder.replay``), p99 from each request's intended send time;
   ``p99_ratio`` = bidder / echo. Beside it, what sets that tail on a machine the
   client shares: each tree's CPU µs per answer at that rate (``half_rate_cost_ratio``
   = bidder / echo; requests one at a time cost more than back to back:
   docs/benchmarks.md) and the client's own CPU µs per request.
3. demo tail: the bundled sample stream replayed at its recorded pace, as ``make demo``
   does (notices included; the echo's bids carry none); ``demo_tail_ratio`` = corrected
   p99 bidder / echo, with each server's share of answers within 8 ms, and beside it
   each tree's CPU µs per request of the stream (``demo_cost_ratio`` = bidder / echo).

Needs ``wrk`` on PATH (Debian: ``apt-get install wrk``).

    .venv/bin/python scripts/bench_http.py [--duration 10 --rounds 3]
    .venv/bin/python scripts/bench_http.py --workers 2
    .venv/bin/python scripts/bench_http.py --before /tmp/bidsim-before
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import uvloop
from bench_http_servers import BANNER, BID_PATH, ROOT, Server, start, tree_cpu_s

from bidder.bidstream.stream import StreamRecord, read_stream
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import latency_ms

SAMPLE = ROOT / "fixtures/openrtb/sample-stream.jsonl.gz"
PROBE_S = 3.0
"""Seconds of each connection count's probe (after its 1 s warm-up)."""
SETTLE_S = 5.0
"""Seconds at the chosen count before the rounds, not measured: a probe past a
worker's saturation leaves its shedding at full pressure, which it unlearns only from
the answers it then gives in time (``bidder.decide.overload.LagShedder``)."""

# Counts answers by status in each wrk thread and sums them at the end.
WRK_SCRIPT = """
wrk.method = "POST"
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Openrtb-Version"] = "2.6"
wrk.headers["X-Ssp"] = "ssp-alpha"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) ok = 0; other = 0 end
function response(status, headers, body)
  if status == 200 then ok = ok + 1 else other = other + 1 end
end
function done(summary, latency, requests)
  local o, n = 0, 0
  for _, t in ipairs(threads) do o = o + t:get("ok"); n = n + t:get("other") end
  io.write(string.format("BENCH ok=%d other=%d\\n", o, n))
end
"""


def busiest(server: Server, script: Path, probe_s: float, choices: list[int]) -> int:
    """Of ``choices``, the number of wrk connections at which ``server`` answers the
    most 200s per second, each tried once for ``probe_s``."""
    rates = {c: saturate(server, script, probe_s, c)["rps"] for c in choices}
    return max(choices, key=lambda c: rates[c])


def saturate(server: Server, script: Path, duration_s: float, connections: int) -> dict[str, float]:
    """Closed loop with wrk after a 1 s warm-up; 200s per second and CPU µs per 200."""
    env = {**os.environ, "BENCH_BODY": str(BANNER)}
    url = f"http://127.0.0.1:{server.port}{BID_PATH}"
    wrk = ["wrk", "-t1", f"-c{connections}", "-s", str(script), url]
    subprocess.run([*wrk[:3], "-d1s", *wrk[3:]], env=env, capture_output=True, check=True)
    before = tree_cpu_s(server.pid)
    out = subprocess.run(
        [*wrk[:3], f"-d{duration_s:g}s", *wrk[3:]], env=env, capture_output=True, check=True
    ).stdout.decode()
    cpu_s = tree_cpu_s(server.pid) - before
    found = re.search(r"BENCH ok=(\d+) other=(\d+)", out)
    if found is None:
        raise SystemExit(f"bench_http: wrk printed no counts:\n{out}")
    ok, other = int(found[1]), int(found[2])
    return {
        "rps": ok / duration_s,
        "cpu_us": cpu_s * 1e6 / max(ok, 1),
        "other_share": other / max(ok + other, 1),
    }


async def open_loop(server: Server, rate: float, duration_s: float) -> dict[str, float]:
    """The banner request at ``rate``, open loop: corrected p99 (ms), the server tree's
    CPU µs per answer and this process's (the client's) CPU µs per request."""
    records = [StreamRecord(t_ms=0, ts=0, ssp="ssp-alpha", body=BANNER.read_bytes())]
    options = ReplayOptions(rate=rate, duration_s=duration_s + 1.0, warmup_s=1.0, notices=False)
    server_s, client_s = tree_cpu_s(server.pid), time.process_time()
    result = await replay(records, f"http://127.0.0.1:{server.port}{BID_PATH}", options)
    server_s, client_s = tree_cpu_s(server.pid) - server_s, time.process_time() - client_s
    sent = max(result.requests + result.warmup_requests, 1)
    return {
        "p99_ms": float(latency_ms(result.corrected)["p99"]),
        "cpu_us": server_s * 1e6 / sent,
        "client_cpu_us": client_s * 1e6 / sent,
    }


async def demo_tail(server: Server, records: list[StreamRecord]) -> dict[str, float]:
    """The sample stream at its recorded pace, as ``make demo`` replays it: corrected
    p99 (ms), share within 8 ms, and the server tree's CPU µs per request."""
    server_s = tree_cpu_s(server.pid)
    result = await replay(records, f"http://127.0.0.1:{server.port}", ReplayOptions(warmup_s=2))
    server_s = tree_cpu_s(server.pid) - server_s
    figures = latency_ms(result.corrected)
    return {
        "p99_ms": figures["p99"],
        "within_8ms": result.within_deadline_share,
        "cpu_us": server_s * 1e6 / max(result.requests + result.warmup_requests, 1),
    }


@contextlib.contextmanager
def wrk_script() -> Iterator[Path]:
    if shutil.which("wrk") is None:
        raise SystemExit("bench_http: wrk is not on PATH (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "count.lua"
        path.write_text(WRK_SCRIPT)
        yield path


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    bidders = {"bidder": (ROOT, 1)}
    if args.workers > 1:
        bidders[f"bidder_{args.workers}w"] = (ROOT, args.workers)
    if args.before is not None:
        bidders["before"] = (args.before.resolve(), 1)
    demo = list(read_stream(SAMPLE))
    with wrk_script() as script:
        async with contextlib.AsyncExitStack() as stack:
            servers = [await stack.enter_async_context(start("echo", bidders))]
            for name in bidders:
                servers.append(await stack.enter_async_context(start(name, bidders)))
            # The before is driven at the bidder's count: a change is compared at one load.
            connections = {
                s.name: await asyncio.to_thread(busiest, s, script, PROBE_S, args.connections)
                for s in servers
                if s.name != "before"
            }
            if "before" in bidders:
                connections["before"] = connections["bidder"]
            for server in servers:
                await asyncio.to_thread(
                    saturate, server, script, SETTLE_S, connections[server.name]
                )
            sat: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
            for _ in range(args.rounds):
                for server in servers:
                    figures = await asyncio.to_thread(
                        saturate, server, script, args.duration, connections[server.name]
                    )
                    sat[server.name].append(figures)
            half = statistics.median([r["rps"] for r in sat["bidder"]]) / 2
    # Latency alone on the machine: each server is started again for each of its
    # latency rounds with no other server running, since the idle trees of the others
    # (workers' lag probes, Valkey's and moto's timers) wake on the cores it and the
    # client share, and put their wake-ups into its tail.
    p99: dict[str, list[dict[str, float]]] = {name: [] for name in sat}
    tail: dict[str, list[dict[str, float]]] = {name: [] for name in sat}
    for _ in range(args.rounds):
        for name in sat:
            async with start(name, bidders) as server:
                p99[name].append(await open_loop(server, half, args.duration))
                tail[name].append(await demo_tail(server, demo))
    return summarize(args, connections, sat, p99, tail, half)


def summarize(
    args: argparse.Namespace,
    connections: dict[str, int],
    sat: dict[str, list[dict[str, float]]],
    p99: dict[str, list[dict[str, float]]],
    tail: dict[str, list[dict[str, float]]],
    half: float,
) -> dict[str, Any]:
    servers: dict[str, dict[str, Any]] = {}
    for name in sat:
        servers[name] = {
            "connections": connections[name],
            "rps": round(statistics.median([r["rps"] for r in sat[name]])),
            "cpu_us_per_answer": round(statistics.median([r["cpu_us"] for r in sat[name]]), 1),
            "non_200_share": round(statistics.median([r["other_share"] for r in sat[name]]), 4),
            "p99_ms_at_half_rate": round(statistics.median([r["p99_ms"] for r in p99[name]]), 3),
            "cpu_us_per_answer_at_half_rate": round(
                statistics.median([r["cpu_us"] for r in p99[name]]), 1
            ),
            "client_cpu_us_at_half_rate": round(
                statistics.median([r["client_cpu_us"] for r in p99[name]]), 1
            ),
            "demo_p99_ms": round(statistics.median([r["p99_ms"] for r in tail[name]]), 3),
            "demo_within_8ms": round(statistics.median([r["within_8ms"] for r in tail[name]]), 5),
            "demo_cpu_us_per_request": round(
                statistics.median([r["cpu_us"] for r in tail[name]]), 1
            ),
            "rounds_rps": [round(r["rps"]) for r in sat[name]],
            "rounds_cpu_us": [round(r["cpu_us"], 1) for r in sat[name]],
        }
    echo = servers["echo"]
    ratios = {
        name: {
            "cost_ratio": round(s["cpu_us_per_answer"] / echo["cpu_us_per_answer"], 3),
            "throughput_ratio": round(s["rps"] / echo["rps"], 3),
            "p99_ratio": round(s["p99_ms_at_half_rate"] / echo["p99_ms_at_half_rate"], 3),
            "half_rate_cost_ratio": round(
                s["cpu_us_per_answer_at_half_rate"] / echo["cpu_us_per_answer_at_half_rate"], 3
            ),
            "demo_tail_ratio": round(s["demo_p99_ms"] / echo["demo_p99_ms"], 3),
            "demo_cost_ratio": round(
                s["demo_cpu_us_per_request"] / echo["demo_cpu_us_per_request"], 3
            ),
        }
        for name, s in servers.items()
        if name != "echo"
    }
    many = f"bidder_{args.workers}w"
    scaling = (
        {"workers_scaling_ratio": round(servers[many]["rps"] / servers["bidder"]["rps"], 3)}
        if many in servers
        else {}
    )
    return {
        "benchmark": "bench_http",
        **ratios["bidder"],
        **scaling,
        "half_rate_rps": round(half),
        "ratios": ratios,
        "servers": servers,
        "rounds": args.rounds,
        "duration_s": args.duration,
        "connections_tried": args.connections,
        "cpus": os.cpu_count(),
    }


def connection_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not counts or counts[0] < 1 or counts[-1] > 1024:
        raise argparse.ArgumentTypeError(f"connections must be 1-1024, got {text!r}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--connections",
        type=connection_counts,
        default=[4, 8, 16],
        help="wrk's connections to try (comma-separated); each server is driven at the"
        " count it answers most at",
    )
    parser.add_argument("--workers", type=int, default=1, help="also measure N workers")
    parser.add_argument(
        "--before", type=Path, help="also measure the bidder of this checkout (with a .venv)"
    )
    args = parser.parse_args()
    if not 1 <= args.workers <= 64:
        parser.error(f"--workers must be 1-64, got {args.workers}")
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds must be at least 1 and --duration positive")
    print(orjson.dumps(uvloop.run(measure(args))).decode())


if __name__ == "__main__":
    main()
