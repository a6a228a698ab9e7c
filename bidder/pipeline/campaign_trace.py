"""What the pipeline decided per campaign for one bid request, told only when asked.

A request carrying ``X-Campaign-Trace: 1`` is answered (200 or 204) with
``X-Campaign-Trace`` naming, per campaign, what a replay cannot see in the answer:

    eligible=c1,c2;capped=c2;shading=c1:0.8125

- ``eligible``: the campaigns the eligibility stage (3b) kept for the request (their
  targeting, blocklists and formats matched); empty when the request ended before it;
- ``capped``: the campaigns stage 7 refused because every one of their candidates was
  over a frequency cap (not those refused because the counters could not be read);
- ``shading``: one ``campaign:ratio`` per bid sent, in the answer's order; the ratio is
  the bid price over the price the campaign would bid unshaded (``models.price``: the
  ceiling ``min(value, max bid)`` for a scored campaign, the base price otherwise), so
  1 means unshaded (second-price auctions, base-priced campaigns).

Campaign ids may hold neither ``,`` ``;`` nor ``:`` (``bidder.core.campaign_docs``
checks ids against a plain pattern), so the form needs no escaping. Requests that
don't ask pay for one header lookup and a None check in three stages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bidder.decide.eligibility import Candidate

HEADER = "X-Campaign-Trace"


class SentBid(Protocol):
    """A bid that went out (``bidder.pipeline.runner.PricedCandidate``, which imports
    this module)."""

    @property
    def candidate(self) -> Candidate: ...

    @property
    def price_cpm_micros(self) -> int: ...


UnshadedKey = tuple[str, str, str]
"""(campaign id, creative id, imp id): one priced candidate."""


@dataclass(slots=True)
class CampaignTrace:
    eligible: tuple[str, ...] = ()
    capped: tuple[str, ...] = ()
    unshaded: dict[UnshadedKey, int] = field(default_factory=dict)
    """What each priced candidate would bid unshaded (CPM micros)."""
    shading: list[tuple[str, float]] = field(default_factory=list)
    """(campaign id, bid price / unshaded price) of each bid sent."""

    def keep_eligible(self, candidates: Iterable[Candidate]) -> None:
        self.eligible = tuple(dict.fromkeys(c.campaign.id for c in candidates))

    def keep_unshaded(self, priced: Iterable[tuple[Candidate, int]]) -> None:
        for candidate, unshaded in priced:
            self.unshaded[_key(candidate)] = unshaded

    def sent(self, bids: Sequence[SentBid]) -> None:
        """The bids that went out (a ``Context`` finisher)."""
        for bid in bids:
            unshaded = self.unshaded.get(_key(bid.candidate))
            if unshaded:
                ratio = bid.price_cpm_micros / unshaded
                self.shading.append((bid.candidate.campaign.id, ratio))

    def header(self) -> str:
        shading = ",".join(f"{cid}:{ratio:.4f}" for cid, ratio in self.shading)
        eligible, capped = ",".join(self.eligible), ",".join(self.capped)
        return f"eligible={eligible};capped={capped};shading={shading}"


def _key(candidate: Candidate) -> UnshadedKey:
    return (candidate.campaign.id, candidate.creative.id, candidate.imp.id)


def capped_campaigns(over_cap: Iterable[str], allowed: Iterable[str]) -> tuple[str, ...]:
    """The campaigns with a candidate over a cap (``over_cap``, one id per candidate)
    and none ``allowed``: the cap, not the store, took their bid away."""
    kept = set(allowed)
    return tuple(cid for cid in dict.fromkeys(over_cap) if cid not in kept)


@dataclass(frozen=True, slots=True)
class TraceFigures:
    """An ``X-Campaign-Trace`` answer header, read back."""

    eligible: tuple[str, ...] = ()
    capped: tuple[str, ...] = ()
    shading: tuple[tuple[str, float], ...] = ()


def parse_header(value: str) -> TraceFigures:
    """The parts of an ``X-Campaign-Trace`` header; malformed parts are dropped."""
    parts = dict(part.partition("=")[::2] for part in value.split(";"))
    shading = []
    for item in filter(None, parts.get("shading", "").split(",")):
        cid, _, ratio = item.rpartition(":")
        try:
            shading.append((cid, float(ratio)))
        except ValueError:
            continue
    return TraceFigures(
        eligible=tuple(filter(None, parts.get("eligible", "").split(","))),
        capped=tuple(filter(None, parts.get("capped", "").split(","))),
        shading=tuple((cid, ratio) for cid, ratio in shading if cid),
    )
