"""Going on from a future's done-callback instead of a task: ``then`` and ``when_all``.

A request whose only wait is a Valkey reply needs no task. A task costs its creation,
a first step on the next loop pass, a step for every wake-up, and the walk down the
chain of coroutines it runs through at each step; a done-callback on the reply is
called once, with the reply in hand. ``then(reply, step)`` is a future of
``step(reply)``: the rest of the request runs from the callback. A step that must
wait again may return another future, which the result follows, or a coroutine, which
then runs as a task (kept referenced until it ends).

A step reads its source with ``source.result()``, which raises what the source failed
with; whatever the step raises fails the returned future, and a cancelled source
cancels it. Nothing here bounds a wait: the futures chained must end by themselves (a
reply carries its limit on the connection that owes it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from types import CoroutineType
from typing import Any, TypeVar, cast

from bidder.core.tasks import TaskSet

T = TypeVar("T")
U = TypeVar("U")

Step = Callable[["asyncio.Future[T]"], "U | asyncio.Future[U] | Coroutine[Any, Any, U]"]

_tasks = TaskSet()
"""Coroutines a step returned, as tasks: the loop alone holds tasks only weakly."""


def then(source: asyncio.Future[T], step: Step[T, U]) -> asyncio.Future[U]:
    """A future of ``step(source)``, called once ``source`` is done (module docstring)."""
    out: asyncio.Future[U] = source.get_loop().create_future()
    source.add_done_callback(partial(_run_step, step, out))
    return out


def future_of(awaitable: Awaitable[T]) -> asyncio.Future[T]:
    """``awaitable`` as a future: a future itself, anything else run as a task (kept
    referenced until it ends)."""
    if isinstance(awaitable, asyncio.Future):
        return awaitable
    if isinstance(awaitable, CoroutineType):
        return _tasks.spawn(awaitable)
    return _tasks.spawn(_awaited(awaitable))


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


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


def _run_step(step: Step[T, U], out: asyncio.Future[U], source: asyncio.Future[T]) -> None:
    try:
        result = step(source)
    except asyncio.CancelledError:
        out.cancel()
        return
    except BaseException as exc:  # the step's failure is the result's
        out.set_exception(exc)
        return
    # A native coroutine (``async def``): asyncio.iscoroutine would also ask the
    # Coroutine ABC, a slow check of every plain result.
    if isinstance(result, CoroutineType):
        result = _tasks.spawn(result)
    if isinstance(result, asyncio.Future):
        result.add_done_callback(partial(_copy, out))
    else:
        out.set_result(cast(U, result))  # neither a coroutine nor a future: a value


def _copy(out: asyncio.Future[U], source: asyncio.Future[U]) -> None:
    if source.cancelled():
        out.cancel()
    elif (error := source.exception()) is not None:
        out.set_exception(error)
    else:
        out.set_result(source.result())
