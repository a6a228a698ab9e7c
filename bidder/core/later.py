"""Results that come later, handed on by plain calls; coroutines run without a Task.

Why: the bid path's one await (a cap check, a dedup claim) used to cost an
``asyncio.Task`` and an ``asyncio.timeout_at``. A Task copies the context, puts its
first step in the next loop pass, and wakes through the loop again at the end;
``asyncio.timeout_at`` looks up the current task and reschedules its handle; an
``asyncio.Future`` hands its result to its callbacks in a later loop pass too. On a
request that otherwise runs in one read callback those are most of its event-loop
cost.

- ``Later[T]``: a result settled once and handed to its callbacks at once, in the
  call that settles it. ``then`` maps it into another ``Later`` the same way; a
  coroutine may also await it.
- ``Drive[T]``: a ``Later`` settled by running a coroutine to its end. Its first step
  runs in the constructor; each later step runs in the done callback of the future it
  awaits. With a deadline, one timer cancels it then, as ``asyncio.timeout_at`` would:
  the future it awaits is cancelled, the coroutine sees ``CancelledError`` there, and
  if that ends it, the ``Drive`` fails with ``TimeoutError``.

A driven coroutine has no current task, so code that needs one (``asyncio.timeout``,
``asyncio.current_task``) must run in a task of its own; the bid path's redis-py calls
do (``bidder.adapters.valkey_wait``). ``asyncio.sleep``, futures and ``asyncio.wait``
need none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")

_PENDING = object()


class Later(Generic[T]):
    """A result to come; callbacks run when it is settled, in that call."""

    __slots__ = ("_callbacks", "_error", "_value")

    def __init__(self) -> None:
        self._value: Any = _PENDING
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Later[T]], None]] = []

    def done(self) -> bool:
        return self._value is not _PENDING or self._error is not None

    def result(self) -> T:
        """The value, or the failure raised; RuntimeError while pending."""
        if self._error is not None:
            raise self._error
        if self._value is _PENDING:
            raise RuntimeError("Later.result() before it was settled")
        value: T = self._value
        return value

    def settle(self, value: T) -> None:
        self._finish(value, None)

    def fail(self, error: BaseException) -> None:
        self._finish(_PENDING, error)

    def __await__(self) -> Generator[Any, None, T]:
        """Waits from a coroutine for it to be settled, through a future of the loop."""
        if not self.done():
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(_: Later[T]) -> None:
                if not future.done():  # the waiting task may have been cancelled
                    future.set_result(None)

            self.add_done_callback(wake)
            yield from future.__await__()
        return self.result()

    def add_done_callback(self, callback: Callable[[Later[T]], None]) -> None:
        """``callback(self)`` once settled: at once if it is."""
        if self.done():
            callback(self)
        else:
            self._callbacks.append(callback)

    def then(self, step: Callable[[Later[T]], U]) -> Later[U]:
        """A ``Later`` of ``step(self)``, run when this one is settled; what ``step``
        raises fails it."""
        mapped: Later[U] = Later()

        def run(settled: Later[T]) -> None:
            try:
                value = step(settled)
            except BaseException as exc:
                mapped.fail(exc)
                if not isinstance(exc, Exception | asyncio.CancelledError):
                    raise  # KeyboardInterrupt, SystemExit
            else:
                mapped.settle(value)

        self.add_done_callback(run)
        return mapped

    def _finish(self, value: Any, error: BaseException | None) -> None:
        if self.done():
            raise RuntimeError("a Later is settled once")
        self._value, self._error = value, error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


class Drive(Later[T]):
    """Runs ``coro`` to its end without a Task, cancelled at ``deadline`` (the loop's
    clock) if it is still running then (module docstring)."""

    __slots__ = ("_awaiting", "_coro", "_expired", "_loop", "_timer")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        loop: asyncio.AbstractEventLoop,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self._coro = coro
        self._loop = loop
        self._awaiting: asyncio.Future[Any] | None = None
        self._expired = False
        self._timer = None if deadline is None else loop.call_at(deadline, self._expire)
        self._step(None)

    def _step(self, error: BaseException | None) -> None:
        try:
            awaited = self._coro.send(None) if error is None else self._coro.throw(error)
        except StopIteration as stop:
            self._end(stop.value, None)
            return
        except asyncio.CancelledError as exc:
            self._end(_PENDING, TimeoutError() if self._expired else exc)
            return
        except BaseException as exc:
            self._end(_PENDING, exc)
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit
                raise
            return
        if awaited is None:  # a bare yield (``asyncio.sleep(0)``): step again next pass
            self._loop.call_soon(self._step, None)
            return
        if getattr(awaited, "_asyncio_future_blocking", None) is not True:
            self._step(RuntimeError(f"a driven coroutine awaited {awaited!r}, not a future"))
            return
        awaited._asyncio_future_blocking = False
        self._awaiting = awaited
        awaited.add_done_callback(self._wake)
        if self._expired:  # the deadline passed while the last step ran
            awaited.cancel()

    def _wake(self, awaited: asyncio.Future[Any]) -> None:
        self._awaiting = None
        self._step(None)

    def _expire(self) -> None:
        self._timer = None
        self._expired = True
        if self._awaiting is not None:
            self._awaiting.cancel()

    def _end(self, value: Any, error: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._finish(value, error)
