"""The deferred-notice journal: verified notices whose billing has to wait, kept on disk.

Theory of operation. When a verified notice can't be billed right now (the Valkey
dedup store is down, this worker has no Snowflake id lease, the ledger spool
fails), the notice path does not answer 5xx: it appends the notice here, fsync'd,
and answers 202 (``bidder.winloop.billing``). A background job (``run``) replays journaled
notices in order through the billing path once its dependencies are back. Billing
is idempotent by bid id, so a replay, a retry of the same notice and a duplicate
from the exchange stay exact: one ledger entry per impression.

A record carries the ledger id the first attempt had taken, when it had one. The
first attempt may have set the dedup key before failing (a lost or late answer
from a paused Valkey, a spool write that failed after the SET); the replay then
finds the key holding *its own* ledger id and bills, instead of taking its own
earlier attempt for a duplicate.

The files reuse the ledger spool's machinery (``bidder.winloop.spool``): one segment
per process, held under ``flock``, records framed with length and CRC32 and appended
by group commit (``bidder.winloop.group_commit``: concurrent notices share one fsync),
and a ``.ack`` offset recording how far replay got. A segment whose lock is free
belongs to a dead process and is adopted (at ``open`` and every
``adopt_every_s``): a notice acknowledged with 202 survives ``kill -9``. A
segment whose records are all settled is deleted (the active one is rolled).
The ack offset is not fsync'd: a power cut can make a notice replay twice, and
the second replay finds the dedup key holding its ledger id, so the entry is
written again under the same ledger id, which the reconciler applies once.

All file I/O runs on one dedicated thread; nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.winloop.billable import Billable, BillingOutcome, JournalFormatError, decode_billable
from bidder.winloop.group_commit import GroupCommit
from bidder.winloop.spool import Segment, Spool

log = logging.getLogger(__name__)

EXACT_REPLAY_ALLOWANCE_MS = 15 * 60_000
"""Dedup keys live this much longer than the notice window, so a replay stays exact
when the outage ends up to this long after the end of the notice's window."""


class JournalError(Exception):
    """A notice could not be journaled: it is neither billed nor kept (the one 503)."""


Settle = Callable[[Billable], Awaitable[BillingOutcome | None]]
"""Bill one journaled notice: its outcome, or None while that is not possible yet."""


@dataclass(eq=False)
class _Seg:
    segment: Segment
    queued: int = 0


@dataclass(eq=False, slots=True)
class _Entry:
    seg: _Seg
    end: int
    billable: Billable


class DeferredJournal:
    def __init__(
        self, directory: Path, clock: Clock, *, retry_s: float = 1.0, adopt_every_s: float = 30.0
    ) -> None:
        self.directory = directory
        self._spool = Spool(directory)
        self._clock = clock
        self._retry_s, self._adopt_every_s = retry_s, adopt_every_s
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="deferred")
        self._lock = asyncio.Lock()  # which segment is active, and what is on disk
        self._segs: list[_Seg] = []
        self._active: _Seg | None = None
        self._queue: deque[_Entry] = deque()
        self._commits = GroupCommit(self._write, JournalError, "deferred journal")
        self._wake = asyncio.Event()
        self._next_adopt = 0.0

    @property
    def depth(self) -> int:
        """Journaled notices not settled yet (billed, or found to be duplicates)."""
        return len(self._queue)

    async def open(self) -> None:
        """Open this process's segment and adopt the journals of dead processes."""
        async with self._lock:
            self._active = await self._new_seg()
        await self.adopt()

    async def append(self, billable: Billable) -> None:
        """Return once ``billable`` is fsync'd; JournalError when it can't be."""
        await self._commits.submit(billable)

    async def replay(self, settle: Settle) -> bool:
        """Settle queued notices in order; False when one can't be settled yet."""
        while self._queue:
            entry = self._queue[0]
            outcome = await settle(entry.billable)
            if outcome is None:
                return False
            metrics.DEFERRED_REPLAYED.labels(outcome.value).inc()
            self._queue.popleft()
            entry.seg.queued -= 1
            metrics.DEFERRED_DEPTH.set(len(self._queue))
            async with self._lock:
                await self._in_disk(entry.seg.segment.mark_delivered, entry.end)
                await self._tidy(entry.seg)
        return True

    async def run(self, settle: Settle) -> None:
        """Replay forever (the worker's background job); adopt orphans now and then."""
        while True:
            if self._clock.monotonic() >= self._next_adopt:
                await self.adopt()
            try:
                drained = await self.replay(settle)
            except Exception:  # e.g. an I/O error recording progress: keep the job alive
                log.exception("deferred notice replay failed; retrying")
                drained = False
            if not drained:
                await asyncio.sleep(self._retry_s)  # still down: try again later
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._retry_s)

    async def adopt(self) -> None:
        """Take over the segments of dead processes and queue what they had not settled."""
        self._next_adopt = self._clock.monotonic() + self._adopt_every_s
        async with self._lock:
            ours = {s.segment.name for s in self._segs}
            for segment in await self._in_disk(self._spool.adopt_orphans, ours):
                seg = _Seg(segment)
                self._segs.append(seg)
                for start, end, payload in await self._in_disk(_unsettled, segment):
                    try:
                        self._queue_entry(_Entry(seg, end, decode_billable(payload)))
                    except JournalFormatError as exc:
                        metrics.DEFERRED_REPLAYED.labels("unreadable").inc()
                        log.error(
                            "unreadable deferred notice in %s at %d: %s", segment.name, start, exc
                        )
                log.warning("adopted deferred notices %s: %d to bill", segment.name, seg.queued)
                await self._tidy(seg)
        metrics.DEFERRED_DEPTH.set(len(self._queue))

    async def close(self) -> None:
        """Finish pending writes and release every segment; what is unsettled stays on disk."""
        await self._commits.drain()
        async with self._lock:
            for seg in self._segs:
                empty = seg.queued == 0
                await self._in_disk(seg.segment.remove if empty else seg.segment.close)
            self._segs.clear()
            self._active = None
        self._disk.shutdown(wait=False)

    async def _write(self, billables: list[Billable]) -> None:
        """Append and fsync one batch (group commit), then queue it for replay."""
        async with self._lock:
            seg = self._active
            if seg is None:
                raise JournalError("the deferred journal is not open")
            records = [billable.encode() for billable in billables]
            ends = await self._in_disk(seg.segment.append, records)
            for billable, end in zip(billables, ends, strict=True):
                self._queue_entry(_Entry(seg, end, billable))
        metrics.DEFERRED_DEPTH.set(len(self._queue))
        self._wake.set()

    def _queue_entry(self, entry: _Entry) -> None:
        self._queue.append(entry)
        entry.seg.queued += 1

    async def _tidy(self, seg: _Seg) -> None:
        """Delete a settled segment; the active one is replaced first (caller holds the lock)."""
        if seg.queued or (seg is self._active and seg.segment.size == 0):
            return
        if seg is self._active:
            self._active = await self._new_seg()
        self._segs.remove(seg)
        await self._in_disk(seg.segment.remove)

    async def _new_seg(self) -> _Seg:
        segment = await self._in_disk(self._spool.new_segment, self._clock.wall_ms())
        seg = _Seg(segment)
        self._segs.append(seg)
        return seg

    async def _in_disk(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._disk, fn, *args)


def _unsettled(segment: Segment) -> list[tuple[int, int, bytes]]:
    return list(segment.records(segment.delivered()))
