"""Win (nurl) and billing (burl) notices: parsing and validation, pure.

The exchange calls back with the parameters the bid's URLs carried and
``price`` set to the clearing price (CPM, in the bid currency). A notice is
accepted only when every parameter is present and the price is a number
between 0 and the bid price; an unsubstituted ``${AUCTION_PRICE}`` is refused.
Signed tokens, dedup and spend arrive with the notices issue; today a valid
notice is counted and, for nurl-served creatives, the win returns the markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

_REQUIRED = ("req", "bid", "imp", "cid", "crid", "bp", "price")


class NoticeError(ValueError):
    """The notice is unusable; the message names the parameter."""


@dataclass(frozen=True, slots=True)
class Notice:
    request_id: str
    bid_id: str
    imp_id: str
    campaign_id: str
    creative_id: str
    bid_price_cpm_micros: int
    clearing_price_cpm_micros: int


def parse_notice(query: Mapping[str, str]) -> Notice:
    missing = [key for key in _REQUIRED if not query.get(key)]
    if missing:
        raise NoticeError(f"missing parameter(s): {', '.join(missing)}")
    bid_price = _micros(query["bp"], "bp", scale=1)
    price = _micros(query["price"], "price", scale=1_000_000)
    if price > bid_price:
        raise NoticeError("price is above the bid price")
    return Notice(
        request_id=query["req"],
        bid_id=query["bid"],
        imp_id=query["imp"],
        campaign_id=query["cid"],
        creative_id=query["crid"],
        bid_price_cpm_micros=bid_price,
        clearing_price_cpm_micros=price,
    )


def _micros(text: str, name: str, scale: int) -> int:
    if text.startswith("${"):
        raise NoticeError(f"{name}: the exchange did not substitute the macro")
    try:
        value = float(text)
    except ValueError:
        raise NoticeError(f"{name} is not a number") from None
    if not math.isfinite(value) or value < 0 or value > 1e9:
        raise NoticeError(f"{name} is out of range")
    return round(value * scale)
