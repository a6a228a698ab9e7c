"""When each request should be sent: intended send offsets for an open-loop replay.

Pure: turns stream records into ``(offset_s, record)`` pairs, offsets in seconds from
the start of the replay, non-decreasing. No clock, no I/O.

Pacing modes:

``speed``  keep the recorded gaps, scaled: offset = ``t_ms / speed`` (2.0 = twice as
           fast). This is the default (speed 1.0: real time).
``rate``   ignore the recorded gaps: request ``i`` (0-based) goes at ``i / rate``.

``duration_s`` cuts the schedule off: nothing is scheduled at or after that much
intended time. When a duration is given and the stream ends before it, the stream is
**looped** until the cut-off:

- with ``rate`` the count simply continues, so spacing stays ``1 / rate``;
- with ``speed`` each pass starts one mean gap after the previous pass's last record
  (mean gap = recorded span / (n - 1)), so a looped stream keeps its average rate. A
  stream with one record, or all records at the same ``t_ms``, has no rate to keep and
  is not looped.

Looping re-reads a re-iterable source (a list, or an object whose ``__iter__`` opens
the file again); a one-shot iterator is cached in memory during its first pass, and only
when a duration is set.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from bidder.bidstream.stream import StreamRecord

Scheduled = tuple[float, StreamRecord]


@dataclass(frozen=True, slots=True)
class Pacing:
    """How fast to replay; see the module docstring."""

    speed: float = 1.0
    rate: float | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be a positive finite number, got {value!r}"
            for name, value in (
                ("speed", self.speed),
                ("rate", self.rate),
                ("duration_s", self.duration_s),
            )
            if value is not None and not (math.isfinite(value) and value > 0)
        ]
        if problems:
            raise ValueError("; ".join(problems))


def schedule(records: Iterable[StreamRecord], pacing: Pacing) -> Iterator[Scheduled]:
    """Yield ``(offset_s, record)`` in send order; offsets never decrease."""
    passes = _passes(records, loop=pacing.duration_s is not None)
    timed = (
        _by_rate(passes, pacing.rate)
        if pacing.rate is not None
        else _by_speed(passes, pacing.speed)
    )
    return _cut(timed, pacing.duration_s)


def loop_period_ms(first_ms: int, last_ms: int, count: int) -> float | None:
    """Recorded time one pass takes when looped, or None when the stream has no rate."""
    span = last_ms - first_ms
    if count < 2 or span <= 0:
        return None
    return span * count / (count - 1)


def _by_rate(passes: Iterable[tuple[int, StreamRecord]], rate: float) -> Iterator[Scheduled]:
    for i, (_, record) in enumerate(passes):
        yield i / rate, record


def _by_speed(passes: Iterable[tuple[int, StreamRecord]], speed: float) -> Iterator[Scheduled]:
    first = last = count = 0
    period: float | None = None
    for loop_index, record in passes:
        if loop_index == 0:
            first = record.t_ms if count == 0 else first
            last, count = record.t_ms, count + 1
            yield record.t_ms / speed / 1000, record
            continue
        period = loop_period_ms(first, last, count) if period is None else period
        if period is None:
            return
        yield (loop_index * period + record.t_ms) / speed / 1000, record


def _passes(records: Iterable[StreamRecord], loop: bool) -> Iterator[tuple[int, StreamRecord]]:
    """(pass index, record); repeats the source forever when ``loop`` (the cut stops it)."""
    one_shot = iter(records) is records
    cache: list[StreamRecord] | None = [] if loop and one_shot else None
    for record in records:
        if cache is not None:
            cache.append(record)
        yield 0, record
    source: Iterable[StreamRecord] = cache if cache is not None else records
    for loop_index in itertools.count(1) if loop else ():
        empty = True
        for record in source:
            empty = False
            yield loop_index, record
        if empty:  # nothing to loop; without this an empty pass would spin forever
            return


def _cut(timed: Iterator[Scheduled], duration_s: float | None) -> Iterator[Scheduled]:
    latest = 0.0
    for offset, record in timed:
        # Float rounding across loop boundaries must never make time go backwards.
        latest = max(latest, offset)
        if duration_s is not None and latest >= duration_s:
            return
        yield latest, record
