"""One clock, injected.

Everything time-dependent takes a ``Clock`` so tests and offline tools can run
in virtual time. ``monotonic()`` is for deadlines and intervals (seconds, the
event loop's time base); ``wall_ms()`` is epoch milliseconds for anything that
leaves the process (ids, notices, windows).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall_ms(self) -> int: ...


class SystemClock:
    """The real clock. ``monotonic`` matches asyncio's default loop.time()."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; for tests and simulations."""

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
