"""Waiting for Valkey calls until an instant without cancelling the late ones.

For calls through redis-py: a Cluster's bid path (fcap checks, dedup claims) and
fcap counts and releases. On one server the bid path's calls go through
``bidder.adapters.valkey_pipelined`` instead, which bounds time without tasks.

Why not cancel: redis-py cannot know whether the answer to a cancelled command is
still on its way, so it drops that connection (``read_response`` disconnects on any
exception), and the next command to take a connection from the pool pays a
reconnect first: TCP connect, then ``CLIENT SETINFO``, each a wake-up of the server.
On the bid path a call is late when the machine is busy, and the reconnect then
makes the next call late too: cancelling at closed-loop saturation costs the server
about one new connection for every ten commands. A late call left to finish gives its
connection back clean when its answer comes, or drops it at the client's socket timeout.

Bound: at most ``limit`` calls are left running at once per ``Waiter``. A stalled
server would otherwise collect one per request until the socket timeout; past the
bound a late call is cancelled and its connection dropped.

What a call left running does, it does: a script sent is run by the server whether
or not anyone waits for its answer, as it would be if the call were cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from bidder.core.tasks import TaskSet, retrieve

T = TypeVar("T")

MAX_LEFT_RUNNING = 256
"""Late calls left to finish at once, per ``Waiter``."""


class Waiter:
    """Runs calls as tasks, waits for them until an instant, keeps the late ones."""

    def __init__(self, limit: int = MAX_LEFT_RUNNING) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self._limit = limit
        self._running = TaskSet()

    @property
    def left_running(self) -> int:
        return len(self._running)

    async def gather(self, calls: Sequence[Coroutine[Any, Any, T]], until: float) -> list[T]:
        """The calls' results, in call order, when all of them finish by ``until``
        (the loop's clock), run concurrently.

        Raises the first failure, in call order, among those that finished; else
        ``TimeoutError`` when some are still running at ``until``. The calls still
        running then, or when the caller is cancelled, are left to finish (module
        docstring). A call not started by ``until`` is never started.
        """
        loop = asyncio.get_running_loop()
        if until <= loop.time():
            for call in calls:
                call.close()
            raise TimeoutError
        tasks = [loop.create_task(call) for call in calls]
        try:
            done, pending = await asyncio.wait(
                tasks, timeout=until - loop.time(), return_when=asyncio.FIRST_EXCEPTION
            )
        except asyncio.CancelledError:
            # A call may have failed in the same loop iteration as the cancel: nobody
            # is left to see that failure.
            for task in tasks:
                if task.done():
                    retrieve(task)
            self._leave(task for task in tasks if not task.done())
            raise
        # In call order: past the bound, the later calls are the ones cancelled.
        self._leave(task for task in tasks if task in pending)
        for failure in [task.exception() for task in tasks if task in done]:
            if failure is not None:
                raise failure
        if pending:
            raise TimeoutError
        return [task.result() for task in tasks]

    async def drain(self) -> None:
        """Wait until no call is left running (each ends by its socket timeout)."""
        await self._running.drain()

    def _leave(self, tasks: Iterable[asyncio.Task[Any]]) -> None:
        for task in tasks:
            if len(self._running) < self._limit:
                self._running.keep(task)
            else:
                task.cancel()
            task.add_done_callback(retrieve)
