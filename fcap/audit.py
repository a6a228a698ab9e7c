"""Cap over-delivery of a replay, judged after the fact by brute force.

Input: the impressions the exchange delivered, as the claims of their signed notice
tokens (``NoticeClaims``: user, household, campaign, creative, bid instant), and the
campaign book's subjects (``fcap.build_subjects``). For every cap an impression was
checked against, the audit counts the earlier impressions of the same counter (user
or household key, rule token) that still counted at its bid instant, with the same
pure window rules the bidder uses (``fcap.rules.counts_at``). At ``limit`` or more
the impression is *above the cap*: it should not have been delivered. One that
brings a counter to its limit is counted in ``reached_limit``: the replay tested
that cap, so a zero over-delivery means something.

The counters follow the bidder's write fan-out (``Subject.user_count_rules``: an
advertiser window counts the impressions of every campaign of the advertiser).
Impressions of viewable-counted campaigns are left out: the bidder counts their view
notices, not their billed impressions, and the audit judges billed impressions.

With ``counted_ms`` (bid id -> when its count was surely written), each finding also
says how many of the earlier impressions had been counted before the bid's cap check
(one deadline before its token's stamp, at the latest):
count-on-win lets the bids in flight pass a cap by design (docs/fcap.md), so only
findings whose *counted* impressions already reached the limit (``not_in_flight``)
need another explanation: a failed check that failed open, a count that failed or was
lost with a master (failover).

The count times come from the exchange's side (``counted_times``): the bidder writes an
impression's count before it answers the notice that billed it, so the answer's
arrival bounds the count from above, however long the ledger's fsync or a loaded
machine made it wait. The ledger's billing time does not: it is stamped before both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bidder.core.tokens import NoticeClaims, TokenError, TokenSigner
from fcap.rules import Rule, Subject, counts_at

DEADLINE_MS = 8.0
"""The bidder's default deadline. A bid's cap check ran before its token was stamped,
by at most the run's deadline: an impression counted less than that (and two clocks'
millisecond rounding, ``ROUNDING_MS``) before the stamp may not have been seen."""

ROUNDING_MS = 2

ANSWERED_NOT_DEFERRED = frozenset({200, 204})
"""A notice answered so was billed (or was a duplicate of a billed one) before the
answer; 202 is a deferred one, billed and counted later, when is not known."""


@dataclass(frozen=True, slots=True)
class AboveCap:
    bid_id: int
    campaign_id: str
    counter: str
    """The user or household key of the counter."""
    token: str
    limit: int
    counting: int
    """Earlier impressions of the counter still counting at its bid instant (>= limit)."""
    counted: int | None
    """Of those, the ones counted before its cap check (``in_flight_ms`` before it was
    bid); None without count times."""

    @property
    def in_flight(self) -> bool | None:
        """Explained by bids in flight (the counted ones were under the limit)."""
        return None if self.counted is None else self.counted < self.limit


@dataclass(frozen=True, slots=True)
class OverDelivery:
    impressions: int
    """Delivered impressions audited (viewable-counted campaigns excluded)."""
    above_cap: tuple[AboveCap, ...]
    reached_limit: int = 0
    """Delivered impressions that brought a counter to its limit: a later one of the
    same counter in the window would be above the cap. Zero means the replay never
    tested a cap, so ``over_cap`` == 0 would say nothing."""

    @property
    def over_cap(self) -> int:
        """Delivered impressions above at least one cap."""
        return len({finding.bid_id for finding in self.above_cap})

    @property
    def not_in_flight(self) -> int:
        """Impressions above a cap that bids in flight do not explain (0 without count
        times: unknown)."""
        return len({f.bid_id for f in self.above_cap if f.in_flight is False})

    @property
    def max_excess(self) -> int:
        """The most impressions any counter went over its limit by, at any instant."""
        return max((f.counting - f.limit + 1 for f in self.above_cap), default=0)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest (for the chaos report)."""
        return {
            "impressions": self.impressions,
            "over_cap": self.over_cap,
            "over_cap_not_in_flight": self.not_in_flight,
            "max_excess": self.max_excess,
            "reached_limit": self.reached_limit,
            "by_campaign": _by_campaign(self.above_cap),
        }


def cap_over_delivery(
    delivered: Iterable[NoticeClaims],
    subjects: Mapping[tuple[str, str], Subject],
    *,
    counted_ms: Mapping[int, int] | None = None,
    deadline_ms: float = DEADLINE_MS,
) -> OverDelivery:
    """Audit ``delivered`` (one claims per impression; duplicates by bid id are
    dropped) against the caps of ``subjects`` ((campaign id, creative id) -> Subject),
    bid under ``deadline_ms``. Raises KeyError for an impression of a campaign/creative
    not in ``subjects``."""
    in_flight_ms = math.ceil(deadline_ms) + ROUNDING_MS
    impressions = sorted(
        {c.bid_id: c for c in delivered}.values(), key=lambda c: (c.issued_ms, c.bid_id)
    )
    audited = [c for c in impressions if _subject(subjects, c).count_event != "viewable"]
    by_counter = _counters(audited, subjects)
    found: list[AboveCap] = []
    reached: set[int] = set()
    for claims in audited:
        for rule, key in _checked(_subject(subjects, claims), claims):
            earlier = _counting(by_counter[rule.token, key], rule, claims)
            if len(earlier) == rule.limit - 1:
                reached.add(claims.bid_id)
            elif len(earlier) >= rule.limit:
                counted = _counted(earlier, claims.issued_ms, counted_ms, in_flight_ms)
                found.append(AboveCap(
                    claims.bid_id, claims.campaign_id, key, rule.token, rule.limit,
                    len(earlier), counted,
                ))  # fmt: skip
    return OverDelivery(len(audited), tuple(found), len(reached))


def counted_times(answers: Iterable[tuple[str, int, int]], signer: TokenSigner) -> dict[int, int]:
    """Bid id -> when its impression's count was surely written, from the exchange's
    notices as (URL or path with query, the bidder's status, when the answer arrived):
    the last answer to a notice of that bid. An impression with a notice that failed or
    was deferred has none (its count time is not known)."""
    last: dict[int, int] = {}
    unknown: set[int] = set()
    for url, status, answered_ms in answers:
        for claims in claims_from_notice_urls([url], signer):
            if status in ANSWERED_NOT_DEFERRED:
                last[claims.bid_id] = max(answered_ms, last.get(claims.bid_id, answered_ms))
            else:
                unknown.add(claims.bid_id)
    return {bid_id: at for bid_id, at in last.items() if bid_id not in unknown}


def claims_from_notice_urls(urls: Iterable[str], signer: TokenSigner) -> list[NoticeClaims]:
    """The claims of every notice URL (or bare token) whose token ``signer`` verifies,
    one per bid id; URLs without a valid token are skipped."""
    found: dict[int, NoticeClaims] = {}
    for url in urls:
        tokens = parse_qs(urlsplit(url).query).get("t", []) if "?" in url else [url]
        for token in tokens:
            try:
                claims = signer.verify(token)
            except TokenError:
                continue
            found.setdefault(claims.bid_id, claims)
    return list(found.values())


def _subject(subjects: Mapping[tuple[str, str], Subject], claims: NoticeClaims) -> Subject:
    return subjects[claims.campaign_id, claims.creative_id]


def _counters(
    impressions: list[NoticeClaims], subjects: Mapping[tuple[str, str], Subject]
) -> dict[tuple[str, str], list[NoticeClaims]]:
    """(rule token, user or household key) -> the impressions the bidder counts in it."""
    out: dict[tuple[str, str], list[NoticeClaims]] = defaultdict(list)
    for claims in impressions:
        subject = _subject(subjects, claims)
        if claims.user_key is not None:
            for rule in subject.user_count_rules:
                out[rule.token, claims.user_key].append(claims)
        if claims.household_key is not None:
            for rule in subject.household_rules:
                out[rule.token, claims.household_key].append(claims)
    return out


def _checked(subject: Subject, claims: NoticeClaims) -> Iterator[tuple[Rule, str]]:
    """(rule, counter key) of every cap the bid was checked against."""
    for rules, key in (
        (subject.user_rules, claims.user_key),
        (subject.household_rules, claims.household_key),
    ):
        if key is not None:
            yield from ((rule, key) for rule in rules)


def _counting(counter: list[NoticeClaims], rule: Rule, claims: NoticeClaims) -> list[NoticeClaims]:
    """The impressions of ``counter`` before ``claims`` that still count at its bid."""
    order = (claims.issued_ms, claims.bid_id)
    return [
        other
        for other in counter
        if (other.issued_ms, other.bid_id) < order
        and counts_at(rule, other.issued_ms, claims.issued_ms)
    ]


def _counted(
    earlier: list[NoticeClaims],
    bid_ms: int,
    counted_ms: Mapping[int, int] | None,
    in_flight_ms: int,
) -> int | None:
    if counted_ms is None:
        return None
    return sum(
        other.bid_id in counted_ms and counted_ms[other.bid_id] + in_flight_ms <= bid_ms
        for other in earlier
    )


def _by_campaign(findings: Iterable[AboveCap]) -> dict[str, int]:
    out: dict[str, set[int]] = defaultdict(set)
    for finding in findings:
        out[finding.campaign_id].add(finding.bid_id)
    return {campaign: len(bids) for campaign, bids in sorted(out.items())}
