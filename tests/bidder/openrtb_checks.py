"""What a valid answer to a bid request looks like, as a list of problems."""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson

from bidder.core.nobid import NoBid

_LABELS = {reason.value for reason in NoBid}


def answer_problems(
    request: dict[str, Any], status: int, headers: dict[str, str], body: bytes
) -> list[str]:
    if status == 204:
        return _nobid_problems(headers, body)
    if status == 200:
        return response_problems(request, orjson.loads(body))
    return [f"status {status} is neither 200 nor 204"]


def _nobid_problems(headers: dict[str, str], body: bytes) -> list[str]:
    problems = [] if not body else ["a 204 has a body"]
    if headers.get("x-nbr-reason") not in _LABELS:
        problems.append(f"204 without a known X-Nbr-Reason: {headers.get('x-nbr-reason')!r}")
    return problems


def response_problems(request: dict[str, Any], response: dict[str, Any]) -> list[str]:
    """Problems of a BidResponse against its request (OpenRTB 2.6, section 4)."""
    problems = (
        [] if response.get("id") == request.get("id") else ["response id does not echo request id"]
    )
    imps = {imp["id"]: imp for imp in request["imp"]}
    bids = [bid for seatbid in response.get("seatbid", []) for bid in seatbid.get("bid", [])]
    if not bids:
        problems.append("a 200 carries no bid")
    ids = [bid.get("id") for bid in bids]
    if len(set(ids)) != len(ids):
        problems.append("bid ids are not unique within the response")
    for bid in bids:
        problems += _bid_problems(bid, imps)
    return problems


def _bid_problems(bid: dict[str, Any], imps: dict[str, dict[str, Any]]) -> list[str]:
    where = f"bid {bid.get('id')}"
    problems = [
        f"{where}: missing {key}"
        for key in ("id", "impid", "price", "crid", "cid")
        if key not in bid
    ]
    imp = imps.get(bid.get("impid"))
    if imp is None:
        return [*problems, f"{where}: impid {bid.get('impid')!r} is not in the request"]
    floor = imp.get("bidfloor") or 0  # absent and JSON null both mean no floor
    if not isinstance(bid.get("price"), int | float) or bid["price"] < floor:
        problems.append(f"{where}: price {bid.get('price')} is below the floor {floor}")
    if "adm" not in bid and "nurl" not in bid:
        problems.append(f"{where}: neither adm nor nurl")
    if "${AUCTION_PRICE}" not in bid.get("burl", ""):
        problems.append(f"{where}: burl lacks ${{AUCTION_PRICE}}")
    if not bid.get("adomain"):
        problems.append(f"{where}: no adomain")
    return problems


def with_replaced(doc: dict[str, Any], path: tuple[str | int, ...], value: Any) -> Any:
    """A deep copy of ``doc`` with the value at ``path`` replaced (for mutation tests)."""
    copy = json.loads(json.dumps(doc))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copy


def with_fresh_user(body: bytes) -> bytes:
    """The request as a new person sends it: tests that bid again and again on one
    request would otherwise soon meet the campaigns' frequency caps."""
    doc = orjson.loads(body)
    return orjson.dumps({**doc, "user": {"id": uuid.uuid4().hex}})
