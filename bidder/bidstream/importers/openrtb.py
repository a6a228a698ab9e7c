"""``bidsim import openrtb``: BidRequest JSON, one per line, as exchanges and bidders log them.

The request time comes from a field named by a dotted path (``ts``, ``ext.received_at``)
holding epoch milliseconds or an RFC 3339 timestamp, or from a rate when the log has
none; the SSP from another field or one fixed name. A line that is not a JSON object
with an ``imp`` array is skipped; when that is the file's first line, the file is not
OpenRTB JSON lines (or the options do not fit it) and the import stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bidder.bidstream.importers.errors import ImportInputError, RowError
from bidder.bidstream.importers.rows import LineReader, Row
from bidder.bidstream.importers.timing import epoch_ms


@dataclass(frozen=True, slots=True)
class OpenRtbFormat:
    time_field: str | None = None
    """Dotted path of the request time; None: the import spreads lines at a rate."""
    ssp_field: str | None = None
    ssp: str | None = None
    """The SSP of every line, when no field names it."""

    def __post_init__(self) -> None:
        if (self.ssp_field is None) == (self.ssp is None):
            raise ValueError("give exactly one of --ssp-field and --ssp")
        for name in ("time_field", "ssp_field", "ssp"):
            value = getattr(self, name)
            if value is not None and not value.strip(". "):
                raise ValueError(f"--{name.replace('_', '-')} must not be empty")

    def reader(self, path: Path) -> LineReader:
        return _OpenRtbFile(self, path).read


def field_value(doc: dict[str, Any], dotted: str) -> Any:
    """The value at ``a.b.c`` in nested objects; RowError when a step is missing."""
    value: Any = doc
    for step in dotted.split("."):
        if not isinstance(value, dict) or step not in value:
            raise RowError("missing_field", f"no field {dotted!r}")
        value = value[step]
    return value


class _OpenRtbFile:
    def __init__(self, options: OpenRtbFormat, path: Path) -> None:
        self._options, self._path, self._first = options, path, True

    def read(self, lineno: int, line: bytes) -> Row:
        try:
            row = self._convert(line)
        except RowError as exc:
            if self._first:
                raise ImportInputError(
                    f"{self._path}:{lineno}: not an OpenRTB JSON-lines file for these"
                    f" options ({exc.detail})"
                ) from None
            raise
        self._first = False
        return row

    def _convert(self, line: bytes) -> Row:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise RowError("not_json", f"not JSON ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("imp"), list):
            raise RowError("not_bid_request", "not a BidRequest (an object with an imp array)")
        options = self._options
        ts = None if options.time_field is None else epoch_ms(field_value(doc, options.time_field))
        ssp = options.ssp if options.ssp is not None else _ssp(doc, options.ssp_field or "")
        return Row(request=doc, ssp=ssp, ts=ts)


def _ssp(doc: dict[str, Any], dotted: str) -> str:
    value = field_value(doc, dotted)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise RowError("ssp", f"SSP field {dotted!r} is {value!r}, not a non-empty string")
    return value
