"""Check plans (pure): cached field lists stay right for their whole period, and the
inline decision equals the rules' own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.campaigns import CapPolicy
from fcap import keys
from fcap.plan import RESERVED, Period, build_period, build_plan, decide
from fcap.rules import Rule, Subject, capped_until, fields_at
from tests.fcap.support import DAY_S, HOUR_S, T0, cap, one_subject

pytestmark = pytest.mark.pure

WINDOWS = [
    ("fixed", HOUR_S),
    ("fixed", DAY_S),
    ("fixed", 7 * DAY_S),
    ("fixed", 30 * DAY_S),
    ("rolling", HOUR_S),
    ("rolling", 6 * HOUR_S),
    ("rolling", DAY_S),
    ("recency", 600),
]
windows = st.lists(st.sampled_from(WINDOWS), min_size=1, max_size=4, unique=True)
instants = st.integers(T0 - 40 * DAY_S * 1000, T0 + 40 * DAY_S * 1000)


def _subject(picked: list[tuple[str, int]], limit: int = 2, cid: str = "c1") -> Subject:
    return one_subject(
        *(cap("campaign", kind, s, None if kind == "recency" else limit) for kind, s in picked),
        cid=cid,
    )


@given(picked=windows, now=instants, where=st.floats(0, 1, exclude_max=True))
def test_a_period_names_the_fields_of_every_instant_it_covers(
    picked: list[tuple[str, int]], now: int, where: float
) -> None:
    subject = _subject(picked)
    period = build_period(keys.USER, [subject], now)
    assert period.lo <= now < period.hi
    probe = min(period.hi - 1, period.lo + int(where * (period.hi - period.lo)))
    rules = subject.user_rules
    assert period.fields == tuple(f for rule in rules for f in fields_at(rule, probe))


@given(picked=windows, now=instants)
def test_a_period_ends_where_some_field_changes(picked: list[tuple[str, int]], now: int) -> None:
    subject = _subject(picked)
    period = build_period(keys.USER, [subject], now)
    if any(kind != "recency" for kind, _ in picked):
        after = build_period(keys.USER, [subject], period.hi)
        assert after.fields != period.fields


values = st.one_of(st.none(), st.integers(0, 6).map(lambda n: str(n).encode()))


@given(
    size=st.sampled_from([60_000, 3_600_000]),
    buckets=st.integers(1, 4),
    limit=st.integers(0, 5),
    answer=st.lists(values, min_size=4, max_size=4),
    now=instants,
)
def test_decide_agrees_with_capped_until(
    size: int, buckets: int, limit: int, answer: list[bytes | None], now: int
) -> None:
    reach = 0 if buckets == 1 else size * (buckets - 1)
    rule = Rule("tok000", "b", size, reach, limit)
    subject = one_subject(cap("campaign", "fixed", DAY_S, 1))
    # The rule under test as a span of its own, its first value at index 0.
    count = len(fields_at(rule, now))
    span = (rule, 0, count, count == 1 and limit > 0)
    period = Period(now, now + 1, ("f",) * count, b"", ((subject, (span,)),), "")
    expected = capped_until(rule, answer[:count], now)
    assert decide(period, answer[:count], now) == ([(subject, expected)] if expected else [])


def test_decide_reports_a_granted_reservation() -> None:
    strict = one_subject(cap("campaign", "fixed", DAY_S, 1), policy=CapPolicy(count_on="bid"))
    period = build_period(keys.USER, [strict], T0)
    assert decide(period, [b"1", 1], T0) == [(strict, RESERVED)]


def test_a_fail_closed_subject_without_its_key_is_unknown_and_not_asked() -> None:
    closed = one_subject(
        cap("campaign", "fixed", DAY_S, 1), cid="x", policy=CapPolicy(on_store_error="closed")
    )
    plan = build_plan([closed], has_user=False, has_household=True)
    assert plan.unknown == {closed} and plan.sides == ()


def test_household_caps_are_asked_on_the_household_side_only() -> None:
    both = one_subject(cap("campaign", "fixed", DAY_S, 1), cap("household", "fixed", DAY_S, 2))
    plan = build_plan([both], has_user=True, has_household=True)
    assert [side.kind for side in plan.sides] == [keys.USER, keys.HOUSEHOLD]
