"""What the replay's exchange settled: bids, wins, spend, notices, and which model decided.

An auction (a 200 with at least one bid) is decided by the synthetic market model or by
the stream line's recorded clearing price (``bidder.bidstream.auction``); the totals
keep both apart so a report shows how much of a replay each one decided.

Clicks are the stream's recorded ones (``Win.clicked``): only a win the recorded market
decided carries a line's click record, so the synthetic model's clicks stay 0 and its
CTR has no wins to count. The CTR is clicks over the wins that carry a record (True or
False); a win on a line without a click record counts no click and is not in the CTR.

``unchecked_wins`` counts won bids whose notice token carries the unchecked mark
(``bidder.core.tokens.CAPS_UNCHECKED``): the bidder made them without a frequency-cap
check, so they are the replay's counted over-cap risk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from bidder.bidstream.auction import MODELS, Settlement, Win
from bidder.core.tokens import CAPS_UNCHECKED, read_flags


@dataclass(slots=True)
class ModelTotals:
    """The auctions one exchange model decided (``bidder.bidstream.auction.MODELS``)."""

    auctions: int = 0
    wins: int = 0
    spend_micros: int = 0
    clicks: int = 0
    click_recorded_wins: int = 0
    """Wins that carry the line's click record, clicked or not: the CTR's base."""


@dataclass(slots=True)
class AuctionTotals:
    bids: int = 0
    wins: int = 0
    spend_micros: int = 0
    notices_sent: int = 0
    notices_ok: int = 0
    notices_failed: int = 0
    unchecked_wins: int = 0
    """Wins whose bid was made without a frequency-cap check."""
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
        self.unchecked_wins += sum(1 for win in settlement.wins if caps_unchecked(win))
        if settlement.bids:
            model = self.models[settlement.model]
            model.auctions += 1
            model.wins += len(settlement.wins)
            model.spend_micros += spend
            model.clicks += sum(1 for win in settlement.wins if win.clicked)
            model.click_recorded_wins += sum(1 for w in settlement.wins if w.clicked is not None)


def caps_unchecked(win: Win) -> bool:
    """Whether the won bid's token carries the unchecked mark (read, not verified)."""
    url = win.nurl or win.burl
    if not url:
        return False
    token = dict(parse_qsl(urlsplit(url).query)).get("t", "")
    return bool(read_flags(token) & CAPS_UNCHECKED)


def auction_json(a: AuctionTotals) -> dict[str, Any]:
    """The ``auction`` object of the replay report's JSON."""
    return {
        "bids": a.bids,
        "wins": a.wins,
        "spend_micros": a.spend_micros,
        "notices_sent": a.notices_sent,
        "notices_ok": a.notices_ok,
        "notices_failed": a.notices_failed,
        "unchecked_wins": a.unchecked_wins,
        "models": {
            name: {
                "auctions": m.auctions,
                "wins": m.wins,
                "spend_micros": m.spend_micros,
                "clicks": m.clicks,
                "click_recorded_wins": m.click_recorded_wins,
                "ctr": ctr(m.clicks, m.click_recorded_wins),
            }
            for name, m in a.models.items()
        },
    }


def ctr(clicks: int, click_recorded_wins: int) -> float | None:
    """Clicks per win with a click record; None without such wins."""
    return round(clicks / click_recorded_wins, 6) if click_recorded_wins else None


def model_lines(a: AuctionTotals) -> list[str]:
    """One terminal line per exchange model; recorded clicks where a win carried a record."""
    return [
        f"  {name + ' model':<18}{m.auctions:,} auctions decided"
        f"  wins {m.wins:,}  spend {m.spend_micros:,} micros"
        + (
            f"  clicks {m.clicks:,} (CTR {m.clicks / m.click_recorded_wins:.2%} of"
            f" {m.click_recorded_wins:,} wins with a recorded click)"
            if m.click_recorded_wins
            else ""
        )
        for name, m in a.models.items()
    ]
