"""Bidstream files: JSON Lines, optionally gzip, one auction request per line.

Format (documented for users in docs/bidstream.md)::

    {"t_ms": 0, "ts": 1767254400000, "ssp": "ssp-alpha", "request": {...}}
    {"t_ms": 3, "ts": 1767254400180, "ssp": "ssp-beta",  "raw": "{\\"id\\": 1,"}

``t_ms``   send offset in milliseconds from the start of the stream (integer, non-decreasing)
``ts``     simulated wall-clock time of the auction, epoch milliseconds (what the
           pacing tools use to place a request in the day)
``ssp``    the supply partner the request came through
``request`` the OpenRTB BidRequest object, or
``raw``    a body sent byte-for-byte as UTF-8 (deliberately malformed input)
``market_price`` optional: the recorded clearing price of the auction, CPM in the
           request's currency (imported logs); the replayer's exchange settles against it
``click``  optional: whether the recorded impression was clicked (imported logs)

A path ending in ``.gz`` is gzip-compressed. Writing is deterministic: sorted keys,
gzip mtime 0, so the same records give the same bytes.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson


class StreamFormatError(ValueError):
    """A bidstream line is not in the documented format; names file and line."""


@dataclass(frozen=True, slots=True)
class StreamRecord:
    t_ms: int
    ts: int
    ssp: str
    body: bytes
    """The exact HTTP body to send."""
    market_price: float | None = None
    """The recorded clearing price (CPM), when the line carries one."""
    click: bool | None = None
    """The recorded click, when the line carries one."""


def encode_record(
    t_ms: int,
    ts: int,
    ssp: str,
    request: Any = None,
    raw: str | None = None,
    *,
    market_price: float | None = None,
    click: bool | None = None,
) -> bytes:
    """One stream line (with newline) for a request object or a raw body."""
    line: dict[str, Any] = {"t_ms": t_ms, "ts": ts, "ssp": ssp}
    if raw is not None:
        line["raw"] = raw
    else:
        line["request"] = request
    if market_price is not None:
        line["market_price"] = market_price
    if click is not None:
        line["click"] = click
    return orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n"


def write_stream(path: Path, lines: Iterable[bytes]) -> int:
    """Write encoded lines to ``path`` (gzip when it ends in .gz); returns the count."""
    count = 0
    with _open_write(path) as out:
        for line in lines:
            out.write(line)
            count += 1
    return count


class StreamFile:
    """A bidstream file, read lazily in file order each time it is iterated.

    Holds no records: a replay of a stream larger than memory reads each line as it is
    due, and passes over the file again where it needs another pass (a looped replay).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[StreamRecord]:
        return read_stream(self.path)


def read_stream(path: Path) -> Iterator[StreamRecord]:
    """Yield records in file order; raises StreamFormatError naming the bad line."""
    with _open_read(path) as src:
        last_t = 0
        for lineno, line in _numbered_lines(src, path):
            if not line.strip():
                continue
            record = _decode_line(line, path, lineno)
            if record.t_ms < last_t:
                raise StreamFormatError(
                    f"{path}:{lineno}: t_ms goes backwards ({record.t_ms} < {last_t})"
                )
            last_t = record.t_ms
            yield record


def _numbered_lines(src: io.BufferedIOBase, path: Path) -> Iterator[tuple[int, bytes]]:
    """Lines with their numbers; a corrupt or truncated gzip file is a StreamFormatError."""
    lineno = 0
    try:
        for lineno, line in enumerate(src, start=1):
            yield lineno, line
    except (OSError, EOFError, zlib.error) as exc:
        raise StreamFormatError(f"{path}: unreadable after line {lineno} ({exc})") from None


def _decode_line(line: bytes, path: Path, lineno: int) -> StreamRecord:
    where = f"{path}:{lineno}"
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise StreamFormatError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise StreamFormatError(f"{where}: a line must be a JSON object")
    t_ms, ts, ssp = obj.get("t_ms"), obj.get("ts", 0), obj.get("ssp")
    if not isinstance(t_ms, int) or isinstance(t_ms, bool) or t_ms < 0:
        raise StreamFormatError(f"{where}: field 't_ms' must be a non-negative integer")
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise StreamFormatError(f"{where}: field 'ts' must be an integer (epoch ms)")
    if not isinstance(ssp, str) or not ssp:
        raise StreamFormatError(f"{where}: field 'ssp' must be a non-empty string")
    if "raw" in obj:
        if not isinstance(obj["raw"], str):
            raise StreamFormatError(f"{where}: field 'raw' must be a string")
        body = obj["raw"].encode()
    elif "request" in obj:
        body = orjson.dumps(obj["request"])
    else:
        raise StreamFormatError(f"{where}: a line needs 'request' or 'raw'")
    price, click = obj.get("market_price"), obj.get("click")
    if price is not None and not _is_price(price):
        raise StreamFormatError(f"{where}: field 'market_price' must be a number >= 0 (CPM)")
    if click is not None and not isinstance(click, bool):
        raise StreamFormatError(f"{where}: field 'click' must be true or false")
    return StreamRecord(
        t_ms=t_ms,
        ts=ts,
        ssp=ssp,
        body=body,
        market_price=None if price is None else float(price),
        click=click,
    )


def _is_price(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value >= 0


def _open_read(path: Path) -> io.BufferedIOBase:
    try:
        if str(path).endswith(".gz"):
            return gzip.open(path, "rb")
        return open(path, "rb")
    except OSError as exc:
        raise StreamFormatError(f"{path}: cannot open ({exc.strerror})") from None


@contextlib.contextmanager
def _open_write(path: Path) -> Iterator[io.BufferedIOBase]:
    with open(path, "wb") as raw:
        if not str(path).endswith(".gz"):
            yield raw
            return
        # mtime=0 and no file name in the header keep the bytes reproducible.
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            yield gz
