"""What the pipeline decided per campaign for one bid request, told only when asked.

A request carrying ``X-Campaign-Trace: 1`` is answered (200 or 204) with
``X-Campaign-Trace`` naming, per campaign, what a replay cannot see in the answer:

    eligible=c1,c2;capped=c2;shading=c1:0.8125;priced=c1:1:2500000,c2:1:1800000

- ``eligible``: the campaigns the eligibility stage (3b) kept for the request (their
  targeting, blocklists and formats matched); empty when the request ended before it;
- ``capped``: the campaigns stage 7 refused because every one of their candidates was
  over a frequency cap (not those refused because the counters could not be read);
- ``shading``: one ``campaign:ratio`` per bid sent, in the answer's order; the ratio is
  the bid price over the price the campaign would bid unshaded (``models.price``: the
  ceiling ``min(value, max bid)`` for a scored campaign, the base price otherwise), so
  1 means unshaded (second-price auctions, base-priced campaigns);
- ``priced``: one ``campaign:imp:price`` per campaign and imp that stage 8 priced, the
  campaign's best price for that imp (CPM micros, shaded: what it would bid). Only one
  per imp is sent; the others say who would have bought the impression had the ones
  priced above them not bid (``bidder.replay.supply_book``). The imp id is
  percent-encoded (``urllib.parse.quote``), so it holds no separator either.

Campaign ids may hold neither ``,`` ``;`` nor ``:`` (``bidder.core.campaign_docs``
checks ids against a plain pattern), so the form needs no escaping. Requests that
don't ask pay for one header lookup and a None check in three stages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote, unquote

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
    priced: dict[tuple[str, str], int] = field(default_factory=dict)
    """(campaign id, imp id): the campaign's best priced bid for the imp (CPM micros)."""

    def keep_eligible(self, candidates: Iterable[Candidate]) -> None:
        self.eligible = tuple(dict.fromkeys(c.campaign.id for c in candidates))

    def keep_unshaded(self, priced: Iterable[tuple[Candidate, int]]) -> None:
        for candidate, unshaded in priced:
            self.unshaded[_key(candidate)] = unshaded

    def keep_priced(self, priced: Iterable[tuple[Candidate, int]]) -> None:
        for candidate, price in priced:
            key = (candidate.campaign.id, candidate.imp.id)
            if price > self.priced.get(key, 0):
                self.priced[key] = price

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
        imps = {imp: quote(imp, safe="") for _, imp in self.priced}
        priced = ",".join(f"{cid}:{imps[imp]}:{price}" for (cid, imp), price in self.priced.items())
        return f"eligible={eligible};capped={capped};shading={shading};priced={priced}"


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
    priced: tuple[tuple[str, str, int], ...] = ()
    """(campaign id, imp id, CPM micros) of each priced campaign and imp."""


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
        priced=_priced(parts.get("priced", "")),
    )


def _priced(value: str) -> tuple[tuple[str, str, int], ...]:
    found = []
    for item in filter(None, value.split(",")):
        parts = item.split(":")
        if len(parts) != 3:
            continue
        cid, imp, price = parts
        if cid and imp and price.isascii() and price.isdigit():
            found.append((cid, unquote(imp), int(price)))
    return tuple(found)
