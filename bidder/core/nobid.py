"""Typed no-bid reasons.

Every 204 the bidder sends names exactly one of these in the ``X-Nbr-Reason``
header, and where the OpenRTB 2.x "No-Bid Reason Codes" list has a fitting
entry, the numeric code goes in ``X-Nbr``. A 204 carries no body, so the
headers are the only place for them; the same reason labels the Prometheus
no-bid counter, so a replay report and the metrics agree on where requests die.
"""

from __future__ import annotations

import enum


class NoBid(enum.Enum):
    """Why a request got no bid. The value is the wire label (header, metric).

    Grouped by the hot-path stage that gives them (see ``docs/architecture.md``).
    """

    # Stage 1: parse + shape check.
    INVALID = "invalid"
    # Stage 2: partner protection.
    THROTTLED = "throttled"
    # Stage 3: eligibility, consent and COPPA.
    TEST_REQUEST = "test_request"
    CURRENCY = "currency"
    NO_CAMPAIGNS = "no_campaigns"
    CHANNEL = "channel"
    GEO = "geo"
    DEVICE = "device"
    FORMAT = "format"
    BLOCKED_CREATIVE = "blocked_creative"
    BLOCKED_SITE = "blocked_site"
    FLOOR = "floor"
    PRIVATE_AUCTION = "private_auction"
    NO_CONSENT = "no_consent"
    COPPA = "coppa"
    # Stage 4: supply chain.
    SCHAIN_MISSING = "schain_missing"
    SCHAIN_INCOMPLETE = "schain_incomplete"
    SCHAIN_UNKNOWN_SELLER = "schain_unknown_seller"
    ADS_TXT_UNAVAILABLE = "ads_txt_unavailable"
    ADS_TXT_UNAUTHORIZED = "ads_txt_unauthorized"
    # Stage 5: identity and profile.
    PROFILE_MISS = "profile_miss"
    # Stage 6: budget and pacing.
    NO_LEASE = "no_lease"
    PACED = "paced"
    BUDGET_UNAVAILABLE = "budget_unavailable"
    # Stage 7: frequency cap.
    CAPPED = "capped"
    FCAP_UNAVAILABLE = "fcap_unavailable"
    # Stage 8: score and price.
    SCORE_ERROR = "score_error"
    # Stage 8b: supply-path dedup (bidder.pipeline.auction_claims).
    DUPLICATE_AUCTION = "duplicate_auction"
    """Another copy of the auction (same ``source.tid``, another SSP) claimed the bid.
    No OpenRTB code fits (none says "already bid through another path")."""
    # Anything late or broken.
    DEADLINE = "deadline"
    OVERLOADED = "overloaded"
    """Shed at once, body unparsed: in-flight bound reached or event loop lagging."""
    IDS_UNAVAILABLE = "ids_unavailable"
    """No Snowflake id to bill the bid under: the worker's id lease lapsed (Valkey gone
    longer than a lease stays valid) or the clock stepped back past what the generator
    absorbs (``ids``). No bid rather than a bid under an id another worker may issue."""
    INTERNAL_ERROR = "internal_error"
    """A bug, caught: logged with its traceback and counted (``bidsim_internal_errors``)."""

    @property
    def nbr(self) -> int | None:
        """OpenRTB 2.x no-bid reason code, or None where no code fits."""
        return _NBR_CODES.get(self)


# OpenRTB 2.6 list "No-Bid Reason Codes": 1 technical error, 2 invalid request,
# 6 unsupported device, 7 blocked publisher or site, 8 unmatched user, 11 ads.txt
# authorization unavailable, 12 ads.txt authorization violation, 16 incomplete
# SupplyChain, 17 blocked SupplyChain node.
_NBR_CODES: dict[NoBid, int] = {
    NoBid.INVALID: 2,
    NoBid.DEVICE: 6,
    NoBid.BLOCKED_SITE: 7,
    NoBid.SCHAIN_MISSING: 16,
    NoBid.SCHAIN_INCOMPLETE: 16,
    NoBid.SCHAIN_UNKNOWN_SELLER: 17,
    NoBid.ADS_TXT_UNAVAILABLE: 11,
    NoBid.ADS_TXT_UNAUTHORIZED: 12,
    NoBid.PROFILE_MISS: 8,
    NoBid.DEADLINE: 1,
    NoBid.OVERLOADED: 1,
    NoBid.INTERNAL_ERROR: 1,
    NoBid.IDS_UNAVAILABLE: 1,
    NoBid.FCAP_UNAVAILABLE: 1,
    NoBid.BUDGET_UNAVAILABLE: 1,
    NoBid.SCORE_ERROR: 1,
}
