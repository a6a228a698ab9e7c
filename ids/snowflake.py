"""Snowflake ids: 64-bit, time-ordered, unique across the fleet. Pure.

Layout (most significant first)::

    0 | 41 bits: milliseconds since EPOCH_MS | 10 bits: worker | 12 bits: sequence

``EPOCH_MS`` is 2024-01-01T00:00:00Z, so ids run out in 2093. The top bit is always 0:
ids are positive signed 64-bit integers too (Java, DynamoDB numbers, JSON readers that
cap at int64 all keep them).

Theory of operation. The generator remembers the millisecond ``last`` of its previous
id and the sequence used in it. A later millisecond restarts the sequence at 0; the
same millisecond takes the next sequence number; 4,096 ids in one millisecond exhaust
it and the generator waits (``pause``) until the clock reaches the next millisecond.

A clock that steps back (NTP slew or step) never yields a duplicate: ids keep being
issued *in* ``last`` (the sequence goes on), so they stay unique and increasing. When
that millisecond's sequence runs out the generator waits for the clock to pass
``last``. A step back larger than ``max_backwards_ms`` is refused instead
(``ClockMovedBackwards``), so a big step never stalls a caller for long; the caller
(the bid path) answers without an id until the clock has caught up.

Worker ids are unique only while they are leased (``ids.worker_lease``). The lease
grants the generator a worker id, a ``valid_until_ms`` and a ``not_before_ms`` (the
highest millisecond a previous holder of that worker id can have used). No id is
issued in a millisecond at or past ``valid_until_ms``, nor at or before
``not_before_ms``; after ``revoke()`` none at all (``LeaseLost``). Losing the lease
stops generation rather than risking a duplicate with the next holder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

EPOCH_MS = 1_704_067_200_000
"""2024-01-01T00:00:00Z in Unix epoch milliseconds."""
TIME_BITS = 41
WORKER_BITS = 10
SEQUENCE_BITS = 12
MAX_WORKER = (1 << WORKER_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
_WORKER_SHIFT = SEQUENCE_BITS
_TIME_SHIFT = SEQUENCE_BITS + WORKER_BITS
_LAST_MS = EPOCH_MS + (1 << TIME_BITS) - 1
_FOREVER_MS = _LAST_MS + 1

DEFAULT_MAX_BACKWARDS_MS = 100


class IdsUnavailable(Exception):
    """No id can be issued right now; the message says why."""


class LeaseLost(IdsUnavailable):
    """The generator holds no valid worker id (never granted, expired or revoked)."""


class ClockMovedBackwards(IdsUnavailable):
    """The clock is further behind the last id's millisecond than the bound allows."""


class WallClock(Protocol):
    def wall_ms(self) -> int: ...


class SnowflakeParts(NamedTuple):
    time_ms: int
    """Unix epoch milliseconds."""
    worker: int
    sequence: int


def compose(time_ms: int, worker: int, sequence: int) -> int:
    """The id of ``(time_ms, worker, sequence)``; raises ValueError out of range."""
    if not EPOCH_MS <= time_ms <= _LAST_MS:
        raise ValueError(f"time {time_ms} ms is outside the Snowflake range")
    if not 0 <= worker <= MAX_WORKER:
        raise ValueError(f"worker must be 0-{MAX_WORKER}, got {worker}")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence must be 0-{MAX_SEQUENCE}, got {sequence}")
    return ((time_ms - EPOCH_MS) << _TIME_SHIFT) | (worker << _WORKER_SHIFT) | sequence


def decode(snowflake: int) -> SnowflakeParts:
    """Time (epoch ms), worker and sequence of an id; ValueError if not a Snowflake."""
    if not 0 <= snowflake < 1 << 63:
        raise ValueError(f"not a 63-bit Snowflake id: {snowflake}")
    return SnowflakeParts(
        time_ms=(snowflake >> _TIME_SHIFT) + EPOCH_MS,
        worker=(snowflake >> _WORKER_SHIFT) & MAX_WORKER,
        sequence=snowflake & MAX_SEQUENCE,
    )


def _short_pause() -> None:
    time.sleep(0.00005)


class Snowflake:
    """The generator of one process. Not thread-safe: one event loop calls it.

    ``Snowflake(clock, worker=7)`` holds worker 7 forever (tools, tests, benchmarks);
    ``Snowflake(clock)`` holds nothing until a lease calls ``grant``.
    ``on_backwards(refused)`` is told once per step back seen (for a metric).
    """

    def __init__(
        self,
        clock: WallClock,
        worker: int | None = None,
        *,
        max_backwards_ms: int = DEFAULT_MAX_BACKWARDS_MS,
        pause: Callable[[], None] = _short_pause,
        on_backwards: Callable[[bool], None] | None = None,
    ) -> None:
        if max_backwards_ms < 0:
            raise ValueError("max_backwards_ms must not be negative")
        self._wall_ms = clock.wall_ms
        self._max_backwards_ms = max_backwards_ms
        self._pause = pause
        self._on_backwards = on_backwards
        self._worker: int | None = None
        self._worker_bits = 0
        self._valid_until = -1  # no id in any millisecond until granted
        self._last_ms = EPOCH_MS - 1
        self._seq = MAX_SEQUENCE
        self._reported_behind_at: int | None = None
        if worker is not None:
            self.grant(worker, _FOREVER_MS)

    @property
    def worker(self) -> int | None:
        """The worker id while one is granted and not revoked."""
        return self._worker

    @property
    def last_ms(self) -> int:
        """The millisecond of the newest id issued (or of the grant's ``not_before``)."""
        return self._last_ms

    def grant(self, worker: int, valid_until_ms: int, not_before_ms: int = 0) -> None:
        """Hold ``worker`` until ``valid_until_ms``; issue nothing at or before ``not_before``."""
        if not 0 <= worker <= MAX_WORKER:
            raise ValueError(f"worker must be 0-{MAX_WORKER}, got {worker}")
        if worker != self._worker:
            # A different worker id: its sequence space restarts after the previous
            # holder's high-water mark.
            self._last_ms = max(not_before_ms, EPOCH_MS - 1)
            self._seq = MAX_SEQUENCE
        elif not_before_ms > self._last_ms:
            self._last_ms, self._seq = not_before_ms, MAX_SEQUENCE
        self._worker = worker
        self._worker_bits = worker << _WORKER_SHIFT
        self._valid_until = min(valid_until_ms, _FOREVER_MS)

    def extend(self, valid_until_ms: int) -> None:
        """A renewal: the worker id stays valid until ``valid_until_ms``."""
        if self._worker is not None:
            self._valid_until = min(valid_until_ms, _FOREVER_MS)

    def revoke(self) -> None:
        """Stop issuing ids at once (the lease is lost or being released)."""
        self._worker = None
        self._valid_until = -1

    def next_id(self) -> int:
        """A new id; raises ``LeaseLost`` or ``ClockMovedBackwards`` when it can't."""
        now = self._wall_ms()
        last = self._last_ms
        if last < now < self._valid_until:
            self._last_ms = now
            self._seq = 0
            return ((now - EPOCH_MS) << _TIME_SHIFT) | self._worker_bits
        seq = self._seq + 1
        if now == last and seq <= MAX_SEQUENCE and now < self._valid_until:
            self._seq = seq
            return ((now - EPOCH_MS) << _TIME_SHIFT) | self._worker_bits | seq
        return self._next_slow(now)

    def _next_slow(self, now: int) -> int:
        while True:
            last = self._last_ms
            if self._worker is None or last >= self._valid_until or now >= self._valid_until:
                raise LeaseLost("no valid worker id lease: ids are not issued")
            if now > last:
                return self.next_id()
            if now < last:
                self._check_behind(last - now)
            if self._seq < MAX_SEQUENCE:
                # Behind (within the bound) or same ms: go on in ``last``, never reuse.
                self._seq += 1
                return ((last - EPOCH_MS) << _TIME_SHIFT) | self._worker_bits | self._seq
            self._pause()  # this millisecond is used up: wait for the next one
            now = self._wall_ms()

    def _check_behind(self, behind_ms: int) -> None:
        refused = behind_ms > self._max_backwards_ms
        if self._reported_behind_at != self._last_ms:
            self._reported_behind_at = self._last_ms
            if self._on_backwards is not None:
                self._on_backwards(refused)
        if refused:
            raise ClockMovedBackwards(
                f"clock is {behind_ms} ms behind the last id (bound {self._max_backwards_ms} ms)"
            )
