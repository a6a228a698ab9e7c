"""bidder.notices.parse_notice: what a win or billing notice must carry."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.notices import Notice, NoticeError, parse_notice

REQUIRED = ("req", "bid", "imp", "cid", "crid", "bp", "price")
VALID = {
    "req": "r1",
    "bid": "1",
    "imp": "imp-1",
    "cid": "harbor-bank-leaderboard",
    "crid": "hb-728x90-savings",
    "bp": "2500000",
    "price": "1.25",
}


def _with(**changes: str) -> dict[str, str]:
    return {**VALID, **changes}


def _without(*keys: str) -> dict[str, str]:
    return {key: value for key, value in VALID.items() if key not in keys}


def test_valid_notice_parses() -> None:
    assert parse_notice(VALID) == Notice(
        request_id="r1",
        bid_id="1",
        imp_id="imp-1",
        campaign_id="harbor-bank-leaderboard",
        creative_id="hb-728x90-savings",
        bid_price_cpm_micros=2_500_000,
        clearing_price_cpm_micros=1_250_000,
    )


@pytest.mark.parametrize("key", REQUIRED)
def test_missing_parameter_is_named(key: str) -> None:
    with pytest.raises(NoticeError, match=f"missing parameter.*\\b{key}\\b"):
        parse_notice(_without(key))


def test_every_missing_parameter_is_listed() -> None:
    with pytest.raises(NoticeError) as caught:
        parse_notice(_without("imp", "crid", "price"))
    assert str(caught.value).endswith("imp, crid, price")


@pytest.mark.parametrize("key", REQUIRED)
def test_empty_parameter_counts_as_missing(key: str) -> None:
    with pytest.raises(NoticeError, match="missing"):
        parse_notice(_with(**{key: ""}))


@pytest.mark.parametrize("key", ["price", "bp"])
def test_unsubstituted_macro_is_refused(key: str) -> None:
    with pytest.raises(NoticeError, match="did not substitute the macro"):
        parse_notice(_with(**{key: "${AUCTION_PRICE}"}))


@pytest.mark.parametrize("price", ["abc", "1,25", "0x10", "1.2.3", "$1", "USD 1"])
def test_non_numeric_price_is_refused(price: str) -> None:
    with pytest.raises(NoticeError, match="not a number"):
        parse_notice(_with(price=price))


@pytest.mark.parametrize("price", ["-0.01", "inf", "-inf", "Infinity", "nan", "NaN", "1e300"])
def test_negative_or_non_finite_price_is_refused(price: str) -> None:
    with pytest.raises(NoticeError, match="out of range"):
        parse_notice(_with(price=price))


def test_non_numeric_bid_price_is_refused() -> None:
    with pytest.raises(NoticeError, match="bp is not a number"):
        parse_notice(_with(bp="lots"))


def test_price_above_the_bid_price_is_refused() -> None:
    with pytest.raises(NoticeError, match="above the bid price"):
        parse_notice(_with(bp="2500000", price="2.500001"))


def test_price_equal_to_the_bid_price_is_accepted() -> None:
    assert parse_notice(_with(bp="2500000", price="2.5")).clearing_price_cpm_micros == 2_500_000


def test_zero_price_is_accepted() -> None:
    assert parse_notice(_with(price="0")).clearing_price_cpm_micros == 0


@pytest.mark.parametrize(
    ("price", "micros"),
    [("1.25", 1_250_000), ("0.031", 31_000), ("2", 2_000_000), ("0.0000014", 1), ("1e-6", 1)],
)
def test_price_becomes_cpm_micros_rounded(price: str, micros: int) -> None:
    assert parse_notice(_with(price=price)).clearing_price_cpm_micros == micros


@given(micros=st.integers(0, 1_000_000_000))
def test_our_own_price_as_a_float_parses_back_to_its_micros(micros: int) -> None:
    notice = parse_notice(_with(bp=str(micros), price=repr(micros / 1_000_000)))
    assert notice.clearing_price_cpm_micros == micros


@given(query=st.dictionaries(st.text(max_size=6), st.text(max_size=12)))
def test_any_query_raises_only_notice_error(query: dict[str, str]) -> None:
    with contextlib.suppress(NoticeError):
        parse_notice(query)


values = (
    st.text(max_size=24)
    | st.floats().map(repr)
    | st.integers().map(str)
    | st.sampled_from(["${AUCTION_PRICE}", "1e309", "-0", " 1.5 ", "1_000"])
)


@given(query=st.fixed_dictionaries({key: values for key in REQUIRED}))
def test_any_values_of_the_required_parameters_raise_only_notice_error(
    query: dict[str, str],
) -> None:
    with contextlib.suppress(NoticeError):
        parse_notice(query)
