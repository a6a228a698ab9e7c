"""bidder.winloop.notices.parse_notice: token, window, price and currency checks."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.tokens import NoticeClaims, TokenSigner
from bidder.winloop.notices import MAX_SKEW_MS, Notice, NoticeError, parse_notice, parse_price

SIGNER = TokenSigner({"k1": b"n" * 32}, "k1")
NOW_MS = 1_767_225_600_000
MAX_AGE_MS = 3_600_000
CLAIMS = NoticeClaims(
    bid_id=560_000_000_123_456_789,
    imp_id="imp-1",
    campaign_id="harbor-bank-leaderboard",
    advertiser="harbor-bank",
    creative_id="hb-728x90-savings",
    user_key="b:u1",
    household_key=None,
    max_price_cpm_micros=2_500_000,
    issued_ms=NOW_MS - 1_000,
)
TOKEN = SIGNER.sign(CLAIMS)


def _parse(now_ms: int = NOW_MS, **query: str) -> Notice:
    return parse_notice({"t": TOKEN, "p": "1.25", **query}, SIGNER, now_ms, MAX_AGE_MS)


def _reason(now_ms: int = NOW_MS, **query: str) -> str:
    with pytest.raises(NoticeError) as caught:
        _parse(now_ms, **query)
    return caught.value.reason


def test_valid_notice_carries_the_signed_claims_and_the_price() -> None:
    assert _parse() == Notice(CLAIMS, 1_250_000)


@pytest.mark.parametrize("key", ["t", "p"])
def test_missing_token_or_price_is_refused(key: str) -> None:
    query = {"t": TOKEN, "p": "1.25"}
    del query[key]
    with pytest.raises(NoticeError, match="missing"):
        parse_notice(query, SIGNER, NOW_MS, MAX_AGE_MS)


def test_a_forged_token_is_refused() -> None:
    forged = TokenSigner({"k1": b"f" * 32}, "k1").sign(CLAIMS)
    assert _reason(t=forged) == "bad_token"


def test_a_tampered_token_is_refused() -> None:
    tampered = TOKEN[:-8] + ("A" if TOKEN[-8] != "A" else "B") + TOKEN[-7:]
    assert _reason(t=tampered) == "bad_token"


def test_a_notice_older_than_the_window_is_expired() -> None:
    assert _reason(now_ms=CLAIMS.issued_ms + MAX_AGE_MS + 1) == "expired"


def test_a_notice_at_the_end_of_the_window_is_accepted() -> None:
    assert _parse(now_ms=CLAIMS.issued_ms + MAX_AGE_MS).clearing_price_cpm_micros == 1_250_000


def test_a_token_issued_far_in_the_future_is_refused() -> None:
    assert _reason(now_ms=CLAIMS.issued_ms - MAX_SKEW_MS - 1) == "future"


def test_an_unsubstituted_price_macro_is_refused() -> None:
    assert _reason(p="${AUCTION_PRICE}") == "bad_price"


@pytest.mark.parametrize(
    "price", ["abc", "1,25", "0x10", "1.2.3", "$1", "USD 1", "-0.01", "inf", "nan", " 1.5 ", "1_0"]
)
def test_a_price_that_is_not_a_plain_decimal_is_refused(price: str) -> None:
    assert _reason(p=price) == "bad_price"


def test_a_price_above_the_bid_is_refused() -> None:
    assert _reason(p="2.500001") == "above_bid"


def test_a_price_equal_to_the_bid_is_accepted() -> None:
    assert _parse(p="2.5").clearing_price_cpm_micros == 2_500_000


def test_a_zero_price_is_accepted() -> None:
    assert _parse(p="0").clearing_price_cpm_micros == 0


def test_another_currency_is_refused() -> None:
    assert _reason(c="EUR") == "currency"


@pytest.mark.parametrize("currency", ["USD", "${AUCTION_CURRENCY}"])
def test_usd_or_an_unsubstituted_currency_macro_is_accepted(currency: str) -> None:
    assert _parse(c=currency).clearing_price_cpm_micros == 1_250_000


@pytest.mark.parametrize(
    ("price", "micros"),
    [("1.25", 1_250_000), ("0.031", 31_000), ("2", 2_000_000), ("0.0000014", 1), ("1e-6", 1),
     ("0.0000005", 1), ("0.00000049", 0), (".5", 500_000), ("3.", 3_000_000)],
)  # fmt: skip
def test_price_becomes_cpm_micros_rounded_half_up(price: str, micros: int) -> None:
    assert parse_price(price) == micros


def test_an_absurdly_large_price_is_out_of_range() -> None:
    with pytest.raises(NoticeError, match="out of range"):
        parse_price("9e99")


@given(micros=st.integers(0, 1_000_000_000_000))
def test_our_own_price_as_a_float_parses_back_to_its_micros(micros: int) -> None:
    assert parse_price(repr(micros / 1_000_000)) == micros


@given(micros=st.integers(0, 10**12))
def test_a_six_decimal_price_parses_exactly(micros: int) -> None:
    assert parse_price(f"{micros // 10**6}.{micros % 10**6:06d}") == micros


@given(query=st.dictionaries(st.sampled_from(["t", "p", "c", "x"]), st.text(max_size=40)))
def test_any_query_raises_only_notice_error(query: dict[str, str]) -> None:
    with contextlib.suppress(NoticeError):
        parse_notice(query, SIGNER, NOW_MS, MAX_AGE_MS)


@given(price=st.text(max_size=30) | st.floats().map(repr) | st.integers().map(str))
def test_any_price_text_raises_only_notice_error(price: str) -> None:
    with contextlib.suppress(NoticeError):
        parse_price(price)


def test_a_token_for_a_cheaper_bid_caps_the_price() -> None:
    cheap = SIGNER.sign(dataclasses.replace(CLAIMS, max_price_cpm_micros=1_000_000))
    assert _reason(t=cheap, p="1.000001") == "above_bid"
