"""The auction identity for dedup: ``source.tid`` as the parser reads it, in every shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.generator import generate
from bidder.bidstream.stream import read_stream
from bidder.openrtb.request import InvalidRequest, auction_source, parse_bid_request
from bidder.supply.path import MAX_TID_CHARS, auction_id

SCHAIN = {"ver": "1.0", "complete": 1, "nodes": [{"asi": "ssp.example", "sid": "p1", "hp": 1}]}
TIDS = st.text(min_size=0, max_size=2 * MAX_TID_CHARS)


def request(**extra: Any) -> dict[str, Any]:
    return {"id": "r1", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}], **extra}


def parse(doc: dict[str, Any]) -> Any:
    return parse_bid_request(json.dumps(doc).encode())


@given(TIDS)
def test_the_26_shape_gives_the_tid_and_the_chain(tid: str) -> None:
    parsed = parse(request(source={"tid": tid, "schain": SCHAIN}))
    assert parsed.tid == (tid or None)
    assert parsed.schain == SCHAIN


@given(TIDS)
def test_the_25_shape_gives_the_tid_and_the_ext_chain(tid: str) -> None:
    parsed = parse(request(source={"tid": tid, "ext": {"schain": SCHAIN}}))
    assert parsed.tid == (tid or None)
    assert parsed.schain == SCHAIN


@given(TIDS)
def test_a_pre_25_source_extension_still_names_the_auction(tid: str) -> None:
    assert parse(request(ext={"source": {"tid": tid}})).tid == (tid or None)


def test_the_source_object_wins_over_the_legacy_extension() -> None:
    doc = request(source={"tid": "new"}, ext={"source": {"tid": "old"}})
    assert parse(doc).tid == "new"


@pytest.mark.parametrize("extra", [{}, {"source": {}}, {"ext": {"source": "x"}}, {"ext": []}])
def test_a_request_without_a_tid_has_none(extra: dict[str, Any]) -> None:
    assert parse(request(**extra)).tid is None


@given(
    st.one_of(
        st.integers(), st.booleans(), st.lists(st.text()), st.dictionaries(st.text(), st.text())
    )
)
def test_a_tid_of_the_wrong_type_is_an_invalid_request(tid: Any) -> None:
    with pytest.raises(InvalidRequest, match="tid"):
        parse(request(source={"tid": tid}))


@given(TIDS)
def test_only_a_tid_of_1_to_128_characters_is_a_dedup_identity(tid: str) -> None:
    assert auction_id(tid) == (tid if 0 < len(tid) <= MAX_TID_CHARS else None)


def test_no_tid_is_no_dedup_identity() -> None:
    assert auction_id(None) is None


@given(TIDS, st.booleans())
def test_the_light_read_agrees_with_the_parser(tid: str, legacy: bool) -> None:
    doc = request(ext={"source": {"tid": tid}}) if legacy else request(source={"tid": tid})
    parsed = parse(doc)
    assert auction_source(json.dumps(doc).encode()) == (parsed.tid, parsed.schain)


@pytest.mark.parametrize(
    "doc",
    [
        [],
        "x",
        {"source": 3},
        {"source": {"tid": 5}},
        {"source": {"schain": []}},
        {"source": {"ext": "x"}},
    ],
)
def test_the_light_read_gives_nothing_where_the_parser_refuses_the_source(doc: Any) -> None:
    assert auction_source(json.dumps(doc).encode()) == (None, None)


@pytest.mark.parametrize("body", [b"", b"{", b'{"source": {"tid": "t"}} x', b'{"source": "\xff"}'])
def test_the_light_read_gives_nothing_for_a_body_that_is_no_json(body: bytes) -> None:
    assert auction_source(body) == (None, None)


def test_the_light_read_agrees_with_the_parser_on_a_generated_stream(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    generate(path, 400, seed=11, duplicate_share=0.5)
    checked = 0
    for record in read_stream(path):
        try:
            parsed = parse_bid_request(record.body)
        except InvalidRequest:
            continue
        assert auction_source(record.body) == (parsed.tid, parsed.schain)
        checked += 1
    assert checked > 350
