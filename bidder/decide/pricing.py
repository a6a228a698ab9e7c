"""The base price of a candidate whose campaign has no click value, so is not scored.

Stage 8 (``models.serving``) prices such candidates here: the campaign's base bid,
raised to the impression's floor when the floor is higher, and never above the
campaign's max bid (eligibility already dropped campaigns whose max is under the
floor). All CPM, integer micros.
"""

from __future__ import annotations

from bidder.decide.eligibility import Candidate


def base_price(candidate: Candidate) -> int | None:
    """CPM price in micros, or None when the floor is above the campaign's max bid."""
    campaign = candidate.campaign
    price = max(campaign.base_bid_cpm_micros, candidate.imp.bidfloor_micros)
    return price if price <= campaign.max_bid_cpm_micros else None
