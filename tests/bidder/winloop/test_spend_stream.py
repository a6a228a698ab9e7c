"""bidder.winloop.spend_stream against moto's Kinesis and S3: spool first, ship, archive, adopt."""

from __future__ import annotations

import base64
import http.client
import os
import pickle
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
import pytest_asyncio

from bidder.adapters.aws import aws_client
from bidder.core.clock import ManualClock
from bidder.core.ledger import LedgerEntry
from bidder.core.tokens import TokenSigner
from bidder.replay.ledger_audit import read_records
from bidder.serve.reconciler_process import running_reconciler
from bidder.serve.server import prepare_resources
from bidder.serve.settings import Settings
from bidder.stack.child import held_port
from bidder.winloop.archive import LedgerArchive
from bidder.winloop.spend_stream import (
    KinesisStream,
    SpendProducer,
    deferred_dir,
    ensure_stream,
    remove_empty_spool,
)
from bidder.winloop.spool import Segment, Spool
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import with_fresh_user

pytestmark = pytest.mark.long(8)

KEY = "crash-test-key-" + "k" * 32
SIGNER = TokenSigner({"k1": KEY.encode()}, "k1")
SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()


def entry(n: int, campaign: str = "harbor-bank-leaderboard") -> LedgerEntry:
    return LedgerEntry(
        ledger_id=1_000 + n, kind="bill", campaign_id=campaign, advertiser="harbor-bank",
        creative_id="hb-728x90-savings", imp_id="1", bid_id=str(9_000 + n),
        price_cpm_micros=1_250_000, cost_micros=1_250, node=1, ts_ms=1_767_225_600_000 + n,
    )  # fmt: skip


class Fixture:
    def __init__(self, aws_endpoint: str, tmp_path: Path) -> None:
        self.kinesis = aws_client("kinesis", aws_endpoint)
        self.s3 = aws_client("s3", aws_endpoint)
        self.stream_name = f"spend-{uuid.uuid4().hex[:10]}"
        self.archive = LedgerArchive(self.s3, f"ledger-{uuid.uuid4().hex[:12]}", 1)
        self.archive.ensure_bucket()
        self.spool_dir = tmp_path / "spool"
        self.clock = ManualClock()
        self.producers: list[SpendProducer] = []

    async def producer(self, **options: Any) -> SpendProducer:
        stream = KinesisStream(self.kinesis, self.stream_name)
        producer = SpendProducer(Spool(self.spool_dir), stream, self.archive, self.clock, **options)
        await producer.open()
        self.producers.append(producer)
        return producer

    def stream_up(self) -> None:
        ensure_stream(self.kinesis, self.stream_name)

    def streamed(self) -> list[LedgerEntry]:
        return [e for _, e in read_records(self.kinesis, self.stream_name)]

    def archived(self) -> list[str]:
        listing = self.s3.list_objects_v2(Bucket=self.archive.bucket).get("Contents", [])
        return [item["Key"] for item in listing]


@pytest_asyncio.fixture
async def env(aws_endpoint: str, tmp_path: Path) -> AsyncIterator[Fixture]:
    fixture = Fixture(aws_endpoint, tmp_path)
    yield fixture
    for producer in fixture.producers:
        await producer.close(flush_timeout_s=0.5)


def crash(producer: SpendProducer) -> None:
    """What kill -9 leaves: files as they are, locks released, nothing flushed."""
    for tracked in producer._segments:
        tracked.segment.close()


def on_disk(spool_dir: Path) -> list[bytes]:
    payloads = []
    for path in sorted(spool_dir.glob("*.seg")):
        segment = Segment(path, os.open(path, os.O_RDONLY))
        payloads += [payload for _, _, payload in segment.records()]
        segment.close()
    return payloads


@pytest.mark.asyncio
async def test_append_returns_once_the_entry_is_on_disk(env: Fixture) -> None:
    producer = await env.producer()
    await producer.append(entry(1))
    assert on_disk(env.spool_dir) == [entry(1).encode()]


@pytest.mark.asyncio
async def test_shipped_entries_reach_the_stream_keyed_by_campaign(env: Fixture) -> None:
    env.stream_up()
    producer = await env.producer()
    for n in range(3):
        await producer.append(entry(n, campaign=f"c{n}"))
    assert await producer.ship()
    found = read_records(env.kinesis, env.stream_name)
    assert found == [(f"c{n}", entry(n, campaign=f"c{n}")) for n in range(3)]


@pytest.mark.asyncio
async def test_while_the_stream_is_down_entries_stay_spooled(env: Fixture) -> None:
    producer = await env.producer()
    await producer.append(entry(1))
    assert (await producer.ship(), producer.pending) == (False, 1)


@pytest.mark.asyncio
async def test_when_the_stream_returns_spooled_entries_are_sent_once(env: Fixture) -> None:
    producer = await env.producer()
    for n in range(3):
        await producer.append(entry(n))
    await producer.ship()
    env.stream_up()
    while producer.pending:
        assert await producer.ship()
    assert env.streamed() == [entry(n) for n in range(3)]


@pytest.mark.asyncio
async def test_a_delivered_rolled_segment_is_archived_then_deleted(env: Fixture) -> None:
    env.stream_up()
    producer = await env.producer(roll_bytes=1)
    await producer.append(entry(1))
    await producer.ship()
    await producer.finish_segments()
    [key] = env.archived()
    body = env.s3.get_object(Bucket=env.archive.bucket, Key=key)["Body"].read()
    assert body == entry(1).encode() + b"\n"
    assert on_disk(env.spool_dir) == []


@pytest.mark.asyncio
async def test_a_close_cut_short_removes_its_empty_segment_and_keeps_the_others(
    env: Fixture,
) -> None:
    producer = await env.producer(roll_s=60.0)
    await producer.append(entry(1))  # the stream is down: it stays in the spool
    env.clock.advance(61.0)
    await producer.finish_segments()  # rolls by age: the new active segment is empty
    assert len(list(env.spool_dir.glob("*.seg"))) == 2
    await producer.close(flush_timeout_s=0)  # no time to ship, archive or remove
    assert len(list(env.spool_dir.glob("*.seg"))) == 1
    assert on_disk(env.spool_dir) == [entry(1).encode()]


@pytest.mark.asyncio
async def test_a_segment_is_not_archived_before_its_entries_are_streamed(env: Fixture) -> None:
    producer = await env.producer(roll_bytes=1)
    await producer.append(entry(1))
    await producer.append(entry(2))  # rolls: the first segment is sealed, not delivered
    await producer.finish_segments()
    assert (env.archived(), len(on_disk(env.spool_dir))) == ([], 2)


@pytest.mark.asyncio
async def test_a_dead_producers_entries_are_adopted_and_sent(env: Fixture) -> None:
    dead = await env.producer()
    for n in range(3):
        await dead.append(entry(n))
    crash(dead)
    env.stream_up()
    heir = await env.producer()
    while heir.pending:
        assert await heir.ship()
    assert env.streamed() == [entry(n) for n in range(3)]


@pytest.mark.asyncio
async def test_what_a_dead_producer_delivered_is_not_sent_again(env: Fixture) -> None:
    env.stream_up()
    dead = await env.producer()
    await dead.append(entry(1))
    await dead.ship()
    await dead.append(entry(2))
    crash(dead)
    heir = await env.producer()
    while heir.pending:
        assert await heir.ship()
    assert env.streamed() == [entry(1), entry(2)]


@pytest.mark.asyncio
async def test_a_live_producers_segment_is_left_alone(env: Fixture) -> None:
    live = await env.producer()
    await live.append(entry(1))
    other = await env.producer()
    assert other.pending == 0


# ----------------------------------------------- acceptance: kill -9 while the stream is down

NODE = """
import asyncio, base64, pickle, sys
import uvloop
from bidder.serve.assemble import build_state
from bidder.serve.worker import start_background, start_site

async def main():
    state = await build_state(pickle.loads(base64.b64decode(sys.argv[1])))
    await start_site(state)
    await start_background(state)
    print("ready", flush=True)
    await asyncio.Event().wait()

uvloop.run(main())
"""


class Node:
    """A bidder worker in a subprocess, so the test can kill -9 it."""

    def __init__(self, settings: Settings) -> None:
        blob = base64.b64encode(pickle.dumps(settings)).decode()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", NODE, blob], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()  # bounded by the test timeout
        if ready.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"bidder node did not start (exit {self.proc.wait()})")
        self.bidder = LiveBidderClient(settings)

    def kill9(self) -> None:
        self.proc.kill()  # SIGKILL: no handler, no flush, no cleanup
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class LiveBidderClient(LiveBidder):
    """Only the HTTP helpers of LiveBidder: the server is the subprocess."""

    def __enter__(self) -> LiveBidderClient:
        return self


def _notices_until_stopped(node: Node, acked: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            answer = node.bidder.post(with_fresh_user(SIMPLE_BANNER))
            if answer.status != 200:  # e.g. no pacing lease yet
                continue
            bid = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
            parts = urlsplit(bid["burl"].replace("${AUCTION_PRICE}", "0.00001"))
            if node.bidder.get(f"{parts.path}?{parts.query}").status == 204:
                acked.append(SIGNER.verify(parse_qs(parts.query)["t"][0]).bid_id)
        except (OSError, http.client.HTTPException):
            return  # the node is gone


def test_every_acknowledged_notice_survives_kill_9_exactly_once(
    bidder_settings: Settings, tmp_path: Path
) -> None:
    settings = bidder_settings.replace(
        port=held_port(),
        spend_stream=f"spend-{uuid.uuid4().hex[:10]}",  # not created yet: the stream is down
        spool_dir=tmp_path / "spool",
        notice_keys=(("k1", KEY),),
        key_namespace=f"crash-{uuid.uuid4().hex[:8]}",
    )
    acked: list[int] = []
    stop = threading.Event()
    # Pacing leases come from a reconciler reading the (working) default stream: the
    # node bids while its own spend stream is down.
    prepare_resources(bidder_settings)
    with running_reconciler(bidder_settings):
        node = Node(settings)
        try:
            flow = threading.Thread(target=_notices_until_stopped, args=(node, acked, stop))
            flow.start()
            while len(acked) < 40 and flow.is_alive():
                flow.join(0.05)
            node.kill9()  # mid-flow: a notice may be in flight
            stop.set()
            flow.join(30)
        finally:
            node.kill9()
    kinesis = aws_client("kinesis", bidder_settings.aws_endpoint or "")
    ensure_stream(kinesis, settings.spend_stream)
    restarted = Node(settings)
    try:
        streamed = _wait_for_stream(kinesis, settings.spend_stream, len(acked))
    finally:
        restarted.kill9()
    bid_ids = [int(e.bid_id) for _, e in streamed]
    assert len(acked) >= 40
    assert all(bid_ids.count(bid_id) == 1 for bid_id in acked)
    assert len(set(bid_ids)) == len(bid_ids)


def _wait_for_stream(kinesis: Any, name: str, at_least: int) -> list[tuple[str, LedgerEntry]]:
    found = read_records(kinesis, name)
    for _ in range(300):  # the restarted node adopts the spool at start and ships it
        if len(found) >= at_least:
            break
        threading.Event().wait(0.1)
        found = read_records(kinesis, name)
    return found


def test_an_empty_spool_goes_with_its_journal_directory(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    deferred_dir(spool).mkdir(parents=True)
    assert remove_empty_spool(spool)
    assert not spool.exists()


@pytest.mark.parametrize("left", ["w1.seg", "deferred/w1.seg"])
def test_a_spool_holding_a_file_keeps_it(tmp_path: Path, left: str) -> None:
    spool = tmp_path / "spool"
    deferred_dir(spool).mkdir(parents=True)
    (spool / left).write_bytes(b"an entry not yet shipped")
    assert not remove_empty_spool(spool)
    assert (spool / left).read_bytes() == b"an entry not yet shipped"
