"""Live: stopping the worker pool returns every lease and flushes the spend stream.

Two workers on a private stack (Valkey, moto, the reconciler process ticking every
second) take a short bidstream with its win and billing notices; then the pool is
stopped (SIGTERM, each worker's graceful stop) while the reconciler keeps running.
What must hold once ``pool.stop()`` returns, and on the reconciler's next ticks:

- both nodes' lease hashes are gone and neither is in the live set;
- every billed notice's ledger entry is already in Kinesis (no waiting: the workers
  flushed), and the spool holds no segment;
- the reconciler took every returned remainder of an unexpired lease off its exposure
  (its returns log in Valkey, ``pacing.lease_store.returns_log_key``, says what each
  record was and what it took off), and deleted the records it applied.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from bidder.adapters.aws import aws_client
from bidder.bidstream.generator import generate
from bidder.bidstream.stream import read_stream
from bidder.replay.ledger_audit import distinct, read_ledger
from bidder.replay.replayer import ReplayOptions, replay
from bidder.serve.assemble import pacing_node_id
from bidder.serve.server import running_bidder
from bidder.stack.local import LocalStack
from pacing.lease_store import leases_key, live_nodes_key, returned_key, returns_log_key
from tests.bidder.live import own_aws_resources, stack_settings
from tests.pacing.test_live_ledger import notice_outcomes

pytestmark = pytest.mark.long(10)

RETURNS_BOUND_S = 15.0


@dataclass(frozen=True)
class Stopped:
    nodes: list[str]
    billed: int
    streamed: int
    """Ledger entries in Kinesis right after the stop, deduplicated by ledger id."""
    lease_hashes_left: int
    live_after: list[bytes]
    spool_left: list[str]
    returns: list[dict[str, Any]]
    """The reconciler's returns log entries that name the stopped nodes."""
    returned_left: int
    tick_ms: int


def wait_for_returns(client: redis.Redis, nodes: list[str]) -> list[dict[str, Any]]:
    """The returns log entries naming ``nodes`` once every one of them is named (bounded)."""
    deadline = time.monotonic() + RETURNS_BOUND_S
    while True:
        raw: list[bytes] = client.lrange(returns_log_key(), 0, -1)  # type: ignore[assignment]
        entries = [orjson.loads(item) for item in raw]
        mine = [e for e in entries if set(e["nodes"]) & set(nodes)]
        named = {node for e in mine for node in e["nodes"]}
        if named >= set(nodes) or time.monotonic() > deadline:
            return mine
        time.sleep(0.2)


async def _replay_then_stop(stack: LocalStack, tmp_path: Path) -> Stopped:
    stream_file = tmp_path / "stream.jsonl.gz"
    generate(stream_file, requests=1500, seed=23, mean_rate=400)
    settings = stack_settings(stack, tmp_path, workers=2, deadline_ms=100.0, **own_aws_resources())
    assert settings.spool_dir is not None
    client = redis.Redis.from_url(stack.valkey_url)
    try:
        async with running_bidder(settings) as bidder:
            nodes = [pacing_node_id(pid) for pid in bidder.pool.pids]
            options = ReplayOptions(rate=400, deadline_ms=settings.deadline_ms)
            await replay(read_stream(stream_file), f"{bidder.bid_url}/openrtb2/bid", options)
            billed = (await notice_outcomes(bidder.admin_url))["billed"]
            await bidder.pool.stop()
            kinesis = aws_client("kinesis", stack.aws_endpoint)
            ledger = await asyncio.to_thread(read_ledger, kinesis, settings.spend_stream)
            lease_hashes_left = int(client.exists(*(leases_key(n) for n in nodes)))
            live_after: list[bytes] = client.zrange(live_nodes_key(), 0, -1)  # type: ignore[assignment]
            spool_left = sorted(p.name for p in settings.spool_dir.rglob("*.seg"))
            returns = await asyncio.to_thread(wait_for_returns, client, nodes)
            returned_left = int(client.exists(*(returned_key(n) for n in nodes)))
    finally:
        client.close()
    return Stopped(
        nodes, billed, len(distinct(ledger)), lease_hashes_left, live_after, spool_left,
        returns, returned_left, round(settings.pacing_tick_s * 1000),
    )  # fmt: skip


@pytest.fixture(scope="module")
def stopped(aws_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Stopped:
    with LocalStack(aws_endpoint=aws_endpoint) as stack:
        return asyncio.run(_replay_then_stop(stack, tmp_path_factory.mktemp("shutdown")))


def test_no_lease_hash_is_left_after_the_pool_stops(stopped: Stopped) -> None:
    assert len(stopped.nodes) == 2 and stopped.lease_hashes_left == 0


def test_stopped_workers_leave_the_live_set(stopped: Stopped) -> None:
    assert not {n.encode() for n in stopped.nodes} & set(stopped.live_after)


def test_every_billed_notice_is_in_the_spend_stream_when_the_stop_returns(
    stopped: Stopped,
) -> None:
    assert stopped.billed > 0 and stopped.streamed == stopped.billed


def test_the_spool_is_empty_after_the_stop(stopped: Stopped) -> None:
    assert stopped.spool_left == []


def test_both_nodes_returns_reach_the_reconciler(stopped: Stopped) -> None:
    assert {node for entry in stopped.returns for node in entry["nodes"]} == set(stopped.nodes)


def test_each_unexpired_returned_remainder_is_taken_off_the_exposure(stopped: Stopped) -> None:
    # A lease id is the tick's epoch ms and a lease lives two ticks: a record whose
    # lease had expired when the tick applied it is moot (the expiry already dropped it).
    checked = [
        (
            record["taken"],
            record["micros"] if record["lease_id"] + 2 * stopped.tick_ms > entry["now_ms"] else 0,
        )
        for entry in stopped.returns
        for record in entry["records"]
    ]
    assert checked and all(taken == expected for taken, expected in checked)
    assert sum(taken for taken, _ in checked) > 0


def test_applied_returned_records_are_deleted(stopped: Stopped) -> None:
    assert stopped.returned_left == 0
