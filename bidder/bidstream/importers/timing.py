"""Times of recorded requests: parsing them, and turning them into send offsets.

A stream line has two times (docs/bidstream.md): ``ts``, the auction's wall clock in
epoch milliseconds, and ``t_ms``, the send offset from the stream's start, which never
decreases. Imports take ``ts`` from the record and derive ``t_ms`` from it
(``Timeline``), or spread the lines at a fixed rate when the record has no time.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from bidder.bidstream.importers.errors import RowError

IPINYOU_DIGITS = 17


def epoch_ms(value: Any) -> int:
    """Epoch milliseconds from a number, a string of digits, or an RFC 3339 timestamp.

    Raises RowError("time", ...) for anything else, and for an RFC 3339 time without
    its UTC offset (a local time names no instant).
    """
    if isinstance(value, bool):
        raise RowError("time", f"time is a boolean ({value})")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise RowError("time", f"time {value!r} is not epoch milliseconds")
        return int(value)
    if not isinstance(value, str) or not value:
        raise RowError("time", f"time {value!r} is neither epoch milliseconds nor RFC 3339")
    if value.isascii() and value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise RowError(
            "time", f"time {value!r} is neither epoch milliseconds nor RFC 3339"
        ) from None
    if parsed.tzinfo is None:
        raise RowError("time", f"time {value!r} has no UTC offset")
    return _ms(parsed)


def ipinyou_ms(text: str) -> int:
    """``yyyyMMddHHmmssSSS`` (the dataset's clock, kept as the simulated day's) in epoch ms."""
    if len(text) != IPINYOU_DIGITS or not (text.isascii() and text.isdigit()):
        raise RowError("timestamp", f"timestamp {text!r} is not yyyyMMddHHmmssSSS")
    try:
        parsed = datetime(
            int(text[0:4]),
            int(text[4:6]),
            int(text[6:8]),
            int(text[8:10]),
            int(text[10:12]),
            int(text[12:14]),
            int(text[14:17]) * 1000,
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise RowError("timestamp", f"timestamp {text!r}: {exc}") from None
    return _ms(parsed)


def _ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


class Timeline:
    """Send offsets for records in file order.

    From recorded times: the first record is offset 0, each later one its distance from
    the first, never less than the offset before it (a record timed before an earlier
    one is *late*: sent right after it). At a rate: record i goes at i / rate and its
    ``ts`` is ``start_ms`` plus that offset.
    """

    def __init__(self, rate: float | None = None, start_ms: int = 0) -> None:
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"--rate must be a positive number, got {rate}")
        self._rate, self._start_ms = rate, start_ms
        self._origin: int | None = None
        self._last_t = self._count = 0

    def place(self, ts: int | None) -> tuple[int, int, bool]:
        """(t_ms, ts, late) of the next record; ``ts`` None only when spreading at a rate."""
        if self._rate is not None:
            t_ms = math.floor(self._count * 1000 / self._rate)
            self._count += 1
            return t_ms, self._start_ms + t_ms, False
        if ts is None:
            raise ValueError("a record without a time needs a rate")
        if self._origin is None:
            self._origin = ts
        offset = ts - self._origin
        late = offset < self._last_t
        self._last_t = max(offset, self._last_t)
        return self._last_t, ts, late
