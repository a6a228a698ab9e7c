"""What one bid-path Valkey call costs: the auto-pipelined connection against redis-py's
pool with ``Waiter``, client and server CPU per call, same server, same run.

Workload: fcap-style reads, an HMGET of 10 fields of one user's hash (the fields
RESP-encoded in advance, as ``fcap.plan`` does), by ``--in-flight`` concurrent
callers (default 1, 8 and 32), ``--calls`` calls per path and round, each with a
limit one second away (none times out, only the machinery is measured).

- ``pipelined``: ``PipelinedConnection.send`` (``bidder.adapters.valkey_pipelined``), the
  single-server bid path.
- ``pool`` (the reference): each call takes a connection from a redis-py pool, sends
  the pre-encoded command, reads the answer with redis-py's hiredis parser and gives
  the connection back, run as a task by ``Waiter.gather`` (``bidder.adapters.valkey_wait``):
  the path fcap checks and dedup claims took on one server before the pipelined
  connection, and still the shape of a Cluster's.

Per path and round: client CPU (``time.process_time``) and wall time per call, the
valkey-server process's CPU per call (utime + stime from ``/proc/<pid>/stat``), and
for ``pipelined`` the commands per write. Both paths run on uvloop in one process
against one fresh server, alternating which goes first; medians over ``--rounds``.
Ratios are pipelined / pool (below 1: the pipelined connection is cheaper).

``--paced GAP_MS ...``: instead, the round trip of the pipelined path at a pace, one
call at a time with GAP_MS between calls (``--paced-calls`` each), as a bidder that is
not saturated makes them: wall time percentiles, and each p50 against the
back-to-back one (gap 0) of the same run. Between calls the client and the server both
sleep, so a paced call pays the wake-ups (on a virtual machine, of an idle vCPU)
that back-to-back calls skip. The last line printed is one JSON object.

    .venv/bin/python scripts/bench_valkey_call.py [--calls 40000 --rounds 5 --in-flight 1 8 32]
    .venv/bin/python scripts/bench_valkey_call.py --paced 0.5 2 10 [--paced-calls 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uvloop
from redis.asyncio import ConnectionPool, Redis

from bidder.adapters.valkey import AsyncValkey, connect_async, connect_pipelined
from bidder.adapters.valkey_pipelined import PipelinedConnection, pack
from bidder.adapters.valkey_wait import Waiter
from bidder.stack.child import cpu_s, free_port
from bidder.stack.cluster import ValkeyNode

KEY = "u:{b:bench-user}"
FIELDS = [f"c{n:04d}:d:20454" for n in range(10)]
COMMAND = pack(b"HMGET", KEY, *FIELDS)
LIMIT_S = 1.0

Call = Callable[[], Awaitable[Any]]


def pipelined_call(connection: PipelinedConnection) -> Call:
    loop = asyncio.get_running_loop()

    def call() -> Awaitable[Any]:
        return connection.send(COMMAND, loop.time() + LIMIT_S)

    return call


def pool_call(pool: ConnectionPool) -> Call:
    loop, waiter = asyncio.get_running_loop(), Waiter()

    async def read() -> Any:
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(COMMAND)
            return await connection.read_response()
        finally:
            await pool.release(connection)

    async def call() -> Any:
        (answer,) = await waiter.gather([read()], loop.time() + LIMIT_S)
        return answer

    return call


async def run(call: Call, calls: int, in_flight: int, pid: int) -> dict[str, float]:
    """Per-call figures of ``calls`` calls by ``in_flight`` concurrent callers."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await call()

    shares = [calls // in_flight + (n < calls % in_flight) for n in range(in_flight)]
    cpu, server, wall = time.process_time(), cpu_s(pid), time.perf_counter()
    await asyncio.gather(*(caller(share) for share in shares))
    return {
        "client_cpu_us": (time.process_time() - cpu) / calls * 1e6,
        "server_cpu_us": (cpu_s(pid) - server) / calls * 1e6,
        "wall_us": (time.perf_counter() - wall) / calls * 1e6,
    }


async def seed(client: AsyncValkey) -> None:
    """The user's hash every call reads."""
    await client.hset(KEY, mapping={field: n for n, field in enumerate(FIELDS)})


async def measure(url: str, pid: int, calls: int, rounds: int, levels: list[int]) -> dict[str, Any]:
    client = connect_async(url, timeout_s=5.0)
    await seed(client)
    pipelined = connect_pipelined(url, connect_timeout_s=5.0)
    await pipelined.connect()
    if not isinstance(client, Redis):
        raise SystemExit("bench: one server, not a Cluster")
    paths = {"pipelined": pipelined_call(pipelined), "pool": pool_call(client.connection_pool)}
    expected = [str(n).encode() for n in range(len(FIELDS))]
    for path, call in paths.items():
        if await call() != expected:
            raise SystemExit(f"bench: the {path} path read a wrong answer")
    figures: dict[str, Any] = {}
    for in_flight in levels:
        samples: dict[str, list[dict[str, float]]] = {path: [] for path in paths}
        batches = []
        for n in range(rounds):
            order = list(paths) if n % 2 == 0 else list(reversed(paths))
            for path in order:
                commands, writes = pipelined.commands, pipelined.writes
                samples[path].append(await run(paths[path], calls, in_flight, pid))
                if path == "pipelined":
                    batches.append((pipelined.commands - commands) / (pipelined.writes - writes))
        figures[f"in_flight_{in_flight}"] = summary(samples, batches)
    await pipelined.aclose()
    await client.aclose()
    return figures


async def measure_paced(url: str, gaps_ms: list[float], calls: int) -> dict[str, Any]:
    client = connect_async(url, timeout_s=5.0)
    await seed(client)
    await client.aclose()
    connection = connect_pipelined(url, connect_timeout_s=5.0)
    await connection.connect()
    call = pipelined_call(connection)
    gaps = sorted({0.0, *gaps_ms})  # back-to-back is the baseline, measured once
    figures = {f"gap_{gap:g}_ms": await paced(call, calls, gap / 1000) for gap in gaps}
    await connection.aclose()
    base = figures["gap_0_ms"]["p50_us"]
    for values in figures.values():
        values["p50_ratio"] = round(values["p50_us"] / base, 2)
    return figures


async def paced(call: Call, calls: int, gap_s: float) -> dict[str, float]:
    """Wall µs percentiles of ``calls`` round trips, one at a time, ``gap_s`` apart."""
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await call()
        times.append((time.perf_counter_ns() - start) / 1000)
        if gap_s:
            await asyncio.sleep(gap_s)
    times.sort()
    return {f"p{q}_us": round(times[len(times) * q // 100], 1) for q in (50, 90, 99)}


def summary(samples: dict[str, list[dict[str, float]]], batches: list[float]) -> dict[str, Any]:
    medians = {
        path: {name: statistics.median(s[name] for s in runs) for name in runs[0]}
        for path, runs in samples.items()
    }
    new, old = medians["pipelined"], medians["pool"]
    flat = {f"{path}_{name}": round(v, 2) for path in medians for name, v in medians[path].items()}
    return {
        **flat,
        "commands_per_write": round(statistics.median(batches), 2),
        **{f"{name}_ratio": round(new[name] / old[name], 3) for name in new if old[name] > 0},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--paced", type=float, nargs="+", metavar="GAP_MS")
    parser.add_argument("--paced-calls", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1 or min(args.in_flight) < 1 or args.paced_calls < 1:
        parser.error("--calls, --rounds, --in-flight and --paced-calls must be at least 1")
    if args.paced and min(args.paced) < 0:
        parser.error("--paced gaps must be 0 ms or more")
    with tempfile.TemporaryDirectory(prefix="bench-valkey-call-") as workdir:
        node = ValkeyNode(Path(workdir), free_port())
        try:
            node.start()
            if args.paced:
                figures = uvloop.run(measure_paced(node.url, args.paced, args.paced_calls))
            else:
                figures = uvloop.run(
                    measure(node.url, node.pid, args.calls, args.rounds, args.in_flight)
                )
        finally:
            node.stop()
    for level, values in figures.items():
        print(level, values)
    if args.paced:
        line = {"bench": "valkey_call_paced", "calls": args.paced_calls, **figures}
    else:
        line = {"bench": "valkey_call", "calls": args.calls, "rounds": args.rounds, **figures}
    print(orjson.dumps(line).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
