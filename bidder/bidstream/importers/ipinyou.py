"""``bidsim import ipinyou``: the iPinYou 2013 RTB dataset (arXiv 1407.7073).

Two layouts, told apart by the first line of each file:

- *raw*: the dataset's per-day impression logs, tab separated, no header, 24 columns:
  ``RAW_COLUMNS``. They carry no click (clicks are separate logs);
- *processed*: what the research tooling (make-ipinyou-data) writes: a header row of
  column names, ``click weekday hour`` then the 24 raw columns. Columns are found by
  name, so their order may differ (the header is the first line naming ``bidid``).

Each row becomes one OpenRTB 2.5 second-price request with one banner impression;
``docs/bidstream.md`` has the mapping. Prices in the dataset are CNY fen (0.01 yuan)
per thousand impressions; the request and the stream carry USD CPM, converted at
``cny_per_usd`` (the ``--cny-per-usd`` flag).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bidder.bidstream.importers.errors import ImportInputError, RowError
from bidder.bidstream.importers.rows import LineReader, Row
from bidder.bidstream.importers.timing import IPINYOU_DIGITS, ipinyou_ms

RAW_COLUMNS = (
    "bidid", "timestamp", "logtype", "ipinyouid", "useragent", "IP", "region", "city",
    "adexchange", "domain", "url", "urlid", "slotid", "slotwidth", "slotheight",
    "slotvisibility", "slotformat", "slotprice", "creative", "bidprice", "payprice",
    "keypage", "advertiser", "usertag",
)  # fmt: skip
PROCESSED_PREFIX = ("click", "weekday", "hour")
HEADER_MARK = "bidid"
"""A first line with this cell is the processed layout's header row."""
NEEDED = ("bidid", "timestamp", "slotwidth", "slotheight", "slotprice", "payprice")
CNY_PER_USD = 6.2
"""Default conversion: about the 2013 average rate, the dataset's year."""
COUNTRY = "CHN"
MISSING = frozenset({"", "null", "NULL", "Na"})

Columns = dict[str, int]


@dataclass(frozen=True, slots=True)
class IpinyouFormat:
    cny_per_usd: float = CNY_PER_USD

    def __post_init__(self) -> None:
        if not self.cny_per_usd > 0:
            raise ValueError(f"--cny-per-usd must be positive, got {self.cny_per_usd}")

    def reader(self, path: Path) -> LineReader:
        return _IpinyouFile(self, path).read


def fen_to_cpm(text: str, cny_per_usd: float) -> float:
    """A dataset price (CNY fen per thousand) as USD CPM, 6 decimals."""
    try:
        fen = float(text)
    except ValueError:
        raise RowError("price", f"price {text!r} is not a number") from None
    if not (math.isfinite(fen) and fen >= 0):
        raise RowError("price", f"price {text!r} is not a non-negative number")
    return round(fen / 100 / cny_per_usd, 6)


def detect(path: Path, fields: list[str]) -> tuple[Columns, bool]:
    """(column index by name, whether this line is a header) from a file's first line."""
    if HEADER_MARK in fields:
        columns = {name: index for index, name in enumerate(fields)}
        absent = [name for name in NEEDED if name not in columns]
        if absent:
            raise ImportInputError(
                f"{path}:1: header row lacks column(s) {', '.join(absent)}"
                " (expected the processed iPinYou layout: click weekday hour bidid ...)"
            )
        return columns, True
    timestamp = fields[1] if len(fields) > 1 else ""
    if len(fields) == len(RAW_COLUMNS) and len(timestamp) == IPINYOU_DIGITS:
        return {name: index for index, name in enumerate(RAW_COLUMNS)}, False
    raise ImportInputError(
        f"{path}:1: not an iPinYou log: expected a header row naming the columns, {HEADER_MARK}"
        f" among them (processed layout), or {len(RAW_COLUMNS)} tab-separated columns, the second a"
        f" yyyyMMddHHmmssSSS timestamp (raw impression log); found {len(fields)} column(s)"
    )


def to_row(get: Callable[[str], str | None], cny_per_usd: float) -> Row:
    """One dataset row (``get(column)``: its text, None when absent) as a stream row."""
    bidid, width, height = get("bidid"), _size(get("slotwidth")), _size(get("slotheight"))
    if bidid is None:
        raise RowError("bid_id", "no bid id")
    pay, click = get("payprice"), get("click")
    if click not in (None, "0", "1"):
        raise RowError("click", f"click {click!r} is not 0 or 1")
    request: dict[str, Any] = _drop_none(
        {
            "id": bidid,
            "at": 2,
            "cur": ["USD"],
            "imp": [_imp(get, width, height, cny_per_usd)],
            "site": _drop_none({"domain": get("domain"), "page": get("url")}),
            "device": _device(get),
            "user": _user(get) or None,
        }
    )
    return Row(
        request=request,
        ssp=f"adx-{get('adexchange') or 'unknown'}",
        ts=ipinyou_ms(get("timestamp") or ""),
        market_price=None if pay is None else fen_to_cpm(pay, cny_per_usd),
        click=None if click is None else click == "1",
    )


class _IpinyouFile:
    def __init__(self, options: IpinyouFormat, path: Path) -> None:
        self._options, self._path = options, path
        self._columns: Columns | None = None

    def read(self, lineno: int, line: bytes) -> Row | None:
        fields = line.decode("utf-8", errors="replace").split("\t")
        if self._columns is None:
            self._columns, header = detect(self._path, fields)
            if header:
                return None
        columns = self._columns
        if len(fields) != len(columns):
            raise RowError("columns", f"{len(fields)} columns, expected {len(columns)}")

        def get(name: str) -> str | None:
            index = columns.get(name)
            value = None if index is None else fields[index].strip()
            return None if value in MISSING else value

        return to_row(get, self._options.cny_per_usd)


def _imp(
    get: Callable[[str], str | None], width: int, height: int, cny_per_usd: float
) -> dict[str, Any]:
    floor = get("slotprice")
    return _drop_none(
        {
            "id": "1",
            "tagid": get("slotid"),
            "banner": {"w": width, "h": height, "format": [{"w": width, "h": height}]},
            "bidfloor": 0.0 if floor is None else fen_to_cpm(floor, cny_per_usd),
            "bidfloorcur": "USD",
        }
    )


def _device(get: Callable[[str], str | None]) -> dict[str, Any]:
    ip = get("IP")
    geo = _drop_none({"country": COUNTRY, "region": get("region"), "city": get("city")})
    # The dataset masks the last octet ("1.2.3.*"); OpenRTB truncates IPs with a zero.
    return _drop_none(
        {"ua": get("useragent"), "ip": None if ip is None else ip.replace("*", "0"), "geo": geo}
    )


def _user(get: Callable[[str], str | None]) -> dict[str, Any]:
    tags = [tag for tag in (get("usertag") or "").split(",") if tag.strip()]
    segments = [{"id": tag.strip()} for tag in tags]
    data = [{"id": "ipinyou-usertags", "name": "ipinyou", "segment": segments}]
    return _drop_none({"id": get("ipinyouid"), "data": data if segments else None})


def _size(text: str | None) -> int:
    if text is None or not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise RowError("slot_size", f"slot size {text!r} is not a positive integer")
    return int(text)


def _drop_none(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if value is not None}
