"""Going on from a future's done-callback instead of a task: ``Later``.

A request whose only wait is a Valkey reply needs no task. A task costs its creation,
a first step on the next loop pass, a step for every wake-up, and the walk down the
chain of coroutines it runs through at each step; a done-callback on the reply is
called once, with the reply in hand.

``Later(source, step)`` is what ``step(source)`` gives once ``source`` is done;
``later.then(next)`` composes ``next`` onto it, and ``on_done(callback)`` asks for
the outcome. Steps are composed, not chained through futures of their own: a future
runs its done-callbacks on the loop's next pass, so each link would cost the request a
pass, and on a loaded loop every pass carries the other requests' work. The whole
chain runs in the source's one done-callback.

A step gets an outcome whose ``result()`` returns the value or raises what failed
before it; what a step raises is the next step's outcome. A step that must wait again
returns another ``Later`` (the rest goes on from that one's source) or a coroutine
(run as a task, kept referenced until it ends). Nothing here bounds a wait: the
futures waited on must end by themselves (a reply carries its limit on the
connection that owes it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator, Sequence
from functools import partial
from types import CoroutineType
from typing import Any, Generic, Protocol, TypeVar

from bidder.core.tasks import TaskSet

T = TypeVar("T")
U = TypeVar("U")
T_co = TypeVar("T_co", covariant=True)


class Outcome(Protocol[T_co]):
    """A done future, or what a step gave: ``result()`` returns or raises it."""

    def result(self) -> T_co: ...


Step = Callable[[Outcome[Any]], Any]
"""A step: an outcome in; a value, a ``Later`` or a coroutine out (or it raises)."""

_tasks = TaskSet()
"""Coroutines a step returned, as tasks: the loop alone holds tasks only weakly."""


class Later(Generic[T]):
    """What ``step(source)`` gives once ``source`` is done (module docstring)."""

    __slots__ = ("_source", "_step")

    def __init__(self, source: asyncio.Future[Any], step: Step) -> None:
        self._source = source
        self._step = step

    @staticmethod
    def of(awaitable: asyncio.Future[T] | Coroutine[Any, Any, T]) -> Later[T]:
        """``awaitable``'s result: a future waited on as it is, a coroutine run as a task."""
        if not isinstance(awaitable, asyncio.Future):
            awaitable = _tasks.spawn(awaitable)
        return Later(awaitable, _result)

    def then(self, step: Callable[[Outcome[T]], Any]) -> Later[Any]:
        """This, then ``step`` of its outcome, in the same done-callback."""
        return Later(self._source, partial(_composed, self._step, step))

    def on_done(self, callback: Callable[[Outcome[T]], None]) -> None:
        """Call ``callback`` with the outcome once it is known."""
        self._source.add_done_callback(partial(_deliver, self._step, callback))

    def __await__(self) -> Generator[Any, None, T]:
        """Awaited from a task (a stage after one that ran the request into a task)."""
        future: asyncio.Future[T] = self._source.get_loop().create_future()
        self.on_done(partial(_settle, future))
        return future.__await__()


def when_all(futures: Sequence[asyncio.Future[Any]]) -> asyncio.Future[Any]:
    """A future done once every one of ``futures`` (at least one) is done, whichever way
    each ends; the future itself when there is only one. Its value means nothing: read
    the futures themselves."""
    if len(futures) == 1:
        return futures[0]
    done: asyncio.Future[None] = futures[0].get_loop().create_future()
    left = len(futures)

    def one_done(_: asyncio.Future[Any]) -> None:
        nonlocal left
        left -= 1
        if not left:
            done.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    return done


class _Done:
    """What a step gave (``error`` None) or how it failed."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: Any, error: BaseException | None = None) -> None:
        self._value = value
        self._error = error

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def _settle(future: asyncio.Future[T], outcome: Outcome[T]) -> None:
    try:
        future.set_result(outcome.result())
    except asyncio.CancelledError:
        future.cancel()
    except BaseException as exc:  # the outcome's failure, for the awaiting task
        future.set_exception(exc)


def _result(outcome: Outcome[T]) -> T:
    return outcome.result()


def _run(step: Step, outcome: Outcome[Any]) -> Outcome[Any] | Later[Any]:
    """``step(outcome)`` as an outcome, or the ``Later`` it waits on."""
    try:
        value = step(outcome)
    except BaseException as exc:  # the step's failure is the next one's outcome
        return _Done(None, exc)
    if isinstance(value, Later):
        return value
    # A native coroutine (``async def``): asyncio.iscoroutine would also ask the
    # Coroutine ABC, a slow check of every plain value.
    if isinstance(value, CoroutineType):
        return Later(_tasks.spawn(value), _result)
    return _Done(value)


def _composed(first: Step, second: Step, outcome: Outcome[Any]) -> Any:
    ran = _run(first, outcome)
    if isinstance(ran, Later):  # waits again: the rest goes on from there
        return ran.then(second)
    return second(ran)


def _deliver(step: Step, callback: Callable[[Outcome[Any]], None], source: Any) -> None:
    ran = _run(step, source)
    if isinstance(ran, Later):
        ran.on_done(callback)
    else:
        callback(ran)
