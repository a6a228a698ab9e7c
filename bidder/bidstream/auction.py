"""The exchange model: does a bid win, and what does the winner pay?

Pure: bytes in, outcomes out; no clock, no I/O, no shared RNG state.

Model. For each bid the exchange draws the highest *competing* bid ``C``::

    C = scale * median_multiple * exp(sigma * Z),   Z ~ Normal(0, 1)
    scale = imp.bidfloor, or default_floor when the impression has no floor

so competition is lognormal with its median ``median_multiple`` times the floor (the
floor says how valuable the publisher thinks the slot is; other bidders cluster above
it). Defaults: median 1.5 x floor, sigma 0.6 (about a third of auctions see a
competitor above 2 x floor), default_floor 0.10 CPM.

Rules. A bid below the impression's floor, or for an impression the request does not
contain, is rejected (a loss). Otherwise it wins when ``price > C`` (ties lose). The
winner pays:

- first price (``at=1``): its own bid;
- second price (``at=2``, the OpenRTB default; any other ``at`` is treated the same):
  ``max(C, floor) + 0.01``, never above its own bid.

The clearing price is rounded to 6 decimals of CPM, downwards where rounding would
exceed the bid; its text
replaces the ``${AUCTION_PRICE}`` macro in the winner's ``nurl`` and ``burl``. Only
the plain macro is filled in: ``${AUCTION_PRICE:B64}`` and the other OpenRTB macros
are left untouched (the bidder under test uses none of them).

Recorded prices. A stream line imported from a log may carry the auction's recorded
clearing price ``P`` (``market_price``, CPM). Then the recorded market decides instead of
the model: a bid wins when it reaches the impression's floor and ``price > P`` (ties
lose), and the winner pays ``P`` (second price) or its own bid (first price). ``P`` is
what the auction cleared at, so it already carries the floor and the competition of
that moment; it is paid as recorded, rounded to 6 decimals like any clearing price.
The settlement says which model decided (``RECORDED`` or ``SYNTHETIC``).

Recorded clicks. A line may also carry whether its recorded impression was clicked
(``click``). It follows the recorded price: a win the recorded market decided is the
recorded impression bought, so it carries the line's click record (``Win.clicked``,
True or False). A win the synthetic model decided, or on a line without a click
record, carries none (None): it counts no click. Like the price, a line's record
applies to every win of its request (an iPinYou request has one impression).

Determinism. ``Z`` is not drawn from a shared generator (responses arrive in a
different order each run) but derived from a hash of (seed, request sequence number,
impid, bid index). The same seed and schedule give the same outcome for the same bid,
whatever the response order.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

import orjson

PRICE_MACRO = "${AUCTION_PRICE}"
SYNTHETIC = "synthetic"
RECORDED = "recorded"
MODELS = (SYNTHETIC, RECORDED)
"""The exchange models a settlement can be decided by, in report order."""
FIRST_PRICE = 1
SECOND_PRICE = 2
_STANDARD_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class Market:
    """Parameters of the competition model (see the module docstring)."""

    seed: int = 1
    median_multiple: float = 1.5
    sigma: float = 0.6
    default_floor: float = 0.10


@dataclass(frozen=True, slots=True)
class Terms:
    """What the exchange promised in the request: auction type and floors by imp id."""

    at: int
    floors: dict[str, float]


@dataclass(frozen=True, slots=True)
class Win:
    impid: str
    bid_price: float
    price: float
    """Clearing price, CPM, at most 6 decimals and never above ``bid_price``."""
    nurl: str | None
    burl: str | None
    cid: str = ""
    """The bid's campaign id (``Bid.cid``); empty when the bid names none."""
    clicked: bool | None = None
    """The line's recorded click, on a win the recorded market decided; None: no record."""

    @property
    def spend_micros(self) -> int:
        """What one impression at this CPM costs, in integer micros (CPM / 1000)."""
        return round(self.price * 1000)


@dataclass(frozen=True, slots=True)
class Offer:
    """One bid as the exchange saw it: its campaign id (empty when none), CPM and imp id."""

    cid: str
    price: float
    impid: str = ""


@dataclass(frozen=True, slots=True)
class Settlement:
    bids: int
    wins: list[Win]
    model: str = SYNTHETIC
    """Which market decided: ``SYNTHETIC`` (the model) or ``RECORDED`` (the log's price)."""
    offers: tuple[Offer, ...] = ()
    """Every bid of the response, in its order (``bids`` of them)."""
    terms: Terms | None = None
    """The request's auction type and floors; None when it had no bid or was unreadable."""


def parse_terms(request_body: bytes) -> Terms | None:
    """Auction type and floors from the request the replayer sent; None if unreadable."""
    try:
        request = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(request, dict):
        return None
    at = request.get("at")
    floors = {
        str(imp["id"]): _number(imp.get("bidfloor"))
        for imp in request.get("imp") or ()
        if isinstance(imp, dict) and "id" in imp
    }
    return Terms(at=at if at == FIRST_PRICE else SECOND_PRICE, floors=floors)


def competing_bid(market: Market, floor: float, key: str) -> float:
    """The highest other bid for the auction named by ``key``; deterministic per seed."""
    scale = floor if floor > 0 else market.default_floor
    return scale * market.median_multiple * math.exp(market.sigma * _normal(market.seed, key))


def clearing_price(at: int, own: float, competitor: float, floor: float) -> float:
    """What a winning bid of ``own`` pays; never more than ``own``."""
    price = round(own if at == FIRST_PRICE else min(own, max(competitor, floor) + 0.01), 6)
    # Rounding may go up past the bid (own = 1.2345678 -> 1.234568); step one micro-CPM down.
    return price if price <= own else round(price - 1e-6, 6)


def recorded_clearing_price(at: int, own: float, recorded: float) -> float:
    """What a bid of ``own`` that beat the recorded price pays; never more than ``own``."""
    price = round(own if at == FIRST_PRICE else min(own, recorded), 6)
    return price if price <= own else round(price - 1e-6, 6)


def format_price(price: float) -> str:
    """CPM with up to 6 decimals, no trailing zeros: 1.5 -> '1.5', 2.0 -> '2'."""
    text = f"{price:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def fill_price(url: str, price: float) -> str:
    return url.replace(PRICE_MACRO, format_price(price))


def settle(
    market: Market,
    seq: int,
    request_body: bytes,
    response_body: bytes,
    recorded_price: float | None = None,
    recorded_click: bool | None = None,
) -> Settlement:
    """Run the auction for every bid in a 200 response to request number ``seq``.

    With ``recorded_price`` (the stream line's ``market_price``) the recorded market
    decides every bid of the request, and its wins carry ``recorded_click`` (the line's
    ``click``); without it, the synthetic model, and no click.
    """
    bids = _bids(response_body)
    terms = parse_terms(request_body) if bids else None
    wins = []
    for index, bid in enumerate(bids):
        key = f"{seq}:{bid.get('impid')}:{index}"
        win = _decide(market, terms, key, bid, recorded_price)
        if win is not None:
            wins.append(win if recorded_price is None else replace(win, clicked=recorded_click))
    model = SYNTHETIC if recorded_price is None else RECORDED
    offers = tuple(
        Offer(_cid(bid), _number(bid.get("price")), str(bid.get("impid"))) for bid in bids
    )
    return Settlement(bids=len(bids), wins=wins, model=model, offers=offers, terms=terms)


def would_pay(
    market: Market,
    seq: int,
    settlement: Settlement,
    impid: str,
    price: float,
    recorded_price: float | None = None,
) -> float | None:
    """What a bid of ``price`` (CPM) for ``impid`` would have paid in the auction that
    ``settlement`` settled, in place of the bid the answer sent for that imp (the same
    competing bid decides); None: it would have lost, or the answer bid nothing there."""
    index = next((i for i, offer in enumerate(settlement.offers) if offer.impid == impid), None)
    if index is None:
        return None
    key = f"{seq}:{impid}:{index}"
    win = _decide(market, settlement.terms, key, {"impid": impid, "price": price}, recorded_price)
    return None if win is None else win.price


def _decide(
    market: Market,
    terms: Terms | None,
    key: str,
    bid: dict[str, Any],
    recorded: float | None,
) -> Win | None:
    impid, own = str(bid.get("impid")), _number(bid.get("price"))
    if terms is None or impid not in terms.floors or own <= 0:
        return None
    floor = terms.floors[impid]
    if recorded is not None:
        if own < floor or own <= recorded:
            return None
        price = recorded_clearing_price(terms.at, own, recorded)
    else:
        competitor = competing_bid(market, floor, key)
        if own < floor or own <= competitor:
            return None
        price = clearing_price(terms.at, own, competitor, floor)
    return Win(impid, own, price, _url(bid, "nurl", price), _url(bid, "burl", price), _cid(bid))


def _bids(response_body: bytes) -> list[dict[str, Any]]:
    """Every bid object in a BidResponse; an unreadable response has none."""
    try:
        response = orjson.loads(response_body)
    except orjson.JSONDecodeError:
        return []
    seatbids = response.get("seatbid") if isinstance(response, dict) else None
    return [
        bid
        for seatbid in seatbids or ()
        if isinstance(seatbid, dict)
        for bid in seatbid.get("bid") or ()
        if isinstance(bid, dict)
    ]


def _url(bid: dict[str, Any], field: str, price: float) -> str | None:
    url = bid.get(field)
    return fill_price(url, price) if isinstance(url, str) and url else None


def _cid(bid: dict[str, Any]) -> str:
    cid = bid.get("cid")
    return cid if isinstance(cid, str) else ""


def _number(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else 0.0


def _normal(seed: int, key: str) -> float:
    """A standard normal draw fixed by (seed, key): hash -> uniform in (0, 1) -> inverse CDF."""
    digest = hashlib.blake2b(f"{seed}/{key}".encode(), digest_size=8).digest()
    uniform = (int.from_bytes(digest, "big") + 0.5) / 2**64
    return _STANDARD_NORMAL.inv_cdf(uniform)
