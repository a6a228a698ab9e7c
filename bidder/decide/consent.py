"""Privacy signals on the bid path: GDPR with TCF v2, COPPA, US privacy and GPP.

Pure: ``evaluate(request, policy)`` reads the parsed request and answers with a
``Privacy``: either a no-bid reason, or "bid" together with whether the bid may use
the person's identity and profile (``personalize``). The rules (docs/supply.md):

* COPPA (``regs.coppa`` 1): no bid. None of our creatives is declared child-directed
  and COPPA forbids the behavioural advertising our campaigns are built on.
* GDPR applies when ``regs.gdpr`` is 1, or when it is absent and the device is in the
  EEA, the UK or Switzerland (unknown means "assume it applies" there). Then the TCF v2
  string must be valid and give our vendor id, for each purpose we need to bid (1 store
  and access, 2 basic ads, 7 measure), either consent or, where TCF allows it (2 and 7;
  never 1), legitimate interest: the purpose's LI transparency bit and our vendor LI
  bit. Publisher restrictions are honoured (type 0 removes the purpose, 1 requires
  consent, 2 requires LI). Anything less is ``NO_CONSENT``. Profiles additionally need
  consent for purposes 3 and 4 (LI never counts for them); without it we bid
  contextually (``personalize`` False).
* US privacy (CCPA string, e.g. "1YYN"): an opt-out of sale (third character 'Y') or
  an unreadable string means no personalization; never a no-bid.
* GPP: not decoded. A GPP string without a legacy US privacy string means no
  personalization, because an opt-out it may carry cannot be ruled out.

A person's TC string is the same on every request, so decisions are memoized per
(string, policy) in a bounded LRU: a hit costs a dict probe, a miss a few microseconds
of decoding (``bidder.openrtb.tcf.vendor_view``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from bidder.core.nobid import NoBid
from bidder.openrtb.tcf import PURPOSES, TcfError, VendorView, vendor_view
from bidder.openrtb.view import BidRequest

DEFAULT_VENDOR_ID = 999
"""Our IAB TCF vendor id (simulated: the generator's vendor list includes it)."""
BID_PURPOSES = frozenset({1, 2, 7})
PROFILE_PURPOSES = frozenset({3, 4})
LI_ALLOWED = frozenset({2, 7, 8, 9, 10, 11})
"""Purposes that may rest on legitimate interest under TCF 2.2 (never 1, never 3-6)."""
GDPR_COUNTRIES = frozenset(
    {
        "AUT", "BEL", "BGR", "HRV", "CYP", "CZE", "DNK", "EST", "FIN", "FRA", "DEU", "GRC",
        "HUN", "IRL", "ITA", "LVA", "LTU", "LUX", "MLT", "NLD", "POL", "PRT", "ROU", "SVK",
        "SVN", "ESP", "SWE", "ISL", "LIE", "NOR", "GBR", "CHE",
    }
)  # fmt: skip
"""EU, EEA, the UK (UK GDPR) and Switzerland: where an absent regs.gdpr means yes."""
_LRU_SIZE = 65_536


class Privacy(NamedTuple):
    reason: NoBid | None
    """The no-bid reason, or None: the request may get a bid."""
    personalize: bool
    """Whether that bid may use the person's identity and profile."""


ALLOW = Privacy(None, True)
CONTEXTUAL = Privacy(None, False)
REFUSE = Privacy(NoBid.NO_CONSENT, False)
CHILD = Privacy(NoBid.COPPA, False)


@dataclass(frozen=True, slots=True)
class ConsentPolicy:
    vendor_id: int = DEFAULT_VENDOR_ID
    bid_purposes: frozenset[int] = BID_PURPOSES
    profile_purposes: frozenset[int] = PROFILE_PURPOSES

    def __post_init__(self) -> None:
        if not 1 <= self.vendor_id <= 0xFFFF:
            raise ValueError(f"TCF vendor id must be 1-65535, got {self.vendor_id}")
        if not all(1 <= p <= PURPOSES for p in self.bid_purposes | self.profile_purposes):
            raise ValueError(f"TCF purposes must be 1-{PURPOSES}")


def evaluate(request: BidRequest, policy: ConsentPolicy) -> Privacy:
    """May we bid on this request, and may the bid use the person's profile?"""
    if request.coppa:
        return CHILD
    if request.gdpr or (request.gdpr is None and request.country in GDPR_COUNTRIES):
        tcf = tcf_decision(request.consent, policy) if request.consent else REFUSE
        if tcf.reason is not None or not tcf.personalize:
            return tcf
    if request.us_privacy is not None:
        return ALLOW if us_privacy_allows(request.us_privacy) else CONTEXTUAL
    return CONTEXTUAL if request.gpp else ALLOW


def us_privacy_allows(text: str) -> bool:
    """True unless the CCPA string opts out of sale or cannot be read."""
    return len(text) == 4 and text[0] == "1" and text[2] in "N-" and text[1] in "YN-"


@functools.lru_cache(maxsize=_LRU_SIZE)
def tcf_decision(text: str, policy: ConsentPolicy) -> Privacy:
    """The GDPR answer for one TC string (memoized: a person sends the same one)."""
    try:
        view = vendor_view(text, policy.vendor_id)
    except TcfError:
        return REFUSE
    restricted = dict(view.restrictions)
    for purpose in policy.bid_purposes:
        if not _purpose_allowed(view, purpose, restricted.get(purpose), li_ok=True):
            return REFUSE
    for purpose in policy.profile_purposes:
        if not _purpose_allowed(view, purpose, restricted.get(purpose), li_ok=False):
            return CONTEXTUAL
    return ALLOW


def _purpose_allowed(v: VendorView, purpose: int, restriction: int | None, li_ok: bool) -> bool:
    bit = PURPOSES - purpose
    by_consent = bool(v.purposes_consent >> bit & 1) and v.vendor_consent
    by_li = li_ok and purpose in LI_ALLOWED and bool(v.purposes_li >> bit & 1) and v.vendor_li
    if restriction == 0:
        return False
    if restriction == 1:
        return by_consent
    if restriction == 2:
        return by_li
    return by_consent or by_li
