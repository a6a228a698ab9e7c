"""What one AWS call costs against the local stack's moto server: its server (waitress,
connections kept open) against moto's own (werkzeug's development server, which closes
the connection after every answer), client and server CPU per call, same run.

Both servers run moto's application with the same corrections
(``bidder.stack.moto_server.apply_corrections``); only the HTTP server differs:

- ``kept``: ``python -m bidder.stack.moto_server``, as ``LocalStack`` starts it.
- ``closed`` (the reference): moto's own ``moto.server.main`` in a process that made the
  same corrections first.

Workload, the bidder's own calls through its own clients (``bidder.adapters.aws``): a
profile read (``BatchGetItem`` of 8 keys, half of them present) and a spend shipment
(``PutRecords`` of 5 ledger-sized records), one after the other, ``--calls`` pairs per
server and round, alternating which server goes first; medians over ``--rounds``.
Per call: wall time, the client's CPU (``time.process_time``) and the server's
(utime + stime from ``/proc/<pid>/stat``), and each ratio kept / closed (below 1: the
kept connections are cheaper). The last line printed is one JSON object.

    .venv/bin/python scripts/bench_moto.py [--calls 500 --rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bidder.adapters.aws import aws_client
from bidder.stack.child import ChildProcess, cpu_s, free_port
from bidder.stack.local import moto_answers

CLOSED_SERVER = (
    "import sys; from bidder.stack.moto_server import apply_corrections; "
    "apply_corrections(); from moto.server import main; main(sys.argv[1:])"
)
TABLE = "bench-profiles"
STREAM = "bench-spend"
KEYS = [f"user-{n}" for n in range(8)]
RECORD = orjson.dumps({"bid_id": 7_301_234_567_890_123_456, "campaign": "c1", "micros": 1234})


def start(argv: list[str], name: str, workdir: Path) -> tuple[ChildProcess, str]:
    port = free_port()
    child = ChildProcess(name, [*argv, "-H", "127.0.0.1", "-p", str(port)], workdir / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    child.wait_ready(lambda: moto_answers(url), 30.0)
    return child, url


class Target:
    def __init__(self, child: ChildProcess, url: str) -> None:
        self.child = child
        self.dynamodb = aws_client("dynamodb", url)
        self.kinesis = aws_client("kinesis", url)
        self.dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for key in KEYS[::2]:
            self.dynamodb.put_item(TableName=TABLE, Item={"k": {"S": key}, "p": {"S": "x" * 200}})
        self.kinesis.create_stream(StreamName=STREAM, ShardCount=1)

    def pair(self) -> None:
        keys = [{"k": {"S": key}} for key in KEYS]
        self.dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": keys}})
        records = [{"Data": RECORD, "PartitionKey": str(n)} for n in range(5)]
        self.kinesis.put_records(StreamName=STREAM, Records=records)

    def measure(self, calls: int) -> dict[str, float]:
        server, client, wall = cpu_s(self.child.pid), time.process_time(), time.perf_counter()
        for _ in range(calls):
            self.pair()
        wall = time.perf_counter() - wall
        client = time.process_time() - client
        server = cpu_s(self.child.pid) - server
        per_call = 1e6 / (2 * calls)
        return {
            "wall_us": wall * per_call,
            "client_us": client * per_call,
            "server_us": server * per_call,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="call pairs per server and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bidsim-bench-moto-") as tmp:
        children: list[ChildProcess] = []
        try:
            targets = {}
            for name, argv in (
                ("kept", [sys.executable, "-m", "bidder.stack.moto_server"]),
                ("closed", [sys.executable, "-c", CLOSED_SERVER]),
            ):
                child, url = start(argv, name, Path(tmp))
                children.append(child)
                targets[name] = Target(child, url)
            for target in targets.values():
                target.measure(max(1, args.calls // 10))  # warm: imports, first connections
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            for n in range(args.rounds):
                order = list(targets) if n % 2 == 0 else list(reversed(targets))
                for name in order:
                    rounds[name].append(targets[name].measure(args.calls))
        finally:
            for child in children:
                child.stop()
    report: dict[str, Any] = {"calls": args.calls, "rounds": args.rounds}
    for name, runs in rounds.items():
        report[name] = {key: round(statistics.median(r[key] for r in runs), 1) for key in runs[0]}
    report["ratio"] = {
        key: round(report["kept"][key] / report["closed"][key], 3) for key in report["kept"]
    }
    for name in ("kept", "closed", "ratio"):
        print(f"{name:7s}", "  ".join(f"{key} {value}" for key, value in report[name].items()))
    print(orjson.dumps(report).decode())


if __name__ == "__main__":
    main()
