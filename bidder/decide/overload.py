"""Overload protection: how late the event loop runs, and how much work is inside.

Theory of operation. The bid port's server stamps a request when its first bytes
are read (``bidder.serve.http``), but bytes that came while the loop was blocked
waited in the kernel, unseen, and the kernel keeps no arrival time a process can read
cheaply. So queueing is estimated, not
measured: a heartbeat timer (``run_lag_probe``) asks to fire every few
milliseconds and records how late it fired. A timer overdue by L means the loop
did nothing else for about L, so a request handled just after may have waited up
to L before its handler started. ``LoopLag.current`` is the worst lateness seen
within a short hold window (``HOLD_S``, a few beats): the backlog of a stall is
handed to its handlers in the first loop iterations after it, which see the stall
and are charged it, conservatively. Should draining take longer, those iterations
are long themselves and the next beats are late too, so the estimate stays up
while the loop is busy. A longer hold would shed requests that arrive well after
a stall ended and never queued (measured in the live tests: a 170 ms start-up
stall made requests 100 ms later shed with a one-deadline hold of 250 ms).

The handler subtracts ``current()`` from its receipt time, so queueing counts
against the deadline, and sheds a request at once (204 ``overloaded``, body
unparsed) when the lag is over a bound (``LagShedder``: a high bound to start, a lower
one while overloaded) or when ``InFlightGate`` is full: answering "no" costs
microseconds, queueing it costs every request behind it.

Blind spot: a stall is seen as the beat's lateness, which is the stall minus the
time that was left before the beat was due: it is under-estimated by at most one
interval (2 ms), and a stall shorter than that may go unseen.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from bidder.core.clock import Clock

PROBE_INTERVAL_S = 0.002
"""Heartbeat period: ~500 cheap timer callbacks a second; the blind spot above."""
HOLD_S = 4 * PROBE_INTERVAL_S
"""How long a late beat stays in the estimate."""


class LoopLag:
    """Event-loop lateness samples; ``current()`` is the worst one held."""

    def __init__(self, clock: Clock, hold_s: float = HOLD_S):
        if hold_s <= 0:
            raise ValueError(f"hold_s must be positive, got {hold_s}")
        self._clock = clock
        self._hold_s = hold_s
        self._samples: deque[tuple[float, float]] = deque()  # (observed at, lateness)

    def observe(self, scheduled: float) -> float:
        """Record a heartbeat due at ``scheduled`` firing now; returns its lateness."""
        now = self._clock.monotonic()
        lateness = max(0.0, now - scheduled)
        samples = self._samples
        # Peak hold: an older sample no larger than this one can never be the max again.
        while samples and samples[-1][1] <= lateness:
            samples.pop()
        samples.append((now, lateness))
        return lateness

    def current(self) -> float:
        """The worst lateness observed within the hold window (0 when none)."""
        samples, oldest = self._samples, self._clock.monotonic() - self._hold_s
        while samples and samples[0][0] < oldest:
            samples.popleft()
        return samples[0][1] if samples else 0.0


class LagShedder:
    """When to shed on loop lag: past ``enter_s``, and then, while overloaded, past a
    lower stay bound until the lag has stayed under it for ``calm_s``.

    Why two bounds: on a shared machine the loop is now and then a millisecond or two
    late for reasons that pass (another process held the core), and shedding at such
    lags loses bids for nothing; so entering takes a lag that only real overload
    makes. But once overloaded, admitting every request that arrives in a lull under
    the high bound refills the loop with work that then misses its deadline: the lag
    under overload comes in bursts. So an overloaded worker keeps shedding at the low
    bound until the loop has been calm for ``calm_s``. While it is overloaded, the
    handler also gives its stages less time (``Settings.overload_margin_ms``): the
    timers that end them fire late by a loop iteration then.

    How hard an overloaded worker pushes back is learned from what the requests it
    admits while overloaded come to (``answered``): a ``pressure`` between 0 and 1 sets
    the stay bound (``stay_s`` at 1, ``enter_s`` at 0) and the share of the overload
    margin its stages give up. Each such answer decided in time lowers it by
    1/``EASE_ANSWERS``; one whose decision the deadline cut short (a ``deadline``
    no-bid, answered in time) raises it by ``CUT_WEIGHT`` steps: work lost, the
    contract kept; one answered after its deadline sets it back to 1: the contract
    broken. A lag is a cause, the deadline is what counts: a worker saturated
    by a bounded load (an exchange's connections each waiting for its answer) runs at a
    steady lag that still leaves its requests time, and shedding there trades bids for
    204s that cost CPU too; a worker whose backlog grows (an open-loop surge) misses
    deadlines as soon as its lag is too high, and the pressure goes back up. Answers
    while calm leave it alone: it starts at 1, so a worker that has never been
    overloaded for long pushes back as hard as it can, and one that has keeps what it
    learned.
    """

    EASE_ANSWERS = 512
    """In-time answers that take the pressure from 1 to 0 (0.1 s at saturation). The
    pressure settles where the misses match the in-time answers: it lets through about
    one cut decision in CUT_WEIGHT + 1 admitted requests (a saturated worker with no
    pushback cuts 3-5%), and backs off at once on every late answer."""

    CUT_WEIGHT = 8
    """Steps a decision the deadline cut short raises the pressure."""

    def __init__(self, enter_s: float, stay_s: float, calm_s: float):
        if not 0 < stay_s <= enter_s or calm_s < 0:
            raise ValueError(
                f"need 0 < stay_s <= enter_s and calm_s >= 0, got {stay_s}, {enter_s}, {calm_s}"
            )
        self._enter_s, self._calm_s = enter_s, calm_s
        self._room_s = enter_s - stay_s
        """How far the stay bound rises above its floor as the pressure falls to 0."""
        self._pressure = 1.0
        self._overloaded_until = float("-inf")

    @property
    def pressure(self) -> float:
        return self._pressure

    @property
    def stay_s(self) -> float:
        """The stay bound the pressure sets."""
        return self._enter_s - self._pressure * self._room_s

    def overloaded(self, now: float) -> bool:
        return now < self._overloaded_until

    def shed(self, lag: float, now: float) -> bool:
        """Whether a request arriving ``now`` with the loop ``lag`` late is shed."""
        if lag > self._enter_s or (lag > self.stay_s and self.overloaded(now)):
            self._overloaded_until = now + self._calm_s
            return True
        return False

    def answered(self, now: float, *, late: bool, cut: bool) -> None:
        """An admitted request was answered ``now``: after its deadline (``late``), in
        time but with its decision cut short by the deadline (``cut``), or in time."""
        if now >= self._overloaded_until:  # calm: nothing to learn
            return
        if late:
            self._pressure = 1.0
        elif cut:
            self._pressure = min(1.0, self._pressure + self.CUT_WEIGHT / self.EASE_ANSWERS)
        else:
            self._pressure = max(0.0, self._pressure - 1 / self.EASE_ANSWERS)


class InFlightGate:
    """A bound on the requests inside the handler at once."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._limit = limit
        self._inside = 0

    @property
    def inside(self) -> int:
        return self._inside

    def enter(self) -> bool:
        """Take a place; False (and nothing taken) when all ``limit`` are taken."""
        if self._inside >= self._limit:
            return False
        self._inside += 1
        return True

    def leave(self) -> None:
        if self._inside <= 0:
            raise RuntimeError("InFlightGate.leave without a matching enter")
        self._inside -= 1


async def run_lag_probe(
    lag: LoopLag,
    clock: Clock,
    interval_s: float = PROBE_INTERVAL_S,
    on_sample: Callable[[float], None] | None = None,
) -> None:
    """Forever: a ``call_later`` heartbeat feeding ``lag``; cancel to stop.

    A plain timer callback rather than a sleeping task: it runs in the first loop
    iteration after it is due, before the requests that queued behind a stall are
    handed to their handlers, and costs no task step.
    """
    loop = asyncio.get_running_loop()
    handle: asyncio.TimerHandle | None = None

    def beat(scheduled: float) -> None:
        nonlocal handle
        lateness = lag.observe(scheduled)
        if on_sample is not None:
            on_sample(lateness)
        handle = loop.call_later(interval_s, beat, clock.monotonic() + interval_s)

    handle = loop.call_later(interval_s, beat, clock.monotonic() + interval_s)
    try:
        await loop.create_future()  # never resolved: runs until cancelled
    finally:
        handle.cancel()
