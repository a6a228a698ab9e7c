"""Many instants on one event loop and one timer for them all: how the bid path bounds
its waits without a timer per request.

``Deadlines`` holds items of any kind (the Valkey connection's reply futures);
``TaskDeadlines`` bounds a block of a task as ``asyncio.timeout_at`` does: ``with
bounds.until(instant):`` cancels the task if it is still inside at ``instant``, and the
cancel comes out of the block as ``TimeoutError``.

A timer per wait (``asyncio.timeout_at``, ``loop.call_at``) makes, inserts, cancels and
frees one loop timer per request, although most waits end long before their instant.
``Deadlines`` keeps the items in a heap by instant and arms one loop timer at the
earliest. When it fires, every item whose instant has passed is expired, except those
that finished meanwhile; finished items are dropped whenever they reach the top, so the
heap holds about one deadline's worth of items. The timer is moved only when an item
comes in with an earlier instant than the armed one, which for waits of one fixed length
is rare.

An instant is on the loop's clock (``loop.time()``). The timer's own instant counts as
passed even when the loop's coarser clock (uvloop: milliseconds) reads a little
earlier, as ``asyncio.timeout_at`` would.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")
_INFINITY = float("inf")


class Deadlines(Generic[T]):
    """Items with an instant each; ``expire(item)`` runs once an item's instant has
    passed unless ``finished(item)`` says it no longer needs to. ``after_fire`` runs
    after each firing of the timer (a chance for periodic checks). It is used on one
    loop, the running one of its first ``add``."""

    def __init__(
        self,
        expire: Callable[[T], None],
        finished: Callable[[T], bool],
        after_fire: Callable[[], None] | None = None,
    ) -> None:
        self._expire = expire
        self._finished = finished
        self._after_fire = after_fire
        self._heap: list[tuple[float, int, T]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _INFINITY

    def __len__(self) -> int:
        """Items held, finished ones not yet dropped included."""
        return len(self._heap)

    def add(self, until: float, item: T) -> None:
        heapq.heappush(self._heap, (until, next(self._order), item))
        if until < self._timer_at:
            self._arm(until)

    def clear(self) -> None:
        """Forget every item and stop the timer (nothing is expired)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, _INFINITY
        self._heap.clear()

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        due = max(self._timer_at, asyncio.get_running_loop().time())
        self._timer, self._timer_at = None, _INFINITY
        heap, finished = self._heap, self._finished
        while heap and (heap[0][0] <= due or finished(heap[0][2])):
            item = heapq.heappop(heap)[2]
            if not finished(item):
                self._expire(item)
        if heap:
            self._arm(heap[0][0])
        if self._after_fire is not None:
            self._after_fire()


class TaskDeadlines:
    """The blocks of many tasks, each bounded by its own instant, on one timer."""

    def __init__(self) -> None:
        self._deadlines: Deadlines[Bound] = Deadlines(Bound.cut, Bound.left)

    def __len__(self) -> int:
        return len(self._deadlines)

    def until(self, instant: float) -> Bound:
        """The bound of the current task's block: ``with deadlines.until(instant):``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("TaskDeadlines.until needs a running task")
        bound = Bound(task)
        self._deadlines.add(instant, bound)
        return bound


class Bound:
    """One task's block under an instant; a context manager (see ``TaskDeadlines``)."""

    __slots__ = ("_cancelling", "_cut", "_left", "_task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self._task = task
        self._cancelling = task.cancelling()
        self._cut = False
        self._left = False

    def cut(self) -> None:
        self._cut = True
        self._task.cancel()

    def left(self) -> bool:
        return self._left

    def __enter__(self) -> Bound:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._left = True
        # A cancel of our own becomes TimeoutError; one from elsewhere (a shutdown)
        # stays a cancel, as with asyncio.timeout_at.
        if (
            kind is asyncio.CancelledError
            and self._cut
            and self._task.uncancel() <= self._cancelling
        ):
            raise TimeoutError from exc
