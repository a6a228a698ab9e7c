"""One clock, injected.

Everything time-dependent takes a ``Clock`` so tests and offline tools can run
in virtual time. ``monotonic()`` is for deadlines and intervals (seconds, the
event loop's time base); ``wall_ms()`` is epoch milliseconds for anything that
leaves the process (ids, notices, windows). ``speed`` is how many wall milliseconds
pass per real millisecond: 1 except on a simulated clock (``SimClock``), where a
lifetime kept in Valkey as a relative TTL (real ms) lasts ``ttl x speed`` wall ms.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    @property
    def speed(self) -> float: ...

    def monotonic(self) -> float: ...

    def wall_ms(self) -> int: ...


class SystemClock:
    """The real clock. ``monotonic`` matches asyncio's default loop.time()."""

    speed = 1.0

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; for tests and simulations."""

    speed = 1.0

    def __init__(self, start_monotonic: float = 0.0, start_wall_ms: int = 1_767_225_600_000):
        self._mono = start_monotonic
        self._wall_ms = start_wall_ms

    def monotonic(self) -> float:
        return self._mono

    def wall_ms(self) -> int:
        return self._wall_ms

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a ManualClock never goes backwards; use set_wall_ms for skew")
        self._mono += seconds
        self._wall_ms += round(seconds * 1000)

    def set_wall_ms(self, wall_ms: int) -> None:
        self._wall_ms = wall_ms


class SimClockError(ValueError):
    """A ``--sim-clock`` value that is not ``START_MS:SPEED[:AT_MS]``."""


@dataclass(frozen=True, slots=True)
class SimTime:
    """A simulated wall clock that every process of a stack agrees on.

    Wall time reads ``start_ms`` at the real epoch instant ``at_ms`` and then runs
    ``speed`` times faster than real time; before ``at_ms`` it holds at ``start_ms``
    (a stack starting up waits at the start of its day instead of living the day
    before). Each process turns ``at_ms`` into its own monotonic instant once, so the
    processes of one machine agree to the precision of one wall clock read.
    """

    start_ms: int
    speed: float
    at_ms: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.speed) and 0 < self.speed <= 100_000):
            raise SimClockError(
                f"the simulated clock's speed must be in (0, 100000], got {self.speed}"
            )

    @classmethod
    def parse(cls, text: str, now_ms: int) -> SimTime:
        """``START_MS:SPEED[:AT_MS]``; without ``AT_MS`` the clock starts at ``now_ms``."""
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError
            start, speed = int(parts[0]), float(parts[1])
            at = int(parts[2]) if len(parts) == 3 else now_ms
        except ValueError:
            raise SimClockError(
                f"--sim-clock must be START_MS:SPEED[:AT_MS] (epoch ms, a factor), got {text!r}"
            ) from None
        return cls(start, speed, at)

    @property
    def text(self) -> str:
        """The ``--sim-clock`` value that makes another process agree with this one."""
        return f"{self.start_ms}:{self.speed:g}:{self.at_ms}"

    def wall_at(self, real_ms: float) -> int:
        """Simulated wall ms at the real epoch instant ``real_ms``."""
        return self.start_ms + math.floor(max(real_ms - self.at_ms, 0.0) * self.speed)

    def real_at(self, wall_ms: int) -> float:
        """The real epoch ms at which simulated time reaches ``wall_ms`` (not before ``at_ms``)."""
        return self.at_ms + max(wall_ms - self.start_ms, 0) / self.speed

    def clock(self, real: Clock | None = None) -> SimClock:
        return SimClock(self, real or SystemClock())


class SimClock:
    """``SimTime`` as a ``Clock``: ``monotonic`` stays real (deadlines, timeouts and
    latency are real time); ``wall_ms`` is simulated."""

    def __init__(self, sim: SimTime, real: Clock) -> None:
        self.sim = sim
        self._real = real
        self._mono_at = real.monotonic() + (sim.at_ms - real.wall_ms()) / 1000

    @property
    def speed(self) -> float:
        return self.sim.speed

    def monotonic(self) -> float:
        return self._real.monotonic()

    def wall_ms(self) -> int:
        elapsed_ms = max(self._real.monotonic() - self._mono_at, 0.0) * 1000
        return self.sim.start_ms + math.floor(elapsed_ms * self.sim.speed)


def real_ttl_ms(wall_lifetime_ms: float, clock: Clock) -> int:
    """The relative TTL (real ms, at least 1) that lasts ``wall_lifetime_ms`` on ``clock``.

    The quotient is rounded to a nanosecond before its ceiling is taken, so a float error
    (161 / 1.4 is 115.00000000000001) does not add a whole millisecond."""
    return max(math.ceil(round(wall_lifetime_ms / clock.speed, 6)), 1)
