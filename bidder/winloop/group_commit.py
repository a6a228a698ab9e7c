"""Group commit: concurrent appends share one write and one fsync.

``GroupCommit.submit`` queues an item and returns once the batch holding it has been
written by the ``write`` function given at construction, which makes the whole batch
durable (appends it to a spool segment and fsyncs) or raises. Items submitted while
a batch is being written form the next batch, so under load a batch holds what
arrived during one fsync, and every waiter of a batch is released together.

When ``write`` raises, every waiter of that batch gets ``error(message)``: none of
its items may be acknowledged. A waiter that is cancelled does not cancel the write
its batch shares with others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class GroupCommit(Generic[_T]):
    """Batches concurrent ``submit`` calls into calls of ``write``; ``what`` names them in logs."""

    def __init__(
        self,
        write: Callable[[list[_T]], Awaitable[None]],
        error: Callable[[str], Exception],
        what: str,
    ) -> None:
        self._write, self._error, self._what = write, error, what
        self._waiting: list[tuple[_T, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def backlog(self) -> int:
        """Items waiting for the next batch (not counting the batch being written)."""
        return len(self._waiting)

    async def submit(self, item: _T) -> None:
        """Return once ``item`` is written; ``error(...)`` when its batch could not be."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())
        await asyncio.shield(done)

    async def drain(self) -> None:
        """Return once every item submitted so far is written or refused."""
        if self._writer is not None:
            await self._writer

    async def _write_all(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await self._write([item for item, _ in batch])
            except Exception as exc:  # disk full, I/O error: no item of it is durable
                log.error("%s write failed for %d items: %s", self._what, len(batch), exc)
                for _, done in batch:
                    done.set_exception(self._error(str(exc)))
                continue
            for _, done in batch:
                done.set_result(None)
