"""Caps across regions, judged after the fact: over-delivery and convergence. Pure.

**Over-delivery.** ``fcap.audit`` judges each delivered impression against the
impressions of its counters that counted at its bid instant, and calls a finding *in
flight* when the impressions already counted (``fcap.audit.counted_times``) before its
cap check were under the limit. Across regions, an impression billed in another region
is counted there at once but reaches this region's store only after the replication
delay. So the audit is run once per region with each impression's count time as that
region saw it (``seen_from``: plus ``delay_ms + slack_ms`` when counted elsewhere); a
finding of that region still not explained is *beyond delay*: neither bids in flight
nor replication explain it. The bound (``fcap.regions.over_cap_bound``) says a counter
goes over its limit by at most the impressions of that person shown in the other
regions within one delay: ``peak_within`` measures that figure on the replay.

**Convergence.** Once the replicators have caught up, every region's store holds the
same slots, and for every user the merged count of each counter is the number of its
impressions that were counted (``expected_counts``, ``merged_counts``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bidder.core.tokens import NoticeClaims
from fcap.audit import DEADLINE_MS, AboveCap, OverDelivery, cap_over_delivery
from fcap.regions import is_recency, split_slot
from fcap.rules import Subject

SLACK_MS = 150
"""What replication adds to the delay on an idle machine: the replicator's poll (50
ms), the apply round trips, and a loaded 2-core box's scheduling."""


@dataclass(frozen=True, slots=True)
class RegionalOverDelivery:
    overall: OverDelivery
    """Against count times alone (as if there were one region)."""
    beyond_delay: tuple[AboveCap, ...]
    """Findings that neither bids in flight nor replication delay explain."""
    peak_within_delay: int
    """The most impressions of one counter counted within one delay (+ slack): the
    measured ``rate x delay`` of the bound."""

    @property
    def max_excess(self) -> int:
        return self.overall.max_excess


def seen_from(
    region: str,
    counted_ms: Mapping[int, int],
    region_of: Mapping[int, str],
    delay_ms: int,
    slack_ms: int = SLACK_MS,
) -> dict[int, int]:
    """When each counted impression's count could be read in ``region``."""
    late = delay_ms + slack_ms
    return {bid: t + (0 if region_of.get(bid) == region else late) for bid, t in counted_ms.items()}


def regional_over_delivery(
    delivered: Iterable[NoticeClaims],
    subjects: Mapping[tuple[str, str], Subject],
    counted_ms: Mapping[int, int],
    region_of: Mapping[int, str],
    delay_ms: int,
    slack_ms: int = SLACK_MS,
    deadline_ms: float = DEADLINE_MS,
) -> RegionalOverDelivery:
    """``region_of``: bid id -> the region that bid (and counted) it."""
    delivered = list(delivered)
    overall = cap_over_delivery(delivered, subjects, counted_ms=counted_ms, deadline_ms=deadline_ms)
    beyond: list[AboveCap] = []
    for region in sorted(set(region_of.values())):
        seen = seen_from(region, counted_ms, region_of, delay_ms, slack_ms)
        audit = cap_over_delivery(delivered, subjects, counted_ms=seen, deadline_ms=deadline_ms)
        beyond += [
            f for f in audit.above_cap if region_of.get(f.bid_id) == region and not f.in_flight
        ]
    peak = peak_within(delivered, counted_ms, delay_ms + slack_ms)
    return RegionalOverDelivery(overall, tuple(beyond), peak)


def peak_within(
    delivered: Iterable[NoticeClaims], counted_ms: Mapping[int, int], width_ms: int
) -> int:
    """The most impressions of one user counted within ``width_ms`` of each other."""
    times: dict[str, list[int]] = defaultdict(list)
    for claims in delivered:
        if claims.user_key is not None and claims.bid_id in counted_ms:
            times[claims.user_key].append(counted_ms[claims.bid_id])
    peak = 0
    for series in times.values():
        series.sort()
        start = 0
        for end, t in enumerate(series):
            while t - series[start] > width_ms:
                start += 1
            peak = max(peak, end - start + 1)
    return peak


def counted_tokens(subjects: Iterable[Subject]) -> frozenset[str]:
    """The bucket counters only win notices write: tokens of count-on-win subjects that
    no reserve-at-bid or viewable-counted subject shares (those are counted at the bid
    or the view, which billing does not show)."""
    subjects = list(subjects)
    win = {r.token for s in subjects if s.count_event == "win" for r in s.user_count_rules}
    other = {r.token for s in subjects if s.count_event != "win" for r in s.user_count_rules}
    buckets = {r.token for s in subjects for r in s.user_count_rules if r.kind == "b"}
    return frozenset((win - other) & buckets)


def expected_counts(
    billed: Iterable[NoticeClaims],
    subjects: Mapping[tuple[str, str], Subject],
    tokens: frozenset[str],
) -> Counter[str]:
    """User key -> the increments its billed impressions made to ``tokens``' counters."""
    out: Counter[str] = Counter()
    for claims in {c.bid_id: c for c in billed}.values():
        subject = subjects[claims.campaign_id, claims.creative_id]
        if claims.user_key is not None and subject.count_event == "win":
            out[claims.user_key] += sum(r.token in tokens for r in subject.user_count_rules)
    return out


def merged_count(slots: Mapping[str, int], tokens: frozenset[str]) -> int:
    """The merged total of one user's ``tokens`` bucket counters, from its hash's slots."""
    total = 0
    for name, value in slots.items():
        found = split_slot(name)
        if found is not None and not is_recency(found[0]) and found[0][:6] in tokens:
            total += value
    return total
