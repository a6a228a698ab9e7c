"""Impressions delivered above a frequency cap, per campaign, from the won bids' tokens.

Every won bid's nurl/burl carries the bidder's notice token, whose claims name the
impression's user, household, campaign, creative and bid instant. After the replay
they are judged, in bid order, against the caps of the campaign file given to the
replay (``fcap.audit.cap_over_delivery``, the audit the chaos suite runs): an
impression is over a cap when a counter of its user or household already held the
limit's worth of earlier delivered impressions inside the window.

The tokens are read without the signing key (``bidder.core.tokens.read_claims``): the
replay reads its own bidder's answers, as it reads the unchecked mark. Warm-up wins
count in the counters (the bidder counted them too) but only measured ones are
reported. Campaigns whose caps count viewable impressions, and campaigns or creatives
the campaign file does not hold, are not audited: their figure is null. The replay has
no billing times, so an impression over a cap is not split into "bids in flight" and
the rest as the chaos suite's is: a count-on-win cap lets the bids made while an
earlier impression's notice is on its way through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from bidder.bidstream.auction import Win
from bidder.core.tokens import NoticeClaims, read_claims
from fcap.audit import cap_over_delivery
from fcap.rules import Subject


@dataclass(slots=True)
class OverCapTally:
    subjects: Mapping[tuple[str, str], Subject] = field(default_factory=dict)
    """The campaign file's cap subjects; empty: no audit (every figure null)."""
    delivered: list[NoticeClaims] = field(default_factory=list)
    measured: set[int] = field(default_factory=set)
    """Bid ids of the measured wins."""

    def deliver(self, wins: Iterable[Win], measured: bool) -> None:
        for win in wins:
            claims = claims_of(win)
            if claims is None:
                continue
            self.delivered.append(claims)
            if measured:
                self.measured.add(claims.bid_id)

    def by_campaign(self) -> dict[str, int]:
        """Measured impressions above at least one cap, per audited campaign (zeros too)."""
        known = [c for c in self.delivered if (c.campaign_id, c.creative_id) in self.subjects]
        audit = cap_over_delivery(known, self.subjects)
        audited = {cid for (cid, _), s in self.subjects.items() if s.count_event != "viewable"}
        counts = dict.fromkeys(sorted(audited), 0)
        over = {(f.campaign_id, f.bid_id) for f in audit.above_cap if f.bid_id in self.measured}
        for campaign_id, _ in over:
            counts[campaign_id] += 1
        return counts


def claims_of(win: Win) -> NoticeClaims | None:
    """The claims of the token in the win's notice URL, unverified; None without one."""
    url = win.nurl or win.burl
    if not url:
        return None
    token = dict(parse_qsl(urlsplit(url).query)).get("t", "")
    return read_claims(token) if token else None
