"""The pipeline stages that exist today, each a thin adapter over pure logic."""

from __future__ import annotations

from bidder.campaign_book import CampaignBook
from bidder.eligibility import EligibilityPolicy, select
from bidder.nobid import NoBid
from bidder.pipeline import Context, PricedCandidate
from bidder.pricing import base_price


class EligibilityStage:
    """Stage 3: the in-memory campaign index narrows to candidates."""

    def __init__(self, book: CampaignBook, policy: EligibilityPolicy):
        self._book = book
        self._policy = policy

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        result = select(ctx.request, self._book.index, self._policy)
        if isinstance(result, NoBid):
            return result
        ctx.candidates = result
        return None


class PriceStage:
    """Stage 8 (base-bid pricing until the scoring issue lands)."""

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        for candidate in ctx.candidates:
            price = base_price(candidate)
            if price is not None:
                ctx.priced.append(PricedCandidate(candidate, price))
        return None if ctx.priced else NoBid.FLOOR
