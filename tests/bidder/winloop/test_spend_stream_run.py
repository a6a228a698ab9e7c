"""SpendProducer's background job survives its own failures; a bad answer or an unreadable
orphan never ends shipping. The stream is an in-memory ``Stream`` (our own protocol): these
are about the producer's logic, not about Kinesis."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from bidder.core.clock import ManualClock
from bidder.core.ledger import LedgerEntry
from bidder.winloop.spend_stream import SpendProducer
from bidder.winloop.spool import Spool
from tests.bidder.winloop.test_spend_stream import crash, entry

BOUND_S = 10.0
"""How long a test waits for the background job to ship: a bound, never a measurement."""


class MemoryStream:
    """Accepts every entry (or all but the last when ``short``: a malformed answer)."""

    def __init__(self, *, short: bool = False) -> None:
        self.entries: list[LedgerEntry] = []
        self._short = short
        self._changed = threading.Condition()

    def put(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        with self._changed:
            self.entries += entries
            self._changed.notify_all()
        return [True] * (len(entries) - 1 if self._short else len(entries))

    async def holds(self, count: int) -> bool:
        """Whether the stream got ``count`` entries within ``BOUND_S``."""
        return await asyncio.to_thread(self._wait_for, count)

    def _wait_for(self, count: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.entries) >= count, BOUND_S)


class Producers:
    def __init__(self, spool_dir: Path) -> None:
        self.spool_dir = spool_dir
        self.clock = ManualClock()
        self.made: list[SpendProducer] = []

    async def open(self, stream: MemoryStream) -> SpendProducer:
        producer = SpendProducer(
            Spool(self.spool_dir), stream, None, self.clock, retry_s=0.01, linger_s=0.0
        )
        await producer.open()
        self.made.append(producer)
        return producer


@pytest_asyncio.fixture
async def producers(tmp_path: Path) -> AsyncIterator[Producers]:
    made = Producers(tmp_path / "spool")
    yield made
    for ack in made.spool_dir.glob("*.ack"):
        if ack.is_dir():  # a fault a test injected: cleared so closing can tidy up
            ack.rmdir()
    for producer in made.made:
        await producer.close(flush_timeout_s=0.5)


def block_ack_file(spool_dir: Path) -> Path:
    """Make every segment's delivery offset unreadable and unwritable: a real disk fault."""
    [segment] = spool_dir.glob("*.seg")
    ack = segment.with_suffix(".ack")
    ack.unlink(missing_ok=True)
    ack.mkdir()
    return ack


@pytest.mark.asyncio
async def test_an_answer_of_the_wrong_length_leaves_the_batch_queued(producers: Producers) -> None:
    producer = await producers.open(MemoryStream(short=True))
    await producer.append(entry(1))
    await producer.append(entry(2))
    assert (await producer.ship(), producer.pending) == (False, 2)


@pytest.mark.asyncio
async def test_shipping_goes_on_after_a_round_fails(producers: Producers) -> None:
    stream = MemoryStream()
    producer = await producers.open(stream)
    block_ack_file(producers.spool_dir)  # every ship fails to record its progress
    job = asyncio.create_task(producer.run())
    try:
        await producer.append(entry(1))
        assert await stream.holds(1)
        await producer.append(entry(2))
        assert await stream.holds(2)
    finally:
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)


@pytest.mark.asyncio
async def test_an_unreadable_orphan_does_not_stop_the_producer_opening(
    producers: Producers,
) -> None:
    dead = await producers.open(MemoryStream())
    await dead.append(entry(1))
    crash(dead)
    block_ack_file(producers.spool_dir)
    heir = await producers.open(MemoryStream())
    assert heir.pending == 0


@pytest.mark.asyncio
async def test_an_unreadable_orphan_is_adopted_once_it_reads_again(producers: Producers) -> None:
    dead = await producers.open(MemoryStream())
    await dead.append(entry(1))
    crash(dead)
    ack = block_ack_file(producers.spool_dir)
    heir = await producers.open(MemoryStream())
    ack.rmdir()
    await heir.adopt()
    assert heir.pending == 1
