"""BidRequest JSON lines: the time and SSP fields, and lines that are not requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.importers.errors import ImportInputError, RowError
from bidder.bidstream.importers.openrtb import OpenRtbFormat, field_value

FILE = Path("bids.jsonl")
GOOD = {"id": "r1", "imp": [{"id": "1"}], "ext": {"ts": 1767571200000, "ssp": "x"}}


def read(fmt: OpenRtbFormat, *docs: Any) -> list[Any]:
    reader = fmt.reader(FILE)
    lines = [d if isinstance(d, bytes) else orjson.dumps(d) for d in docs]
    return [reader(n, line) for n, line in enumerate(lines, start=1)]


def test_a_dotted_field_is_found_in_nested_objects() -> None:
    assert field_value({"ext": {"a": {"b": 3}}}, "ext.a.b") == 3
    with pytest.raises(RowError, match=r"no field 'ext\.a\.c'"):
        field_value({"ext": {"a": {"b": 3}}}, "ext.a.c")


@given(
    st.dictionaries(
        st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5), max_size=4
    ),
    st.integers(0, 2**50),
)
def test_a_request_is_kept_as_logged(extra: dict[str, Any], ts: int) -> None:
    doc = {**extra, "imp": [{"id": "1"}], "ts": ts}
    [row] = read(OpenRtbFormat(time_field="ts", ssp="exchange-a"), doc)
    assert row.request == doc and row.ts == ts and row.ssp == "exchange-a"


def test_the_time_may_be_rfc3339_and_the_ssp_a_number() -> None:
    doc = {"imp": [], "received": "2026-01-05T00:00:01.250+01:00", "src": 7}
    [row] = read(OpenRtbFormat(time_field="received", ssp_field="src"), doc)
    assert (row.ts, row.ssp) == (1767571201250 - 3_600_000, "7")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"{not json", "not_json"),
        (b"[1, 2]", "not_bid_request"),
        (orjson.dumps({"id": "r", "imp": {}}), "not_bid_request"),
        (orjson.dumps({"imp": [], "ext": {"ssp": "x"}}), "missing_field"),
        (orjson.dumps({"imp": [], "ext": {"ts": "soon", "ssp": "x"}}), "time"),
        (orjson.dumps({"imp": [], "ext": {"ts": 1, "ssp": ""}}), "ssp"),
    ],
)
def test_a_bad_later_line_is_a_row_error(bad: bytes, reason: str) -> None:
    reader = OpenRtbFormat(time_field="ext.ts", ssp_field="ext.ssp").reader(FILE)
    reader(1, orjson.dumps(GOOD))
    with pytest.raises(RowError) as caught:
        reader(2, bad)
    assert caught.value.reason == reason


def test_a_bad_first_line_is_an_input_error_naming_file_and_line() -> None:
    reader = OpenRtbFormat(time_field="ext.ts", ssp="x").reader(FILE)
    with pytest.raises(ImportInputError, match=r"^bids\.jsonl:1: .*no field 'ext\.ts'"):
        reader(1, orjson.dumps({"imp": []}))


@pytest.mark.parametrize(
    "options",
    [{}, {"ssp": "a", "ssp_field": "b"}, {"ssp": " "}, {"ssp": "a", "time_field": "."}],
)
def test_ssp_options_need_exactly_one_non_empty(options: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="--"):
        OpenRtbFormat(**options)
