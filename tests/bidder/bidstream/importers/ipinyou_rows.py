"""Rows in the two documented iPinYou layouts, written by tests (the dataset is not bundled).

Column order: the raw impression log's 24 columns (arXiv 1407.7073; make-ipinyou-data's
``schema.txt``); the processed layout puts ``click weekday hour`` and a header row first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from bidder.bidstream.importers.ipinyou import PROCESSED_PREFIX, RAW_COLUMNS

START = datetime(2013, 6, 6, 12, 0, 0)


@dataclass(frozen=True)
class DatasetRow:
    bidid: str = "bid-0"
    timestamp: str = "20130606120000000"
    logtype: str = "1"
    ipinyouid: str = "Vhk7ZAnxDIuOjCn"
    useragent: str = "Mozilla/5.0 (Windows NT 6.1; WOW64)"
    ip: str = "115.45.195.*"
    region: str = "216"
    city: str = "233"
    adexchange: str = "1"
    domain: str = "trqRTuNOS1pXsKbS"
    url: str = "c6c8e2b2f5c6d0fa"
    urlid: str = "null"
    slotid: str = "mm_10075660_3500949_11453278"
    slotwidth: str = "300"
    slotheight: str = "250"
    slotvisibility: str = "FirstView"
    slotformat: str = "Na"
    slotprice: str = "0"
    creative: str = "77819d3e0b3467fe5c7b16d68ad923a1"
    bidprice: str = "300"
    payprice: str = "50"
    keypage: str = "null"
    advertiser: str = "1458"
    usertag: str = "10006,10024"
    click: str = "0"

    def raw_fields(self) -> list[str]:
        values = {**self.__dict__, "IP": self.ip}
        return [values[name] for name in RAW_COLUMNS]

    def processed_fields(self) -> list[str]:
        stamp = datetime.strptime(self.timestamp[:8], "%Y%m%d")
        weekday = str(int(stamp.strftime("%w")))
        return [self.click, weekday, self.timestamp[8:10], *self.raw_fields()]


def stamp(moment: datetime) -> str:
    """``yyyyMMddHHmmssSSS``."""
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def spaced(rows: Iterable[DatasetRow], gap_ms: int, start: datetime = START) -> list[DatasetRow]:
    """The rows with bid ids and timestamps ``gap_ms`` apart, in order."""
    return [
        replace(row, bidid=f"bid-{i}", timestamp=stamp(start + timedelta(milliseconds=gap_ms * i)))
        for i, row in enumerate(rows)
    ]


def raw_text(rows: Iterable[DatasetRow]) -> str:
    return "".join("\t".join(row.raw_fields()) + "\n" for row in rows)


def processed_text(rows: Iterable[DatasetRow]) -> str:
    header = "\t".join([*PROCESSED_PREFIX, *RAW_COLUMNS]) + "\n"
    return header + "".join("\t".join(row.processed_fields()) + "\n" for row in rows)


def write_raw(path: Path, rows: Iterable[DatasetRow]) -> Path:
    path.write_text(raw_text(rows))
    return path


def write_processed(path: Path, rows: Iterable[DatasetRow]) -> Path:
    path.write_text(processed_text(rows))
    return path
