"""``bidder.adapters.valkey_wait.Waiter``: wait until an instant, leave late calls running.

Plain coroutines stand in for Valkey calls here; tests/fcap/test_chaos.py and
tests/bidder/pipeline/test_dedup_claims.py check on real servers that a timed-out call keeps
its connection.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from bidder.adapters.valkey_wait import Waiter


class Call:
    """A call that answers ``value`` (or raises ``error``) once ``gate`` opens."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.gate = asyncio.Event()
        self.started = self.finished = self.cancelled = False

    async def run(self) -> Any:
        self.started = True
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.finished = True
        if self.error is not None:
            raise self.error
        return self.value


def ready(value: Any = None, error: BaseException | None = None) -> Call:
    call = Call(value, error)
    call.gate.set()
    return call


def soon(seconds: float = 1.0) -> float:
    return asyncio.get_running_loop().time() + seconds


@pytest.mark.asyncio
async def test_results_come_in_call_order() -> None:
    late_first, early = Call("a"), ready("b")
    asyncio.get_running_loop().call_later(0.01, late_first.gate.set)
    assert await Waiter().gather([late_first.run(), early.run()], soon()) == ["a", "b"]


@pytest.mark.asyncio
async def test_a_late_call_times_out_and_is_left_to_finish() -> None:
    waiter, late = Waiter(), Call("answer")
    with pytest.raises(TimeoutError):
        await waiter.gather([late.run()], soon(0.01))
    assert (late.cancelled, waiter.left_running) == (False, 1)
    late.gate.set()
    await waiter.drain()
    assert (late.finished, waiter.left_running) == (True, 0)


@pytest.mark.asyncio
async def test_the_first_failure_in_call_order_is_raised_and_the_rest_left_running() -> None:
    waiter = Waiter()
    first, second, late = ready(error=KeyError("1")), ready(error=ValueError("2")), Call()
    with pytest.raises(KeyError):
        await waiter.gather([late.run(), first.run(), second.run()], soon())
    assert (late.cancelled, waiter.left_running) == (False, 1)
    late.gate.set()
    await waiter.drain()


@pytest.mark.asyncio
async def test_the_failure_of_a_call_left_running_is_not_reported_as_unretrieved() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        waiter, late = Waiter(), Call(error=OSError("late"))
        await times_out_and_forgets(waiter, late)
        late.gate.set()
        await waiter.drain()
        gc.collect()  # an unretrieved failure is reported when its task is collected
    finally:
        loop.set_exception_handler(None)
    assert late.finished and reported == []


async def times_out_and_forgets(waiter: Waiter, call: Call) -> None:
    """Time out on ``call`` and keep no reference to its task (a traceback held would
    keep it from being collected, and so from being reported)."""
    try:
        await waiter.gather([call.run()], soon(0.01))
    except TimeoutError:
        return
    raise AssertionError("no timeout")


@pytest.mark.asyncio
async def test_a_cancelled_caller_leaves_its_calls_running() -> None:
    waiter, late = Waiter(), Call("answer")
    caller = asyncio.create_task(waiter.gather([late.run()], soon()))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert (late.cancelled, waiter.left_running) == (False, 1)
    late.gate.set()
    await waiter.drain()
    assert late.finished


@pytest.mark.asyncio
async def test_a_call_failing_as_its_caller_is_cancelled_is_not_reported_as_unretrieved() -> None:
    """The call fails and the caller is cancelled in the same loop iteration, so the
    caller's wait ends cancelled with the call already done: a server refusing the
    connection while the request's deadline passes (a master killed on a Cluster)."""
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        failing = ready(error=OSError("refused"))
        await cancelled_as_it_fails(failing)
        await asyncio.sleep(0)  # the loop lets go of the call's task
        gc.collect()  # an unretrieved failure is reported when its task is collected
    finally:
        loop.set_exception_handler(None)
    assert failing.finished and reported == []


async def cancelled_as_it_fails(call: Call) -> None:
    """Cancel a caller of ``call`` right after the call's one step, keeping no reference
    to the call's task (as ``times_out_and_forgets``)."""
    caller = asyncio.create_task(Waiter().gather([call.run()], soon()))
    await asyncio.sleep(0)  # the caller starts the call and waits for it
    asyncio.get_running_loop().call_soon(caller.cancel)  # after the call's step
    try:
        await caller
    except asyncio.CancelledError:
        return
    raise AssertionError("the caller was not cancelled")


@pytest.mark.asyncio
async def test_past_the_bound_a_late_call_is_cancelled() -> None:
    waiter, kept, over = Waiter(limit=1), Call(), Call()
    with pytest.raises(TimeoutError):
        await waiter.gather([kept.run(), over.run()], soon(0.01))
    await asyncio.sleep(0)  # the cancellation is delivered at the task's next step
    assert (kept.cancelled, over.cancelled, waiter.left_running) == (False, True, 1)
    kept.gate.set()
    await waiter.drain()


@pytest.mark.asyncio
async def test_calls_are_not_started_once_the_instant_has_passed() -> None:
    call = ready("never")
    with pytest.raises(TimeoutError):
        await Waiter().gather([call.run()], asyncio.get_running_loop().time() - 0.001)
    assert not call.started


def test_the_bound_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="limit"):
        Waiter(limit=-1)
