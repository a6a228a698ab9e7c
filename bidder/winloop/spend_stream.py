"""The ledger producer: durable append, then batches to the spend stream, then the archive.

Theory of operation. ``append`` returns once the entry is fsync'd in the spool
(``bidder.winloop.spool``), by group commit (``bidder.winloop.group_commit``):
concurrent notices share one write and one fsync. Written entries wait in memory, in
order, for ``ship``, which sends up to 500 of them (Kinesis' PutRecords limit) in one
call, partition key = campaign id, and records per segment how far everything has
been accepted; ``run`` lets a partial batch gather for ``LINGER_S`` before sending
it. Records the stream refused (partial failure) or a failed call stay queued and are
sent again later: while the stream is down the spool simply grows, and drains when it
returns. A segment is rolled (a new one opened) past ``roll_bytes`` or ``roll_s``;
a rolled segment whose entries are all in the stream is archived
(``bidder.winloop.archive``) and deleted. Segments of dead processes are adopted at
``open`` and every ``adopt_every_s``, and drained the same way.

Delivery to the stream is at least once: a crash after a put but before its
progress is recorded sends those entries again. The reconciler applies entries
exactly once by ``ledger_id``. Acknowledged entries are never lost: they were on
disk before the notice was answered.

Threads: spool I/O runs on one thread, boto3 on another; nothing blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import tempfile
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from bidder.adapters.aws import aws_client
from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.ledger import LedgerEntry, LedgerFormatError, decode_entry
from bidder.winloop.archive import LedgerArchive
from bidder.winloop.group_commit import GroupCommit
from bidder.winloop.spool import Segment, Spool

log = logging.getLogger(__name__)

MAX_BATCH = 500  # PutRecords: at most 500 records (and 5 MiB) per call
LINGER_S = 0.1
"""How long ``run`` lets entries gather before a put that is not yet a full batch
(the Kinesis Producer Library's RecordMaxBufferedTime default). Entries are on disk
already, so lingering costs the reconciler 0.1 s of staleness against its 1-5 s tick,
and saves a put per notice: one call per bill kept the stream's endpoint busier than
the bidder itself at a few hundred wins a second."""
_T = TypeVar("_T")


class SpoolError(Exception):
    """An entry could not be made durable; its notice must not be acknowledged."""


class Stream(Protocol):
    def put(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        """Send entries; per entry, whether the stream accepted it. Raises when down."""


class KinesisStream:
    def __init__(self, client: BaseClient, name: str) -> None:
        self._client = client
        self.name = name

    def put(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        records = [{"Data": e.encode(), "PartitionKey": e.campaign_id} for e in entries]
        answer = self._client.put_records(StreamName=self.name, Records=records)
        return ["ErrorCode" not in result for result in answer["Records"]]


def ensure_stream(client: BaseClient, name: str, shards: int = 1) -> None:
    """Create the stream if it is missing and wait until it is active."""
    try:
        client.create_stream(StreamName=name, ShardCount=shards)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
            raise
    client.get_waiter("stream_exists").wait(
        StreamName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )


def ensure_ledger_resources(
    aws_endpoint: str, region: str, stream: str, bucket: str, retention_days: int
) -> None:
    """Create the spend stream and the Object Lock archive bucket if they are missing.

    Run once by the supervisor before workers start (workers never create them: a
    missing stream must look like an outage to them, and be spooled through).
    """
    ensure_stream(aws_client("kinesis", aws_endpoint, region), stream)
    LedgerArchive(aws_client("s3", aws_endpoint, region), bucket, retention_days).ensure_bucket()


def default_spool_dir(stream: str, aws_endpoint: str | None) -> Path:
    """Per destination, so two bidders on one machine never drain each other's spool."""
    digest = hashlib.sha256((aws_endpoint or "aws").encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "bidsim-spool" / f"{stream}-{digest}"


def deferred_dir(spool_dir: Path) -> Path:
    """Where the deferred-notice journal lives: a subdirectory, since the spool adopts
    every ``*.seg`` of its own directory."""
    return spool_dir / "deferred"


def remove_empty_spool(spool_dir: Path) -> bool:
    """Remove ``spool_dir`` and its journal's directory if nothing is left in them; a
    file left there (an entry not yet shipped) keeps both. True if removed."""
    for directory in (deferred_dir(spool_dir), spool_dir):
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty
            return False
    return True


@dataclass(eq=False)
class _Tracked:
    segment: Segment
    opened: float
    written_end: int
    sealed: bool = False
    undelivered: int = 0


@dataclass(eq=False, slots=True)
class _Pending:
    tracked: _Tracked
    start: int
    entry: LedgerEntry


class SpendProducer:
    def __init__(
        self,
        spool: Spool,
        stream: Stream,
        archive: LedgerArchive | None,
        clock: Clock,
        *,
        roll_bytes: int = 4 << 20,
        roll_s: float = 60.0,
        retry_s: float = 1.0,
        adopt_every_s: float = 30.0,
        linger_s: float = LINGER_S,
    ) -> None:
        self._spool, self._stream, self._archive, self._clock = spool, stream, archive, clock
        self._roll_bytes, self._roll_s = roll_bytes, roll_s
        self._retry_s, self._adopt_every_s = retry_s, adopt_every_s
        self._linger_s = linger_s
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="spool")
        self._aws = ThreadPoolExecutor(1, thread_name_prefix="spend-stream")
        self._segments: list[_Tracked] = []
        self._active: _Tracked | None = None
        self._unsent: deque[_Pending] = deque()
        self._commits = GroupCommit(self._write, SpoolError, "spool")
        self._wake = asyncio.Event()
        self._next_adopt = 0.0

    @property
    def pending(self) -> int:
        """Entries on disk that the stream has not accepted yet."""
        return len(self._unsent)

    async def open(self) -> None:
        """Open this process's segment and adopt the spool of dead processes."""
        self._active = await self._open_segment()
        await self.adopt()

    async def append(self, entry: LedgerEntry) -> None:
        """Return once ``entry`` is fsync'd in the spool; SpoolError when it can't be."""
        await self._commits.submit(entry)

    async def run(self) -> None:
        """Ship, archive and adopt forever (the worker's background task).

        A round that fails (a disk fault recording progress or rolling, a bug) is
        logged and retried: this task is the only way entries leave the spool while
        the process lives, so nothing may end it but cancellation.
        """
        while True:
            try:
                shipped = await self._round()
            except Exception:
                log.exception("ledger shipping round failed; retrying")
                shipped = False
            if not shipped:
                await asyncio.sleep(self._retry_s)  # the stream is down, or the round failed
            elif not self._unsent:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._retry_s)

    async def _round(self) -> bool:
        if self._clock.monotonic() >= self._next_adopt:
            await self.adopt()
        if 0 < len(self._unsent) < MAX_BATCH:
            await asyncio.sleep(self._linger_s)
        shipped = await self.ship() if self._unsent else True
        await self.finish_segments()
        return shipped

    async def ship(self) -> bool:
        """Send one batch of queued entries; False if any of it failed."""
        batch = [self._unsent[n] for n in range(min(MAX_BATCH, len(self._unsent)))]
        try:
            accepted = await self._in(self._aws, self._stream.put, [p.entry for p in batch])
            # An answer that does not match the batch says nothing safe: all are resent.
            done = {id(p) for p, ok in zip(batch, accepted, strict=True) if ok}
        except Exception as exc:  # stream down, throttled, network: retried later
            metrics.STREAM_ERRORS.inc()
            log.warning("spend stream put failed, %d entries stay spooled: %s", len(batch), exc)
            return False
        self._unsent = deque(p for p in self._unsent if id(p) not in done)
        for pending in batch:
            if id(pending) in done:
                pending.tracked.undelivered -= 1
        metrics.LEDGER_ENTRIES.labels("streamed").inc(len(done))
        metrics.SPOOL_DEPTH.set(len(self._unsent))
        await self._record_progress({p.tracked for p in batch})
        return len(done) == len(batch)

    async def finish_segments(self) -> None:
        """Roll an old active segment; archive and delete fully delivered sealed ones."""
        active = self._active
        if active is not None and self._due_to_roll(active) and not self._commits.backlog:
            await self._roll()
        for tracked in [t for t in self._segments if t.sealed and t.undelivered == 0]:
            try:
                await self._archive_segment(tracked)
            except Exception as exc:  # S3 down: the segment stays until it is archived
                metrics.ARCHIVE_ERRORS.inc()
                log.warning("ledger archive of %s failed, kept: %s", tracked.segment.name, exc)
                continue
            await self._in(self._disk, tracked.segment.remove)
            self._segments.remove(tracked)

    async def adopt(self) -> None:
        """Take over the segments of dead processes and queue what they did not deliver."""
        self._next_adopt = self._clock.monotonic() + self._adopt_every_s
        ours = {t.segment.name for t in self._segments}
        for segment in await self._in(self._disk, self._spool.adopt_orphans, ours):
            try:
                records = await self._in(self._disk, _undelivered, segment)
            except OSError as exc:  # untracked, so never archived and deleted unsent
                log.error("spool segment %s unreadable, left for later: %s", segment.name, exc)
                await self._in(self._disk, segment.close)  # unlocked: the next adopt retries
                continue
            tracked = _Tracked(segment, self._clock.monotonic(), 0, sealed=True)
            self._segments.append(tracked)
            for start, end, payload in records:
                tracked.written_end = end
                try:
                    self._queue(_Pending(tracked, start, decode_entry(payload)))
                except LedgerFormatError as exc:
                    log.error("unreadable record in %s at %d skipped: %s", segment.name, start, exc)
            log.info("adopted spool segment %s: %d to send", segment.name, tracked.undelivered)
        metrics.SPOOL_DEPTH.set(len(self._unsent))

    async def close(self, flush_timeout_s: float = 2.0) -> None:
        """Finish pending writes, try to ship what is queued, release every segment;
        an empty one is removed."""
        await self._commits.drain()
        if self._active is not None:
            self._active.sealed = True
            self._active = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(flush_timeout_s):
                while self._unsent and await self.ship():
                    pass
                await self.finish_segments()
        for tracked in self._segments:
            segment = tracked.segment
            # An empty segment has nothing to ship or archive, and left behind it would
            # keep a finished run's spool directory: it goes even when time ran out.
            await self._in(self._disk, segment.remove if segment.size == 0 else segment.close)
        self._segments.clear()
        self._disk.shutdown(wait=False)
        self._aws.shutdown(wait=False)

    async def _write(self, entries: list[LedgerEntry]) -> None:
        """Append and fsync one batch (group commit), then queue it for the stream."""
        tracked = self._active
        if tracked is None:
            raise SpoolError("the producer is not open")
        if self._due_to_roll(tracked):
            tracked = await self._roll()
        records = [entry.encode() for entry in entries]
        ends = await self._in(self._disk, tracked.segment.append, records)
        starts = [tracked.written_end, *ends[:-1]]
        tracked.written_end = ends[-1]
        for entry, start in zip(entries, starts, strict=True):
            self._queue(_Pending(tracked, start, entry))
        metrics.LEDGER_ENTRIES.labels("spooled").inc(len(entries))
        metrics.SPOOL_DEPTH.set(len(self._unsent))
        self._wake.set()

    def _queue(self, pending: _Pending) -> None:
        self._unsent.append(pending)
        pending.tracked.undelivered += 1

    def _due_to_roll(self, tracked: _Tracked) -> bool:
        age = self._clock.monotonic() - tracked.opened
        return tracked.written_end > 0 and (
            tracked.written_end >= self._roll_bytes or age >= self._roll_s
        )

    async def _roll(self) -> _Tracked:
        if self._active is not None:
            self._active.sealed = True
        self._active = await self._open_segment()
        return self._active

    async def _open_segment(self) -> _Tracked:
        segment = await self._in(self._disk, self._spool.new_segment, self._clock.wall_ms())
        tracked = _Tracked(segment, self._clock.monotonic(), 0)
        self._segments.append(tracked)
        return tracked

    async def _record_progress(self, touched: set[_Tracked]) -> None:
        # A segment is delivered up to its first entry still queued (queue order is
        # write order), or to its end when none is.
        first: dict[_Tracked, int] = {}
        for pending in self._unsent:
            if pending.tracked in touched and pending.tracked not in first:
                first[pending.tracked] = pending.start
                if len(first) == len(touched):
                    break
        for tracked in touched:
            offset = first.get(tracked, tracked.written_end)
            await self._in(self._disk, tracked.segment.mark_delivered, offset)

    async def _archive_segment(self, tracked: _Tracked) -> None:
        if self._archive is None:
            return
        records = await self._in(self._disk, lambda: list(tracked.segment.records()))
        if not records:
            return
        body = b"".join(payload + b"\n" for _, _, payload in records)
        now = dt.datetime.fromtimestamp(self._clock.wall_ms() / 1000, dt.UTC)
        key = LedgerArchive.key_for(tracked.segment.name, now.date())
        if await self._in(self._aws, self._archive.put, key, body, now):
            metrics.LEDGER_ENTRIES.labels("archived").inc(len(records))

    async def _in(self, pool: ThreadPoolExecutor, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


def _undelivered(segment: Segment) -> list[tuple[int, int, bytes]]:
    return list(segment.records(segment.delivered()))
