"""The stream's own clock: the simulated time a replay by ``--speed`` gives the bidder.

A line carries two times: ``t_ms``, its send offset, and ``ts``, the simulated instant
of its auction. A generated day compresses 24 hours of ``ts`` into minutes of ``t_ms``
at a constant ratio, so sending each line at ``t_ms / speed`` and running the bidder's
wall clock (``bidder.core.clock.SimTime``) at ``ratio x speed`` from ``ts`` of
``t_ms = 0`` makes every request arrive at its own ``ts``. The ratio and the start are
the least-squares line through the lines' ``(t_ms, ts)``: exact for a generated
stream, the best constant clock for one whose ``ts`` wanders (duplicates, imports).

A replay starts the stack itself on this clock; against ``--target`` it reads the
bidder's clock (``GET /clock``) and refuses a bidder on another one.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from bidder.bidstream.stream import StreamRecord
from bidder.core.clock import SimClockError, SimTime
from bidder.replay.client import split_url
from bidder.serve.settings import Settings
from ids.snowflake import EPOCH_MS as ID_EPOCH_MS

MAX_TICK_S = 3600.0
"""The most simulated time one reconciler tick may cover (``PacingConfig``'s bound)."""
SPEED_TOLERANCE = 0.01
START_TOLERANCE_MS = 1000


@dataclass(frozen=True, slots=True)
class StreamClock:
    start_ms: int
    """Simulated time at send offset 0."""
    speed: float
    """Simulated ms per real ms at the replay's speed."""

    def at(self, real_ms: int) -> SimTime:
        """The clock, starting at the real epoch instant ``real_ms``."""
        return SimTime(self.start_ms, self.speed, real_ms)

    @property
    def text(self) -> str:
        return f"{self.start_ms}:{self.speed:g}"


@dataclass(slots=True)
class ClockFit:
    """The least-squares line through ``(t_ms, ts)``, fed one line at a time.

    It keeps sums, not lines, so a stream of any length fits in constant memory. The sums
    are exact integers (Python's are unbounded): ``ts`` near 1.8e12 squared and summed
    over millions of lines would lose the slope's digits in floats.
    """

    n: int = 0
    sum_t: int = 0
    sum_ts: int = 0
    sum_tt: int = 0
    sum_t_ts: int = 0

    def add(self, t_ms: int, ts: int) -> None:
        self.n += 1
        self.sum_t += t_ms
        self.sum_ts += ts
        self.sum_tt += t_ms * t_ms
        self.sum_t_ts += t_ms * ts

    @classmethod
    def of(cls, records: Iterable[StreamRecord]) -> ClockFit:
        fit = cls()
        for record in records:
            fit.add(record.t_ms, record.ts)
        return fit

    def clock(self, replay_speed: float) -> StreamClock | None:
        """The stream's clock at ``replay_speed``; None when its ``t_ms`` or ``ts`` do not
        move."""
        n = self.n
        if n < 2:
            return None
        var = n * self.sum_tt - self.sum_t * self.sum_t  # n^2 x the variance of t_ms
        cov = n * self.sum_t_ts - self.sum_t * self.sum_ts
        if var <= 0 or cov <= 0:
            return None
        ratio = cov / var
        start = self.sum_ts / n - ratio * (self.sum_t / n)
        return StreamClock(round(start), ratio * replay_speed)


BREAKER_TICKS = 3
"""The least reconciler ticks a breaker window spans on a simulated clock."""


def on_clock(settings: Settings, clock: StreamClock, real_at_ms: int) -> Settings:
    """``settings`` for a stack on ``clock`` from ``real_at_ms``.

    The breaker window is simulated time, as is the tick it counts in: a window shorter
    than a few ticks would trip on the first interval spent in one lump (notices and the
    spend stream deliver in lumps), so it spans at least ``BREAKER_TICKS`` ticks.
    """
    window = max(settings.breaker_window_s, BREAKER_TICKS * settings.pacing_tick_s * clock.speed)
    return settings.replace(sim_clock=clock.at(real_at_ms), breaker_window_s=window)


def clock_problem(clock: StreamClock, pacing_tick_s: float) -> str | None:
    """Why the stack cannot run on ``clock`` with real pacing ticks of ``pacing_tick_s``."""
    if clock.start_ms < ID_EPOCH_MS:
        return (
            f"the stream's clock starts at {clock.start_ms}, before the bid ids' epoch "
            f"({ID_EPOCH_MS}, 2024-01-01): use --clock real"
        )
    covered = pacing_tick_s * clock.speed
    if covered <= MAX_TICK_S:
        return None
    return (
        f"the stream's clock runs {clock.speed:g}x real time here, so a pacing tick of "
        f"{pacing_tick_s:g} s would cover {covered:g} simulated seconds (at most "
        f"{MAX_TICK_S:g}): use --pacing-tick-s {MAX_TICK_S / clock.speed:.3g} or less, "
        "a lower --speed, or --clock real"
    )


def target_problem(wanted: StreamClock | None, target: SimTime | None, now_ms: int) -> str | None:
    """Why a bidder on ``target`` (None: the real clock) cannot take this replay."""
    if wanted is None and target is not None:
        return f"the target runs on a simulated clock ({target.text}) and this replay does not"
    if wanted is None:
        return None
    restart = f"start it with --sim-clock {wanted.text}:AT_MS (AT_MS a real instant to come)"
    if target is None:
        return (
            f"the target runs on the real clock, not the stream's: {restart}, or use --clock real"
        )
    if abs(target.speed / wanted.speed - 1) > SPEED_TOLERANCE:
        return (
            f"the target's clock runs {target.speed:g}x, the stream's {wanted.speed:g}x: {restart}"
        )
    if abs(target.start_ms - wanted.start_ms) > START_TOLERANCE_MS:
        starts = (
            f"the target's clock starts at {target.start_ms}, the stream's at {wanted.start_ms}"
        )
        return f"{starts}: {restart}"
    if target.at_ms < now_ms - START_TOLERANCE_MS:
        ago = (now_ms - target.at_ms) / 1000
        return (
            f"the target's simulated clock started {ago:.1f} s ago, before this replay: {restart}"
        )
    return None


async def read_target_clock(target: str, timeout_s: float = 2.0) -> SimTime | None:
    """The clock of the bidder at ``target`` (``GET /clock``); None on the real clock.

    Raises ``LookupError`` when it does not say (not a bidsim bidder, or not answering).
    """
    host, port, _ = split_url(target)
    url = f"http://{host}:{port}/clock"
    try:
        body = await asyncio.to_thread(_get, url, timeout_s)
        text = json.loads(body)["sim_clock"]
        return None if text is None else SimTime.parse(text, now_ms=0)
    except (OSError, ValueError, KeyError, TypeError, SimClockError) as exc:
        raise LookupError(f"{url} does not say which clock the bidder runs on: {exc}") from exc


def _get(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        data: bytes = answer.read()
    return data


__all__ = [
    "ClockFit",
    "StreamClock",
    "clock_problem",
    "on_clock",
    "read_target_clock",
    "target_problem",
]
