"""Tasks started and not awaited by their starter, each referenced until it ends.

The event loop keeps only a weak reference to a task, so a task nobody else
references can be collected mid-flight. A ``TaskSet`` is that reference, one per
owner: ``spawn`` starts a call (``keep`` takes a task already started) and the task
leaves the set when it ends, whichever way it ends. ``cancel_and_wait`` stops a task
that may absorb a cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class TaskSet:
    """The tasks an owner started and has not awaited, while they run."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        """Over the tasks running now (a copy: a task may end while it is iterated)."""
        return iter(list(self._tasks))

    def spawn(self, call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``call`` as a task on the running loop, kept until it ends."""
        return self.keep(asyncio.get_running_loop().create_task(call))

    def keep(self, task: asyncio.Task[T]) -> asyncio.Task[T]:
        """Keep ``task`` until it ends."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        """Wait until no task is left, including those started while waiting.
        Their failures are their owner's business: none is raised here."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))


def retrieve(task: asyncio.Task[Any]) -> None:
    """A done callback for a task nobody awaits: its failure must not be logged as
    "exception was never retrieved" (the task's owner has already dealt with it)."""
    if not task.cancelled():
        task.exception()


RECANCEL_S = 0.05
"""How long ``cancel_and_wait`` gives a cancelled task to end before cancelling again."""


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` until it has ended; its own failure, if any, is raised.

    One cancel is not always enough: on Python 3.11 ``asyncio.wait_for`` drops a
    cancellation that arrives as the awaited write completes (redis-py awaits every
    socket write that way), and a looping job whose cancel was dropped goes on looping.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    with contextlib.suppress(asyncio.CancelledError):
        await task
