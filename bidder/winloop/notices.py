"""Win (nurl), billing (burl) and viewability notices: parse, verify the token, check
the price. Pure.

A notice URL is ``/notice/win?t=<token>&p=${AUCTION_PRICE}&c=${AUCTION_CURRENCY}``
(``/notice/bill`` for burl). A viewability notice is ``/notice/view?t=<token>``: the
same token, no price (``parse_view``: the token checks below, nothing else). The
exchange substitutes the macros; everything else
the notice path relies on comes from the signed token (``bidder.core.tokens``), so a
notice can't name another bid, raise its own price cap or move its issue time.

Checks, in order; the first failure is the ``NoticeError`` reason (a 400):

- ``missing``   no ``t`` or no ``p``;
- ``bad_token`` not signed by one of our keys, tampered, malformed;
- ``expired``   issued more than the notice window ago (``max_age_ms``);
- ``future``    issued more than ``MAX_SKEW_MS`` ahead of our clock (a node whose
                clock is far ahead signed it: refused rather than kept forever);
- ``bad_price`` ``p`` is still the macro, not a plain decimal, or negative;
- ``above_bid`` ``p`` is more than the bid price in the token;
- ``currency``  ``c`` was substituted with something other than the bid's USD.

``p`` is a CPM in the bid currency (OpenRTB: "the same currency and units as the
bid"), a plain decimal, optionally with an exponent, parsed exactly (``Decimal``)
and rounded half-up to integer micros. ``c`` is for confirmation only: left
unsubstituted (an exchange without the macro) it is ignored. The ``:B64`` variants
of the macros are not used by our URLs, so they are not accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from bidder.core.tokens import NoticeClaims, TokenError, TokenSigner

PRICE_MACRO = "${AUCTION_PRICE}"
CURRENCY_MACRO = "${AUCTION_CURRENCY}"
CURRENCY = "USD"
MAX_SKEW_MS = 60_000
_PRICE = re.compile(r"(?:[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})(?:[eE][-+]?[0-9]{1,2})?")
_MICROS = Decimal(1_000_000)
_ONE = Decimal(1)
_MAX_CPM = Decimal(1_000_000_000)


class NoticeError(ValueError):
    """The notice is refused; ``reason`` is a short label (metric, response body)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Notice:
    claims: NoticeClaims
    clearing_price_cpm_micros: int


def parse_notice(
    query: Mapping[str, str], signer: TokenSigner, now_ms: int, max_age_ms: int
) -> Notice:
    token, price = query.get("t"), query.get("p")
    if not token or not price:
        raise NoticeError("missing", "t (token) and p (price) are required")
    claims = _verified(token, signer, now_ms, max_age_ms)
    micros = parse_price(price)
    if micros > claims.max_price_cpm_micros:
        raise NoticeError("above_bid", "price is above the bid price")
    currency = query.get("c")
    if currency is not None and currency != CURRENCY_MACRO and currency != CURRENCY:
        raise NoticeError("currency", f"the bid was in {CURRENCY}, not {currency[:8]!r}")
    return Notice(claims, micros)


def parse_view(
    query: Mapping[str, str], signer: TokenSigner, now_ms: int, max_age_ms: int
) -> NoticeClaims:
    """The claims of a viewability notice: the token checks of ``parse_notice``."""
    token = query.get("t")
    if not token:
        raise NoticeError("missing", "t (token) is required")
    return _verified(token, signer, now_ms, max_age_ms)


def _verified(token: str, signer: TokenSigner, now_ms: int, max_age_ms: int) -> NoticeClaims:
    try:
        claims = signer.verify(token)
    except TokenError as exc:
        raise NoticeError("bad_token", str(exc)) from None
    if now_ms - claims.issued_ms > max_age_ms:
        raise NoticeError("expired", f"issued more than {max_age_ms // 1000} s ago")
    if claims.issued_ms - now_ms > MAX_SKEW_MS:
        raise NoticeError("future", "issued in the future")
    return claims


def parse_price(text: str) -> int:
    """A CPM price text as integer micros, rounded half-up; NoticeError('bad_price')."""
    if text.startswith("${"):
        raise NoticeError("bad_price", "the exchange did not substitute the macro")
    if _PRICE.fullmatch(text) is None:
        raise NoticeError("bad_price", "p is not a plain non-negative decimal")
    value = Decimal(text)
    if value > _MAX_CPM:
        raise NoticeError("bad_price", "p is out of range")
    return int((value * _MICROS).quantize(_ONE, rounding=ROUND_HALF_UP))
