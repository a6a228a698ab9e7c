"""Stage 9: the OpenRTB 2.6 BidResponse for the winning candidate of each imp.

One bid per imp: the highest-priced candidate, ties broken by campaign id so
the answer is deterministic. ``Bid.id`` only has to be unique within the
response (the design says so): a per-process counter (``ids.bid_id_source``).
Each bid also gets a fleet-unique Snowflake id, inside its signed notice token
(``bidder.tokens``), which the notice path uses as the impression's identity and
the ledger's correlation. Win (nurl) and billing (burl) URLs carry that token
and the ``${AUCTION_PRICE}`` / ``${AUCTION_CURRENCY}`` macros verbatim for the
exchange to fill in. No Snowflake id (the worker lost its id lease) means no
bid: ``build_response`` raises ``IdsUnavailable``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from bidder.campaigns import Creative
from bidder.clock import Clock
from bidder.notices import CURRENCY_MACRO, PRICE_MACRO
from bidder.openrtb import Imp
from bidder.pipeline import Context, PricedCandidate
from bidder.tokens import NoticeClaims, TokenSigner

# The macros must reach the exchange verbatim, so they are appended unescaped.
_MACROS = f"&p={PRICE_MACRO}&c={CURRENCY_MACRO}"

# OpenRTB 2.6 "Creative Markup Types" (Bid.mtype).
_MTYPE = {"banner": 1, "video": 2, "audio": 3, "native": 4}


def winners(priced: Iterable[PricedCandidate], imps: Iterable[Imp]) -> list[PricedCandidate]:
    """The best candidate per imp, in the request's imp order (``imps``)."""
    best: dict[str, PricedCandidate] = {}
    for option in priced:
        imp_id = option.candidate.imp.id
        current = best.get(imp_id)
        if current is None or _beats(option, current):
            best[imp_id] = option
    return [best[imp.id] for imp in imps if imp.id in best]


def _beats(option: PricedCandidate, current: PricedCandidate) -> bool:
    if option.price_cpm_micros != current.price_cpm_micros:
        return option.price_cpm_micros > current.price_cpm_micros
    return option.candidate.campaign.id < current.candidate.campaign.id


class NoticeUrls:
    """Gives each bid a Snowflake id and its signed nurl and burl."""

    def __init__(
        self, base_url: str, signer: TokenSigner, next_id: Callable[[], int], clock: Clock
    ) -> None:
        self._win = f"{base_url}/notice/win?t="
        self._bill = f"{base_url}/notice/bill?t="
        self._signer = signer
        self._next_id = next_id
        self._clock = clock

    def for_bid(self, option: PricedCandidate, ctx: Context, now_ms: int) -> tuple[str, str]:
        """(nurl, burl); raises ``IdsUnavailable`` when no Snowflake id can be issued."""
        candidate = option.candidate
        claims = NoticeClaims(
            bid_id=self._next_id(),
            imp_id=candidate.imp.id,
            campaign_id=candidate.campaign.id,
            advertiser=candidate.campaign.advertiser,
            creative_id=candidate.creative.id,
            user_key=ctx.user_key,
            household_key=ctx.household_key,
            max_price_cpm_micros=option.price_cpm_micros,
            issued_ms=now_ms,
        )
        query = self._signer.sign(claims) + _MACROS
        return self._win + query, self._bill + query

    def now_ms(self) -> int:
        return self._clock.wall_ms()


def build_response(
    ctx: Context, seat: str, urls: NoticeUrls, next_bid_id: Callable[[], str]
) -> bytes:
    """Serialized BidResponse with one bid per imp that has a priced candidate."""
    now_ms = urls.now_ms()
    bids = [
        _bid(next_bid_id(), option, urls.for_bid(option, ctx, now_ms))
        for option in winners(ctx.priced, ctx.request.imps)
    ]
    response = {"id": ctx.request.id, "cur": "USD", "seatbid": [{"seat": seat, "bid": bids}]}
    return orjson.dumps(response)


def _bid(bid_id: str, option: PricedCandidate, notice_urls: tuple[str, str]) -> dict[str, Any]:
    candidate = option.candidate
    creative = candidate.creative
    bid: dict[str, Any] = {
        "id": bid_id,
        "impid": candidate.imp.id,
        "price": option.price_cpm_micros / 1_000_000,
        "cid": candidate.campaign.id,
        "crid": creative.id,
        "adomain": list(creative.adomain),
        "mtype": _MTYPE[creative.format],
        "nurl": notice_urls[0],
        "burl": notice_urls[1],
    }
    _add_creative_fields(bid, creative)
    return bid


def _add_creative_fields(bid: dict[str, Any], creative: Creative) -> None:
    if creative.cat:
        bid["cat"] = list(creative.cat)
    if creative.attr:
        bid["attr"] = sorted(creative.attr)
    if creative.w and creative.h:
        bid["w"], bid["h"] = creative.w, creative.h
    if creative.serve == "adm":
        bid["adm"] = creative.markup
