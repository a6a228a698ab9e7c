"""Stage 9: the OpenRTB 2.6 BidResponse for the winning candidate of each imp.

One bid per imp: the highest-priced candidate, ties broken by campaign id so
the answer is deterministic. ``Bid.id`` only has to be unique within the
response (the design says so), so it is the bid's position. Win (nurl) and
billing (burl) notice URLs carry what the notice handler needs to find the bid
again and ``${AUCTION_PRICE}`` for the exchange to fill in; signed tokens
replace the plain parameters when the notices issue lands.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import orjson

from bidder.campaigns import Creative
from bidder.openrtb import Imp
from bidder.pipeline import Context, PricedCandidate

_URL_SAFE = re.compile(r"[A-Za-z0-9_.~-]*")

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


def build_response(ctx: Context, seat: str, notice_base_url: str) -> bytes:
    """Serialized BidResponse with one bid per imp that has a priced candidate."""
    bids = [
        _bid(str(n), option, ctx.request.id, notice_base_url)
        for n, option in enumerate(winners(ctx.priced, ctx.request.imps), start=1)
    ]
    response = {"id": ctx.request.id, "cur": "USD", "seatbid": [{"seat": seat, "bid": bids}]}
    return orjson.dumps(response)


def _bid(bid_id: str, option: PricedCandidate, request_id: str, base: str) -> dict[str, Any]:
    candidate = option.candidate
    creative = candidate.creative
    query = _notice_query(bid_id, option, request_id)
    bid: dict[str, Any] = {
        "id": bid_id,
        "impid": candidate.imp.id,
        "price": option.price_cpm_micros / 1_000_000,
        "cid": candidate.campaign.id,
        "crid": creative.id,
        "adomain": list(creative.adomain),
        "mtype": _MTYPE[creative.format],
        "nurl": f"{base}/notice/win?{query}",
        "burl": f"{base}/notice/bill?{query}",
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


def _notice_query(bid_id: str, option: PricedCandidate, request_id: str) -> str:
    candidate = option.candidate
    params = (
        ("req", request_id),
        ("bid", bid_id),
        ("imp", candidate.imp.id),
        ("cid", candidate.campaign.id),
        ("crid", candidate.creative.id),
        ("bp", str(option.price_cpm_micros)),
    )
    # The macro must reach the exchange verbatim, so it is appended unescaped.
    encoded = "&".join(f"{key}={_escape(value)}" for key, value in params)
    return encoded + "&price=${AUCTION_PRICE}"


def _escape(value: str) -> str:
    # Most ids are already URL-safe; quote() is the slow path only for the rest.
    return value if _URL_SAFE.fullmatch(value) else quote(value, safe="")
