from __future__ import annotations

import contextlib

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.ledger import LedgerEntry, LedgerFormatError, cost_of, decode_entry

_IDS = st.text(min_size=1, max_size=40)
_COUNTS = st.integers(min_value=0, max_value=2**63 - 1)

entries = st.builds(
    LedgerEntry,
    ledger_id=_COUNTS,
    kind=st.sampled_from(["win", "bill"]),
    campaign_id=_IDS,
    advertiser=_IDS,
    creative_id=_IDS,
    imp_id=_IDS,
    bid_id=_IDS,
    price_cpm_micros=_COUNTS,
    cost_micros=_COUNTS,
    node=st.integers(min_value=0, max_value=1023),
    ts_ms=_COUNTS,
    caps_unchecked=st.booleans(),
)


@given(entries)
def test_an_entry_round_trips_through_its_encoding(entry: LedgerEntry) -> None:
    assert decode_entry(entry.encode()) == entry


@given(st.integers(min_value=0, max_value=10**12))
def test_cost_is_the_cpm_thousandth_rounded_up(price: int) -> None:
    cost = cost_of(price)
    assert cost * 1000 >= price
    assert (cost - 1) * 1000 < price or cost == 0


def test_cost_of_exact_thousandths_is_exact() -> None:
    assert (cost_of(0), cost_of(1000), cost_of(1001), cost_of(2_500_000)) == (0, 1, 2, 2500)


def _doc() -> dict[str, object]:
    entry = LedgerEntry(7, "win", "c", "a", "cr", "1", "b", 1500, 2, 3, 1_700_000_000_000)
    doc: dict[str, object] = orjson.loads(entry.encode())
    return doc


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "refund"},
        {"cost_micros": -1},
        {"cost_micros": 1.5},
        {"ledger_id": "7"},
        {"node": True},
        {"campaign_id": 3},
        {"extra": 1},
    ],
    ids=["kind", "negative", "float", "string-id", "bool", "int-string", "extra-field"],
)
def test_a_malformed_record_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(LedgerFormatError):
        decode_entry(orjson.dumps({**_doc(), **change}))


def test_a_record_missing_a_field_is_refused() -> None:
    doc = _doc()
    del doc["advertiser"]
    with pytest.raises(LedgerFormatError):
        decode_entry(orjson.dumps(doc))


@given(st.binary(max_size=200))
def test_decoding_arbitrary_bytes_raises_only_the_format_error(data: bytes) -> None:
    with contextlib.suppress(LedgerFormatError):
        decode_entry(data)


def test_an_entry_without_the_unchecked_mark_is_unmarked() -> None:
    doc = _doc()
    del doc["caps_unchecked"]
    assert decode_entry(orjson.dumps(doc)).caps_unchecked is False


def test_the_unchecked_mark_must_be_a_boolean() -> None:
    with pytest.raises(LedgerFormatError, match="caps_unchecked"):
        decode_entry(orjson.dumps({**_doc(), "caps_unchecked": 1}))
