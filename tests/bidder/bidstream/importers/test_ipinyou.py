"""iPinYou rows (both layouts) become OpenRTB 2.5 requests with their recorded price."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.importers.errors import ImportInputError, RowError
from bidder.bidstream.importers.ipinyou import MISSING, IpinyouFormat, fen_to_cpm
from bidder.bidstream.importers.rows import Row
from tests.bidder.bidstream.importers.ipinyou_rows import (
    DatasetRow,
    processed_text,
    raw_text,
    stamp,
)

FILE = Path("imp.20130606.txt")
printable = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=",")
text = st.text(printable, min_size=1, max_size=12).filter(lambda value: value not in MISSING)
fen = st.integers(0, 100_000).map(str)


def rows_of(content: str, fmt: IpinyouFormat | None = None) -> list[Row | None]:
    read = (fmt or IpinyouFormat()).reader(FILE)
    return [read(n, line.encode()) for n, line in enumerate(content.splitlines(), start=1)]


def raw_row(row: DatasetRow) -> Row:
    [converted] = rows_of(raw_text([row]))
    assert converted is not None
    return converted


dataset_rows = st.builds(
    DatasetRow,
    bidid=text,
    timestamp=st.datetimes(min_value=datetime(2000, 1, 1)).map(stamp),
    ipinyouid=text,
    region=st.integers(0, 400).map(str),
    city=st.integers(0, 400).map(str),
    adexchange=st.integers(1, 4).map(str),
    domain=text,
    slotwidth=st.integers(1, 2000).map(str),
    slotheight=st.integers(1, 2000).map(str),
    slotprice=fen,
    payprice=fen,
    usertag=st.lists(st.integers(10000, 20000).map(str), max_size=5).map(",".join),
    click=st.sampled_from(["0", "1"]),
)


@given(dataset_rows)
def test_both_layouts_give_the_same_request(row: DatasetRow) -> None:
    raw = raw_row(row)
    header, processed = rows_of(processed_text([row]))
    assert header is None
    assert processed is not None
    assert processed.request == raw.request
    assert (processed.ts, processed.ssp, processed.market_price) == (
        raw.ts,
        raw.ssp,
        raw.market_price,
    )
    assert processed.click == (row.click == "1") and raw.click is None


@given(dataset_rows)
def test_a_row_maps_to_the_documented_fields(row: DatasetRow) -> None:
    converted = raw_row(row)
    request, [imp] = converted.request, converted.request["imp"]
    w, h = int(row.slotwidth), int(row.slotheight)
    assert request["id"] == row.bidid and request["at"] == 2 and request["cur"] == ["USD"]
    assert imp["banner"] == {"w": w, "h": h, "format": [{"w": w, "h": h}]}
    assert imp["bidfloor"] == fen_to_cpm(row.slotprice, 6.2) and imp["bidfloorcur"] == "USD"
    assert request["site"]["domain"] == row.domain
    geo = request["device"]["geo"]
    assert geo == {"country": "CHN", "region": row.region, "city": row.city}
    assert request["user"]["id"] == row.ipinyouid
    tags = [s["id"] for d in request["user"].get("data", []) for s in d["segment"]]
    assert tags == [t for t in row.usertag.split(",") if t]
    assert converted.ssp == f"adx-{row.adexchange}"
    assert converted.market_price == fen_to_cpm(row.payprice, 6.2)


@given(st.integers(0, 10**7), st.floats(0.01, 1000))
def test_a_price_is_fen_per_cpm_over_100_and_the_rate(fen_value: int, rate: float) -> None:
    # Rounded to 6 decimals: at most half a millionth off, and the floats' own spacing.
    expected = fen_value / 100 / rate
    assert abs(fen_to_cpm(str(fen_value), rate) - expected) <= 5e-7 + 2 * math.ulp(expected)


def test_the_documented_examples_of_the_conversion() -> None:
    assert fen_to_cpm("50", 6.2) == 0.080645
    assert fen_to_cpm("300", 6.2) == 0.483871
    assert fen_to_cpm("300", 100) == 0.03  # --cny-per-usd 100: fen read as US cents


def test_the_rate_flag_changes_every_price() -> None:
    [row] = rows_of(raw_text([DatasetRow(slotprice="100", payprice="200")]), IpinyouFormat(2.0))
    assert row is not None and row.market_price == 1.0
    assert row.request["imp"][0]["bidfloor"] == 0.5


def test_null_fields_are_left_out_and_the_masked_ip_is_zeroed() -> None:
    row = raw_row(DatasetRow(ipinyouid="null", usertag="null", domain="null", payprice="null"))
    assert "user" not in row.request and "domain" not in row.request["site"]
    assert row.market_price is None
    assert row.request["device"]["ip"] == "115.45.195.0"


def test_the_timestamp_is_read_as_the_market_clock() -> None:
    row = raw_row(DatasetRow(timestamp="20130606000104828"))
    assert row.ts == 1_370_476_864_828  # 2013-06-06T00:01:04.828Z


def test_processed_columns_are_found_by_name_in_any_order() -> None:
    content = processed_text([DatasetRow(payprice="77")])
    header, line = (part.split("\t") for part in content.splitlines())
    order = list(reversed(range(len(header))))
    swapped = "\n".join("\t".join(cells[i] for i in order) for cells in (header, line))
    rows = rows_of(swapped)
    assert rows[1] is not None and rows[1].market_price == fen_to_cpm("77", 6.2)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"timestamp": "2013-06-06 12:00"}, "timestamp"),
        ({"timestamp": "20131306120000000"}, "timestamp"),
        ({"slotwidth": "0"}, "slot_size"),
        ({"slotheight": "wide"}, "slot_size"),
        ({"payprice": "-3"}, "price"),
        ({"slotprice": "cheap"}, "price"),
        ({"bidid": "null"}, "bid_id"),
    ],
)
def test_a_bad_row_is_a_row_error_with_its_reason(change: dict[str, str], reason: str) -> None:
    good = raw_text([DatasetRow()])
    bad = raw_text([replace(DatasetRow(), **change)])
    read = IpinyouFormat().reader(FILE)
    assert read(1, good.strip().encode()) is not None
    with pytest.raises(RowError) as caught:
        read(2, bad.strip().encode())
    assert caught.value.reason == reason


def test_a_row_with_other_columns_than_the_layout_is_a_row_error() -> None:
    read = IpinyouFormat().reader(FILE)
    read(1, raw_text([DatasetRow()]).strip().encode())
    with pytest.raises(RowError, match="23 columns, expected 24") as caught:
        read(2, "\t".join(DatasetRow().raw_fields()[:-1]).encode())
    assert caught.value.reason == "columns"


@pytest.mark.parametrize(
    "first",
    ['{"id": "r", "imp": []}', "a\tb\tc", "click\tweekday\thour\tbidid\ttimestamp"],
)
def test_a_first_line_in_neither_layout_is_an_input_error(first: str) -> None:
    with pytest.raises(ImportInputError, match=r"imp\.20130606\.txt:1: "):
        IpinyouFormat().reader(FILE)(1, first.encode())


def test_a_non_positive_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="--cny-per-usd"):
        IpinyouFormat(cny_per_usd=0)
