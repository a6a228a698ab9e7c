"""Who would have bought each impression, had the campaigns priced above it not bid.

The bidder sends one bid per imp: its best-priced campaign's. Its campaign trace
(``priced``, ``bidder.pipeline.campaign_trace``) names every campaign that priced the
imp and the price it would have bid, so the replay runs the exchange
(``bidder.bidstream.auction.would_pay``) for each of them in the same auction, against
the same competing bid, and keeps what each would have paid (0: it would have lost).

The book counts the imps per simulated hour by their *order*: the campaigns that priced
them, best price first (ties by campaign id, as the bidder breaks them). Each order keeps
how many imps had it and, per position, the spend its campaign would have made had it
been the one to bid.

A pacing simulator of several campaigns on one stream needs exactly that. When each
campaign bids on a share ``r`` of its requests (its pacing rate, or 0 without a lease),
an imp of order (a, b, c) goes to c when neither a nor b bids on it, so c's supply at
rate 1 is its spend there times (1 - r_a)(1 - r_b) (``supply_at``). A replay in which
every campaign bids at rate 1 measures only the first position's: the supply of a
campaign that others outbid is larger on a day when they are paced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bidder.bidstream.auction import Market, Settlement, would_pay
from pacing.curves import hour_of_day

Order = tuple[str, ...]


@dataclass(slots=True)
class _Orders:
    imps: int = 0
    spend: list[int] = field(default_factory=list)


@dataclass(slots=True)
class SupplyBook:
    hours: list[dict[Order, _Orders]] = field(default_factory=lambda: [{} for _ in range(24)])

    def add(
        self,
        market: Market,
        seq: int,
        settlement: Settlement,
        priced: Sequence[tuple[str, str, int]],
        ts: int,
        recorded_price: float | None = None,
    ) -> None:
        """One answer's priced campaigns (campaign id, imp id, CPM micros) for request
        ``seq`` at simulated instant ``ts``; imps the answer bid nothing on are left out."""
        by_imp: dict[str, list[tuple[str, int]]] = {}
        for cid, impid, price in priced:
            by_imp.setdefault(impid, []).append((cid, price))
        hour = hour_of_day(ts)
        for impid, offers in by_imp.items():
            if not any(offer.impid == impid for offer in settlement.offers):
                continue
            offers.sort(key=lambda offer: (-offer[1], offer[0]))
            paid = [
                would_pay(market, seq, settlement, impid, price / 1e6, recorded_price)
                for _, price in offers
            ]
            self.count(hour, tuple(cid for cid, _ in offers), [_micros(p) for p in paid])

    def count(self, hour: int, order: Order, spend: Sequence[int]) -> None:
        """One imp of ``order`` in ``hour``, ``spend[i]`` what ``order[i]`` would pay."""
        entry = self.hours[hour].get(order)
        if entry is None:
            entry = self.hours[hour][order] = _Orders(spend=[0] * len(order))
        entry.imps += 1
        for i, micros in enumerate(spend):
            entry.spend[i] += micros

    def json(self) -> list[list[dict[str, Any]]]:
        """Per hour, each order with its imps and spend per position (micros)."""
        return [
            [
                {"order": list(order), "imps": entry.imps, "spend_micros": list(entry.spend)}
                for order, entry in sorted(hour.items())
            ]
            for hour in self.hours
        ]


def _micros(price: float | None) -> int:
    """What one impression at this CPM costs (micros); nothing when it was not won."""
    return 0 if price is None else round(price * 1000)


BookJson = Sequence[Sequence[Mapping[str, Any]]]
"""``SupplyBook.json()`` as a report holds it."""


def supply_at(book: BookJson, rates: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """Each campaign's spend per hour at rate 1 while the others bid on their share
    ``rates[cid][hour]`` of requests (a campaign not in ``rates`` bids on all of them).

    With every rate 1 that is the spend of each order's first position: the replay's
    own. Bids are independent draws, so an imp reaches position i with the probability
    that none of the campaigns before it bids."""
    supply: dict[str, list[float]] = {}
    for hour, orders in enumerate(book):
        for entry in orders:
            reach = 1.0
            for cid, spend in zip(entry["order"], entry["spend_micros"], strict=True):
                supply.setdefault(cid, [0.0] * 24)[hour] += spend * reach
                rate = rates.get(cid)
                reach *= 1.0 - (1.0 if rate is None else min(max(rate[hour], 0.0), 1.0))
                if reach <= 0.0:
                    break
    return supply
