"""Check plans: what a check of one candidate set sends, and how it decides. Pure.

A bidder checks the same candidate sets again and again, and the fields a rule reads
change only at its bucket edges. So the work that does not depend on the user is
done once and cached (``FcapStore`` keeps the plans):

- a ``Plan`` per (candidates, whether the request has a user key, a household key):
  which subjects are unknown (a cap on a side whose key is missing), and one
  ``SidePlan`` per side (user, household) to ask, with its subjects and their rules;
- a ``Period`` per side plan: the field names a check reads (``rules.fields_at``),
  already encoded as RESP bulk strings, where each rule's values are in the answer,
  the reserve requests for check.lua, and the instants ``[lo, hi)`` (caller ms)
  between which all of that holds. A check outside them (a new bucket, a clock set
  back) builds the period again. A ``Period`` is immutable: a check keeps the one it
  sent while it waits, whatever other checks do to the side plan meanwhile.

``decide`` turns the values read into "capped until when" per subject with the same
rule as ever (``rules.capped_until``), skipping the call for the common one-field
bucket rule whose count is under its limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fcap import keys
from fcap.rules import Rule, Subject, capped_until, fields_at

RESERVED = -1
"""In ``decide``'s answer: the subject was under every cap and a slot was reserved."""
_FOREVER = 1 << 62

Span = tuple[Rule, int, int, bool]
"""A rule, the index of its first value in the answer, its value count, and whether it
is a one-field bucket rule with a positive limit (decided inline)."""


@dataclass(frozen=True, slots=True)
class Period:
    lo: int
    hi: int
    """The instants (caller ms) ``[lo, hi)`` for which every field name below holds."""
    fields: tuple[str, ...]
    packed: bytes
    """``fields`` as RESP bulk strings, to follow a command header on the wire."""
    spans: tuple[tuple[Subject, tuple[Span, ...]], ...]
    requests: str
    """check.lua's reserve requests; '' when no subject of the side reserves."""
    stale: tuple[tuple[Subject, tuple[Span, ...]], ...] = ()
    """The spans of subjects whose class tolerates stale counts (``room``)."""


class SidePlan:
    """The subjects asked on one side (``keys.USER`` or ``keys.HOUSEHOLD``)."""

    __slots__ = ("_period", "kind", "subjects")

    def __init__(self, kind: str, subjects: Sequence[Subject]) -> None:
        self.kind = kind
        self.subjects = tuple(subjects)
        self._period: Period | None = None

    def at(self, now_ms: int) -> Period:
        period = self._period
        if period is None or not period.lo <= now_ms < period.hi:
            period = self._period = build_period(self.kind, self.subjects, now_ms)
        return period


@dataclass(frozen=True, slots=True)
class Plan:
    unknown: frozenset[Subject]
    """Subjects with caps on a side whose key the request lacks."""
    sides: tuple[SidePlan, ...]
    """The sides to ask, user first; empty when there is nothing to read."""


def build_plan(subjects: Sequence[Subject], has_user: bool, has_household: bool) -> Plan:
    unknown = frozenset(
        s
        for s in subjects
        if (s.user_rules and not has_user) or (s.household_rules and not has_household)
    )
    # A fail-closed subject with unknown counters is out anyway: don't touch its others.
    live = [s for s in subjects if not (s.fail_closed and s in unknown)]
    user = [s for s in live if s.user_rules] if has_user else []
    house = [s for s in live if s.household_rules] if has_household else []
    sides = [SidePlan(kind, side) for kind, side in ((keys.USER, user), (keys.HOUSEHOLD, house))]
    return Plan(unknown, tuple(side for side in sides if side.subjects))


def rules_of(kind: str, subject: Subject) -> tuple[Rule, ...]:
    return subject.user_rules if kind == keys.USER else subject.household_rules


def build_period(kind: str, subjects: Sequence[Subject], now_ms: int) -> Period:
    fields: list[str] = []
    spans = []
    requests = []
    lo, hi = -_FOREVER, _FOREVER
    for subject in subjects:
        mine: list[Span] = []
        for rule in rules_of(kind, subject):
            names = fields_at(rule, now_ms)
            single = rule.kind == "b" and len(names) == 1 and rule.limit > 0
            mine.append((rule, len(fields), len(names), single))
            fields += names
            rule_lo, rule_hi = _stable(rule, now_ms)
            lo, hi = max(lo, rule_lo), min(hi, rule_hi)
        spans.append((subject, tuple(mine)))
        if subject.reserve:
            requests.append(_reserve_request(mine))
    packed = b"".join(b"$%d\r\n%s\r\n" % (len(f), f.encode("ascii")) for f in fields)
    stale = tuple((subject, mine) for subject, mine in spans if subject.max_stale_ms)
    return Period(lo, hi, tuple(fields), packed, tuple(spans), " ".join(requests), stale)


def _stable(rule: Rule, now_ms: int) -> tuple[int, int]:
    """The instants around ``now_ms`` for which ``fields_at(rule, ·)`` does not change:
    neither the newest bucket (``now // size``) nor the oldest (``(now - reach) //
    size``) moves."""
    if rule.kind == "t":
        return -_FOREVER, _FOREVER
    size, reach = rule.size_ms, rule.reach_ms
    last = now_ms // size
    first = (now_ms - reach) // size
    lo = max(last * size, first * size + reach)
    hi = min((last + 1) * size, (first + 1) * size + reach)
    return lo, hi


def _reserve_request(spans: list[Span]) -> str:
    """check.lua's reserve request of one subject: its rules and where their fields are."""
    rules = (f"{r.kind} {r.limit} {r.size_ms} {first + 1} {n}" for r, first, n, _ in spans)
    return " ".join((str(len(spans)), *rules))


def decide(
    period: Period, raw: Sequence[bytes | int | None], now_ms: int
) -> list[tuple[Subject, int]]:
    """The subjects of the period that are not simply under their caps, each with
    RESERVED (a slot was taken) or the instant it stops being capped; in order.
    ``raw``: the values of ``period.fields`` in order, then (with reserve requests)
    one grant flag per reserving subject."""
    granted = iter(raw[len(period.fields) :])
    out = []
    for subject, spans in period.spans:
        if subject.reserve and next(granted) == 1:
            out.append((subject, RESERVED))
            continue
        until = 0
        for rule, first, count, single in spans:
            if single:
                value = raw[first]
                if value is None or int(value) < rule.limit:
                    continue
            capped = capped_until(rule, raw[first : first + count], now_ms)
            if capped > until:
                until = capped
        if until:
            out.append((subject, until))
    return out


def room(period: Period, raw: Sequence[bytes | int | None]) -> dict[Subject, int]:
    """How many more impressions the caps of each ``period.stale`` subject not capped
    allow on this side, by the values read: the smallest of its rules' limit less the
    count, a recency rule allowing one (its gap starts with it)."""
    out = {}
    for subject, spans in period.stale:
        left = _FOREVER
        for rule, first, count, _ in spans:
            if rule.kind == "t":
                left = min(left, 1)  # the caller asks only for subjects not capped
            else:
                used = sum(int(v) for v in raw[first : first + count] if v)
                left = min(left, rule.limit - used)
        out[subject] = max(left, 0)
    return out
