"""What a generated bidstream holds: ``GenSummary``, counted as the lines are made."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bidder.bidstream import inventory as inv
from bidder.bidstream._draw import Auction


@dataclass(frozen=True, slots=True)
class GenSummary:
    """What a generated stream holds; every mapping is sorted by key."""

    requests: int
    auctions: int
    seed: int
    span_s: float
    last_t_ms: int
    valid: int
    malformed: int
    malformed_kinds: dict[str, int]
    junk: int
    junk_kinds: dict[str, int]
    duplicate_groups: int
    duplicate_copies: int
    """Requests beyond the first of their group."""
    ssps: dict[str, int]
    ortb: dict[str, int]
    channels: dict[str, int]
    media: dict[str, int]
    """Impressions (not requests) by banner / video / native."""
    multi_imp: int
    countries: dict[str, int]
    """Valid requests by device.geo.country; 'none' when geo is absent."""
    gdpr: int
    consent_strings: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Tally:
    """Counts for the summary, fed as lines are made."""

    def __init__(self) -> None:
        self.c: Counter[str] = Counter()
        self.last_t_ms = 0
        self.ssps: Counter[str] = Counter()
        self.ortb: Counter[str] = Counter()
        self.channels: Counter[str] = Counter()
        self.media: Counter[str] = Counter()
        self.countries: Counter[str] = Counter()
        self.junk_kinds: Counter[str] = Counter()
        self.malformed_kinds: Counter[str] = Counter()

    def request(self, a: Auction, ssp: inv.Ssp, doc: dict[str, Any], t_ms: int, copy: int) -> None:
        self.last_t_ms = max(self.last_t_ms, t_ms)
        self.c["valid"] += 1
        self.c["duplicate_groups"] += copy == 1
        self.c["duplicate_copies"] += copy > 0
        self.c["multi_imp"] += len(a.imps) > 1
        self.c["gdpr"] += a.consent is not None
        user = doc["user"]
        self.c["consent_strings"] += "consent" in user or "consent" in user.get("ext", {})
        self.ssps[ssp.name] += 1
        self.ortb[ssp.ortb] += 1
        self.channels[a.channel] += 1
        self.countries[a.country or "none"] += 1
        self.media.update(imp.media for imp in a.imps)
        if a.junk is not None:
            self.c["junk"] += 1
            self.junk_kinds[a.junk] += 1

    def malformed(self, ssp: inv.Ssp, kind: str, t_ms: int) -> None:
        self.last_t_ms = max(self.last_t_ms, t_ms)
        self.c["malformed"] += 1
        self.ssps[ssp.name] += 1
        self.malformed_kinds[kind] += 1

    def summary(self, requests: int, auctions: int, seed: int, span_s: float) -> GenSummary:
        return GenSummary(
            requests=requests,
            auctions=auctions,
            seed=seed,
            span_s=span_s,
            last_t_ms=self.last_t_ms,
            valid=self.c["valid"],
            malformed=self.c["malformed"],
            malformed_kinds=_sorted(self.malformed_kinds),
            junk=self.c["junk"],
            junk_kinds=_sorted(self.junk_kinds),
            duplicate_groups=self.c["duplicate_groups"],
            duplicate_copies=self.c["duplicate_copies"],
            ssps=_sorted(self.ssps),
            ortb=_sorted(self.ortb),
            channels=_sorted(self.channels),
            media=_sorted(self.media),
            multi_imp=self.c["multi_imp"],
            countries=_sorted(self.countries),
            gdpr=self.c["gdpr"],
            consent_strings=self.c["consent_strings"],
        )


def _sorted(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items()))
