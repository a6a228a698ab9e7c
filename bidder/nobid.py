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

    Only reasons some code path gives today: each later stage (rate limit, supply
    chain, consent, pacing, capping, overload shedding) adds its own with the stage.
    """

    # Stage 1: parse + shape check.
    INVALID = "invalid"
    # Stage 3: eligibility.
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
    # Anything late or broken.
    DEADLINE = "deadline"
    INTERNAL_ERROR = "internal_error"

    @property
    def nbr(self) -> int | None:
        """OpenRTB 2.x no-bid reason code, or None where no code fits."""
        return _NBR_CODES.get(self)


# OpenRTB 2.x list "No-Bid Reason Codes": 0 unknown, 1 technical error,
# 2 invalid request, 6 unsupported device, 7 blocked publisher or site.
_NBR_CODES: dict[NoBid, int] = {
    NoBid.INVALID: 2,
    NoBid.DEVICE: 6,
    NoBid.BLOCKED_SITE: 7,
    NoBid.DEADLINE: 1,
    NoBid.INTERNAL_ERROR: 1,
}
