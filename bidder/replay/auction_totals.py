"""What the replay's exchange settled: bids, wins, spend, notices, and which model decided.

An auction (a 200 with at least one bid) is decided by the synthetic market model or by
the stream line's recorded clearing price (``bidder.bidstream.auction``); the totals
keep both apart so a report shows how much of a replay each one decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bidder.bidstream.auction import MODELS, Settlement


@dataclass(slots=True)
class ModelTotals:
    """The auctions one exchange model decided (``bidder.bidstream.auction.MODELS``)."""

    auctions: int = 0
    wins: int = 0
    spend_micros: int = 0


@dataclass(slots=True)
class AuctionTotals:
    bids: int = 0
    wins: int = 0
    spend_micros: int = 0
    notices_sent: int = 0
    notices_ok: int = 0
    notices_failed: int = 0
    models: dict[str, ModelTotals] = field(
        default_factory=lambda: {model: ModelTotals() for model in MODELS}
    )
    """Per exchange model: the synthetic market, or the stream's recorded prices."""

    def count(self, settlement: Settlement) -> None:
        """One auction's bids, wins and spend, under the model that decided it."""
        spend = sum(win.spend_micros for win in settlement.wins)
        self.bids += settlement.bids
        self.wins += len(settlement.wins)
        self.spend_micros += spend
        if settlement.bids:
            model = self.models[settlement.model]
            model.auctions += 1
            model.wins += len(settlement.wins)
            model.spend_micros += spend


def auction_json(a: AuctionTotals) -> dict[str, Any]:
    """The ``auction`` object of the replay report's JSON."""
    return {
        "bids": a.bids,
        "wins": a.wins,
        "spend_micros": a.spend_micros,
        "notices_sent": a.notices_sent,
        "notices_ok": a.notices_ok,
        "notices_failed": a.notices_failed,
        "models": {
            name: {"auctions": m.auctions, "wins": m.wins, "spend_micros": m.spend_micros}
            for name, m in a.models.items()
        },
    }
