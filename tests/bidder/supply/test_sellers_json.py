"""sellers.json: the IAB samples parse, mess is skipped and reported, writing round-trips."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.supply.sellers_json import (
    SELLER_TYPES,
    Seller,
    SellersJson,
    parse_sellers_json,
    write_sellers_json,
)
from tests.bidder.conftest import EXTERNAL

pytestmark = pytest.mark.pure

SUPPLY = EXTERNAL / "supply"
SMART_QUOTE = SUPPLY / "sellers.json_iab-spec-sample.INVALID-smart-quote.json.txt"
FIXED = SUPPLY / "sellers.json_iab-spec-sample.quote-fixed.json"


def test_the_iab_sample_parses_every_seller() -> None:
    parsed = parse_sellers_json(FIXED.read_bytes())
    assert parsed.skipped == ()
    assert len(parsed.sellers) == 8
    assert parsed.version == "1.0"
    assert parsed.identifiers == (("TAG-ID", "28cb65e5bbc0bd5f"),)
    assert parsed.sellers["1942009976"] == Seller(
        "1942009976", "PUBLISHER", "Publisher1", "publisher1.com"
    )
    assert parsed.sellers["101010101"].seller_type == "BOTH"
    assert parsed.sellers["20000002"].seller_type == "INTERMEDIARY"


def test_confidential_and_passthrough_flags_are_read() -> None:
    sellers = parse_sellers_json(FIXED.read_bytes()).sellers
    hidden = sellers["00000001"]
    assert hidden.is_confidential and hidden.name is None and hidden.domain is None
    assert sellers["EB_0001"].is_passthrough and not sellers["EB_0001"].is_confidential


def test_the_smart_quote_sample_is_repaired_and_says_so() -> None:
    parsed = parse_sellers_json(SMART_QUOTE.read_bytes())
    assert parsed == parse_sellers_json(FIXED.read_bytes())
    assert parsed.skipped == ("typographic quotes replaced by ASCII quotes to parse",)


def test_text_that_is_not_json_gives_an_empty_file_with_the_problem() -> None:
    parsed = parse_sellers_json("<html>404 Not Found</html>")
    assert parsed.sellers == {} and parsed.skipped == ("not JSON",)


def test_a_json_array_is_not_a_sellers_file() -> None:
    assert parse_sellers_json("[]").skipped == ("top level is not a JSON object",)


def test_unusable_sellers_are_skipped_with_reasons() -> None:
    doc = {
        "sellers": [
            {"seller_id": "a", "seller_type": "PUBLISHER"},
            {"seller_type": "PUBLISHER"},
            {"seller_id": "b", "seller_type": "RESELLER"},
            {"seller_id": "a", "seller_type": "INTERMEDIARY"},
            "c",
        ]
    }
    parsed = parse_sellers_json(orjson.dumps(doc))
    assert list(parsed.sellers) == ["a"] and parsed.sellers["a"].seller_type == "PUBLISHER"
    assert parsed.skipped == (
        "sellers[1]: no seller_id",
        "sellers[2]: seller 'b' has seller_type 'RESELLER'",
        "sellers[3]: seller_id 'a' repeated, first kept",
        "sellers[4]: not an object",
    )


def test_values_are_normalized() -> None:
    text = '\ufeff{"sellers": [{"seller_id": 42, "seller_type": " both ", "domain": "Pub.COM",'
    text += ' "is_confidential": true}]}'
    seller = parse_sellers_json(text).sellers["42"]
    assert seller == Seller("42", "BOTH", None, "pub.com", is_confidential=True)


_text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12)
_sellers = st.builds(
    Seller,
    seller_id=_text.filter(lambda s: s.strip() == s),
    seller_type=st.sampled_from(SELLER_TYPES),
    name=st.none() | _text,
    domain=st.none() | _text.map(str.lower).filter(lambda s: s.lower() == s),
    is_confidential=st.booleans(),
    is_passthrough=st.booleans(),
    comment=st.none() | _text,
)
_files = st.builds(
    lambda sellers, version, email, ids: SellersJson(
        sellers={s.seller_id: s for s in sellers},
        version=version,
        contact_email=email,
        identifiers=tuple(ids),
    ),
    st.lists(_sellers, max_size=6),
    st.none() | _text,
    st.none() | _text,
    st.lists(st.tuples(_text, _text), max_size=2),
)


@settings(max_examples=150, database=None)
@given(st.text() | st.binary())
def test_the_parser_never_raises_on_arbitrary_input(text: str | bytes) -> None:
    parse_sellers_json(text)


@settings(max_examples=150, database=None)
@given(_files)
def test_what_is_written_parses_back_the_same(sellers_json: SellersJson) -> None:
    text = write_sellers_json(sellers_json)
    assert parse_sellers_json(text) == sellers_json
    assert parse_sellers_json(text).skipped == ()


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)
_seller_docs = st.fixed_dictionaries(
    {},
    optional={
        "seller_id": st.text(max_size=6) | st.integers(0, 2**63 - 1),
        "seller_type": st.sampled_from([*SELLER_TYPES, "publisher", "x"]) | _json,
        "name": _json,
        "domain": _json,
        "is_confidential": _json,
    },
)


@settings(max_examples=150, database=None)
@given(
    st.dictionaries(st.sampled_from(["sellers", "version", "identifiers"]), _json)
    | st.fixed_dictionaries({"sellers": st.lists(_seller_docs | _json, max_size=5)})
)
def test_what_it_accepts_round_trips(doc: dict[str, object]) -> None:
    parsed = parse_sellers_json(orjson.dumps(doc))
    assert parse_sellers_json(write_sellers_json(parsed)) == parsed
