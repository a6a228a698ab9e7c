"""The pure reconciler tick and the exactly-once spend book."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bidder.core.ledger import LedgerEntry
from pacing.curves import DAY_MS, STANDARD
from pacing.lease import Lease, ReturnedLease
from pacing.reconcile import (
    AdvertiserMismatch,
    Budget,
    PacingConfig,
    Reconcile,
    SpendBook,
    TickResult,
    advertiser_mismatches,
    node_leases,
)

pytestmark = pytest.mark.pure

DAY0 = 1_767_225_600_000
NOON = DAY0 + 12 * 3_600_000


def _budget(amount: int = 10_000_000_000, active: bool = True) -> Budget:
    return Budget("c1", "adv", amount, STANDARD, active)


def _entry(ledger_id: int, cost: int, campaign: str = "c1", adv: str = "adv") -> LedgerEntry:
    return LedgerEntry(ledger_id, "win", campaign, adv, "cr", f"imp{ledger_id}", "b", cost * 1000,
                       cost, 1, NOON)  # fmt: skip


def test_every_live_node_gets_a_fresh_lease_each_tick() -> None:
    core = Reconcile()
    first = core.tick(NOON, [_budget()], {"c1": 0}, nodes=50).plans[0]
    second = core.tick(NOON + 5_000, [_budget()], {"c1": 0}, nodes=50).plans[0]
    assert second.lease.lease_id > first.lease.lease_id
    assert first.lease.amount_micros == 694_444
    assert first.lease.expires_ms == NOON + 10_000


def test_a_campaign_without_a_spend_figure_gets_no_lease() -> None:
    result = Reconcile().tick(NOON, [_budget()], {}, nodes=5)
    assert result.plans == [] and result.skipped == ["c1"]


def test_a_paused_campaign_gets_empty_leases() -> None:
    plan = Reconcile().tick(NOON, [_budget(active=False)], {"c1": 0}, 5).plans[0]
    assert plan.paused and plan.lease.amount_micros == 0 and plan.lease.rate_ppm == 0


def test_underspend_raises_the_rate_and_overspend_lowers_it() -> None:
    behind = Reconcile(PacingConfig(initial_rate=0.5))
    ahead = Reconcile(PacingConfig(initial_rate=0.5))
    target = STANDARD.target_micros(10_000_000_000, 12 * 3600.0)
    assert behind.tick(NOON, [_budget()], {"c1": target - 50_000_000}, 5).plans[0].rate > 0.5
    assert ahead.tick(NOON, [_budget()], {"c1": target + 50_000_000}, 5).plans[0].rate < 0.5


BUDGET = 5_000_000_000
TICK_MS = 5_000
MAX_COST = 12_500
"""The most one impression can cost at a $12.50 CPM: one in-flight win past a lease."""

near_exhaustion = st.integers(0, 300_000_000)
"""Budget left before the first tick: where grants are limited by the budget, not the chunk."""
steps = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 1_000)), min_size=1, max_size=40)
"""Per tick: ticks since the previous one (late ticks let leases expire) and the share
of the previous exposure, in permille, the nodes spend meanwhile."""


def _realistic(
    core: Reconcile, left: int, nodes: int, steps: list[tuple[int, int]]
) -> list[TickResult]:
    """Ticks where nodes spend only from their leases: at most the previous exposure."""
    spent, exposure, results = BUDGET - left, 0, []
    for k, (permille, now) in enumerate(_times(steps)):
        spent += exposure * permille // 1_000
        results.append(core.tick(now, [_budget(BUDGET)], {"c1": spent}, nodes))
        exposure = results[k].plans[0].exposure_micros
    return results


def _times(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(permille, tick instant) per step."""
    now, out = NOON, []
    for gap, permille in steps:
        now += gap * TICK_MS
        out.append((permille, now))
    return out


@given(near_exhaustion, st.integers(1, 60), steps)
@example(left=17_361_111 * 3, nodes=1, steps=[(1, 1_000)] * 5)
def test_spend_from_leases_never_reports_a_violation_nor_exceeds_the_budget(
    left: int, nodes: int, steps: list[tuple[int, int]]
) -> None:
    for result in _realistic(Reconcile(), left, nodes, steps):
        assert result.violations == []
        plan = result.plans[0]
        assert plan.spent_micros + plan.exposure_micros <= BUDGET


@given(near_exhaustion, st.integers(1, 60), steps, st.integers(1, 10**8))
def test_spend_beyond_the_leases_is_reported(
    left: int, nodes: int, steps: list[tuple[int, int]], beyond: int
) -> None:
    core = Reconcile()
    last = _realistic(core, left, nodes, steps)[-1].plans[0]
    spent = last.spent_micros + last.exposure_micros + beyond  # one node spends past its lease
    now = _times(steps)[-1][1] + TICK_MS
    result = core.tick(now, [_budget(BUDGET)], {"c1": spent}, nodes)
    assert any("beyond its leases" in v for v in result.violations)


@given(near_exhaustion, st.integers(1, 60), steps, st.lists(st.integers(0, 60), max_size=40))
def test_in_flight_wins_past_a_lease_overspend_by_at_most_their_cost(
    left: int, nodes: int, steps: list[tuple[int, int]], in_flight: list[int]
) -> None:
    """Bids admitted against a lease's rest may all win: each costs at most MAX_COST."""
    core, spent, exposure, overshoot = Reconcile(), BUDGET - left, 0, 0
    wins_per_tick = in_flight + [0] * len(steps)
    for (permille, now), wins in zip(_times(steps), wins_per_tick, strict=False):
        extra = wins * MAX_COST if exposure else 0  # no lease, no bids in flight
        spent += exposure * permille // 1_000 + extra
        overshoot += extra
        plan = core.tick(now, [_budget(BUDGET)], {"c1": spent}, nodes).plans[0]
        exposure = plan.exposure_micros
        assert plan.overdrawn_micros <= extra
        assert spent <= BUDGET + overshoot
        assert plan.spent_micros + plan.exposure_micros <= BUDGET + overshoot


def test_spend_drawn_from_a_lease_is_not_counted_again_as_exposure() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(900)
    core.tick(NOON, [budget], {"c1": 700}, nodes=1)  # lease 1: 100
    full = core.tick(NOON + TICK_MS, [budget], {"c1": 700}, nodes=1).plans[0]  # lease 2: 100
    assert full.spent_micros + full.exposure_micros == 900
    # lease 1 spent in full and 50 of lease 2: only lease 2's other 50 can still be spent
    result = core.tick(NOON + 2 * TICK_MS, [budget], {"c1": 850}, nodes=1)
    assert result.violations == [] and result.plans[0].exposure_micros == 50


def test_spend_past_the_budget_is_reported() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(900)
    core.tick(NOON, [budget], {"c1": 850}, nodes=1)  # lease: 50
    result = core.tick(NOON + TICK_MS, [budget], {"c1": 901}, nodes=1)
    assert any("> budget 900" in v for v in result.violations)


def test_leases_written_before_midnight_still_count_after_it() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(10_000)
    core.tick(DAY0 + DAY_MS - TICK_MS, [budget], {"c1": 9_000}, nodes=2)  # 2 x 100 until 00:00:05
    first = core.tick(DAY0 + DAY_MS, [budget], {"c1": 0}, nodes=2).plans[0]
    assert first.exposure_micros == 400
    # today's ledger gets the spend of yesterday's leases: leased, so no violation
    assert core.tick(DAY0 + DAY_MS + TICK_MS, [budget], {"c1": 350}, nodes=2).violations == []


def test_breaker_pauses_a_runaway_within_a_minute() -> None:
    core, spent, tripped_after = Reconcile(), 0, None
    for k in range(30):
        spent += 50_000_000  # ~100x the noon target per tick
        result = core.tick(NOON + 5_000 * k, [_budget()], {"c1": spent}, 10)
        if result.tripped:
            tripped_after = 5 * k
            break
    assert tripped_after is not None and tripped_after <= 65
    later = core.tick(NOON + 5_000 * 31, [_budget()], {"c1": spent}, 10).plans[0]
    assert later.paused and later.lease.amount_micros == 0


entries = st.lists(
    st.tuples(st.integers(1, 30), st.integers(0, 5_000), st.sampled_from(["c1", "c2", "c3"])),
    max_size=60,
)


@given(entries, st.randoms())
def test_spend_book_applies_each_ledger_id_once_in_any_order(
    raw: list[tuple[int, int, str]], rnd: object
) -> None:
    unique = {i: _entry(i, cost, campaign) for i, cost, campaign in raw}
    stream = [_entry(i, c, camp) for i, c, camp in raw] * 2  # every entry twice
    stream = [unique[e.ledger_id] for e in stream]
    rnd.shuffle(stream)  # type: ignore[attr-defined]
    book = SpendBook()
    book.apply(stream)
    assert sum(book.campaigns.values()) == sum(e.cost_micros for e in unique.values())
    assert book.apply(stream) == []


def test_advertiser_mismatch_is_reported() -> None:
    ok = advertiser_mismatches({"c1": 5, "c2": 7}, {"c1": "a", "c2": "a"}, {"a": 12})
    bad = advertiser_mismatches({"c1": 5}, {"c1": "a"}, {"a": 6})
    assert ok == [] and bad == [AdvertiserMismatch("a", 5, 6)]
    assert str(bad[0]) == "advertiser a: campaigns sum to 5, advertiser total is 6"


@given(st.dictionaries(st.sampled_from(["c1", "c2", "c3", "c4"]), st.integers(0, 10**12)))
def test_totals_written_together_never_mismatch(campaign_totals: dict[str, int]) -> None:
    owner = {"c1": "a", "c2": "a", "c3": "b", "c4": "c"}
    totals: dict[str, int] = {}
    for campaign_id, total in campaign_totals.items():
        totals[owner[campaign_id]] = totals.get(owner[campaign_id], 0) + total
    assert advertiser_mismatches(campaign_totals, owner, totals) == []
    if totals:
        first = sorted(totals)[0]
        off = advertiser_mismatches(campaign_totals, owner, {**totals, first: totals[first] + 1})
        assert [m.advertiser for m in off] == [first]


def test_a_departed_nodes_remainder_is_granted_to_the_nodes_that_stay() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=400)), _budget(1_000)
    first = core.tick(NOON, [budget], {"c1": 0}, nodes=2).plans[0]  # 2 x 400
    back = ReturnedLease("n2", "c1", first.lease.lease_id, 400)
    plan = core.tick(NOON + TICK_MS, [budget], {"c1": 0}, nodes=1, returns=[back]).plans[0]
    # without the return only 1,000 - 800 = 200 would be left to grant
    assert (plan.returned_micros, plan.lease.amount_micros) == (400, 400)
    assert plan.spent_micros + plan.exposure_micros <= 1_000


def test_returned_records_of_a_skipped_campaign_are_kept_for_a_later_tick() -> None:
    back = ReturnedLease("n2", "c1", 1, 400)
    result = Reconcile().tick(NOON, [_budget()], {}, nodes=1, returns=[back])
    assert result.skipped == ["c1"] and result.returns_seen == []


def test_returned_records_of_an_unknown_campaign_are_dropped() -> None:
    back = ReturnedLease("n2", "gone", 1, 400)
    result = Reconcile().tick(NOON, [_budget()], {"c1": 0}, nodes=1, returns=[back])
    assert result.returns_seen == [back]


def test_a_tick_that_can_grant_less_than_the_lease_out_keeps_and_renews_that_lease() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(900)
    core.tick(NOON, [budget], {"c1": 700}, nodes=1)  # 100
    out = core.tick(NOON + TICK_MS, [budget], {"c1": 700}, nodes=1).plans[0]  # 100 more
    # the first lease expired after 50 was spent (from either lease): 50 left to grant,
    # less than the second lease a node may still hold whole
    result = core.tick(NOON + 2 * TICK_MS, [budget], {"c1": 750}, nodes=1)
    kept = result.plans[0]
    assert kept.lease.lease_id == out.lease.lease_id and kept.lease.amount_micros == 100
    assert kept.lease.expires_ms == NOON + 4 * TICK_MS  # renewed: it never lapses
    assert kept.exposure_micros == 100 and result.violations == []
    # the renewed lease still counts after the expiry it was first written with
    later = core.tick(NOON + 3 * TICK_MS, [budget], {"c1": 780}, nodes=1).plans[0]
    assert later.lease.lease_id == out.lease.lease_id and later.exposure_micros == 70


def test_a_kept_lease_all_spent_since_its_grant_lapses_though_exposure_remains() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(900)
    core.tick(NOON, [budget], {"c1": 700}, nodes=1)
    out = core.tick(NOON + TICK_MS, [budget], {"c1": 700}, nodes=1).plans[0]
    core.tick(NOON + 2 * TICK_MS, [budget], {"c1": 750}, nodes=1)  # renewed: 50 of it left
    # 100 spent since its grant: it may be spent out, while the exposure still counts
    # 50 (the first lease may have paid for some of it and be left unspent)
    plan = core.tick(NOON + 3 * TICK_MS, [budget], {"c1": 800}, nodes=1).plans[0]
    assert plan.lease.lease_id == out.lease.lease_id and plan.exposure_micros == 50
    assert plan.lease.expires_ms == NOON + 4 * TICK_MS  # not renewed again: it lapses


def test_a_lease_its_holders_cannot_bid_from_lapses_and_its_rest_goes_to_fewer_nodes() -> None:
    budget = Budget("c1", "adv", 1_000, STANDARD, max_cost_micros=60)
    core = Reconcile(PacingConfig(chunk_micros=100))
    first = core.tick(NOON, [budget], {"c1": 600}, nodes=4).plans[0]  # 4 x 100: all out
    assert (first.lease.amount_micros, first.holders) == (100, 4)
    # 310 spent since: 90 left on average per node, but the nodes hold 40-90 each
    tail = core.tick(NOON + TICK_MS, [budget], {"c1": 910}, nodes=4).plans[0]
    assert tail.lease.lease_id == first.lease.lease_id
    assert tail.lease.expires_ms == first.lease.expires_ms  # 90 < 4 x 60: not renewed
    rest = core.tick(NOON + 2 * TICK_MS, [budget], {"c1": 930}, nodes=4).plans[0]
    # 70 left: one node can bid once at the maximum, four could not
    assert (rest.lease.amount_micros, rest.holders) == (70, 1)
    leases = node_leases(["n3", "n1", "n2", "n4"], [rest])
    assert [leases[n]["c1"].amount_micros for n in ("n1", "n2", "n3", "n4")] == [70, 0, 0, 0]


@given(st.randoms(use_true_random=False), st.integers(1, 4), st.integers(0, 2))
@example(random.Random(131), 2, 1)  # a lease dropped at expiry: 4,713 micros over
@example(random.Random(109), 2, 2)  # the same, 1,287 over
@example(random.Random(100), 4, 1)  # shares below one bid taking turns: 13,154 unspent
def test_a_fleet_with_supply_spends_the_budget_to_within_one_maximum_bid(
    rnd: random.Random, nodes: int, lag_ticks: int
) -> None:
    """Renewals, lapses and the tail: nodes that win every tick, picking up each tick's
    leases late, with the ledger ``lag_ticks`` behind (and the tick told so), end less
    than one impression at the maximum bid short of the budget, and never over it."""
    budget, max_cost = Budget("c1", "adv", 172_745, STANDARD, max_cost_micros=12_000), 12_000
    core = Reconcile(PacingConfig(tick_s=720, chunk_periods_per_day=2, breaker_window_s=86_400))
    names = [f"n{k}" for k in range(nodes)]
    held = dict.fromkeys(names, (Lease(0, 0, 0, 0), 0))
    written: dict[str, dict[str, Lease]] = {}
    spent, now, applied = 100_000, NOON, [100_000] * 3
    for _ in range(60):
        for name in names:
            lease, used = held[name]
            for phase, at in ((0, now + 1), (1, now + 720_000 - 1)):
                if phase == 1 and name in written:
                    new = written[name]["c1"]
                    lease, used = new, used if new.lease_id == lease.lease_id else 0
                for _ in range(rnd.randint(1, 2)):
                    if at < lease.expires_ms and lease.amount_micros - used >= max_cost:
                        cost = rnd.randint(4_000, max_cost)
                        used, spent = used + cost, spent + cost
            held[name] = (lease, used)
        now += 720_000
        applied.append(spent)
        through = now - lag_ticks * 720_000
        result = core.tick(now, [budget], {"c1": applied[-1 - lag_ticks]}, nodes, (), through)
        written = node_leases(names, result.plans)
    assert 172_745 - max_cost < spent <= 172_745


node_wins = st.lists(st.integers(1, 60), max_size=4)
"""One node's wins in one phase of an interval, each costing at most the maximum."""


@given(
    st.integers(1, 4),
    st.lists(
        st.tuples(st.integers(1, 3), st.lists(st.tuples(node_wins, node_wins), min_size=4)),
        min_size=1,
        max_size=30,
    ),
)
def test_nodes_spending_only_while_their_lease_covers_the_maximum_never_pass_the_budget(
    nodes: int, steps: list[tuple[int, list[tuple[list[int], list[int]]]]]
) -> None:
    """Renewed leases, leases held by fewer nodes, lapses: a fleet that bids only while
    its own lease covers one impression at the maximum cost spends at most the budget,
    and never beyond what the reconciler leased. Each node picks up a tick's leases
    late: in each interval it first spends from the lease it held, then installs."""
    budget = Budget("c1", "adv", 2_000, STANDARD, max_cost_micros=60)
    core, names = Reconcile(PacingConfig(chunk_micros=250)), [f"n{k}" for k in range(nodes)]
    held = dict.fromkeys(names, (Lease(0, 0, 0, 0), 0))
    written: dict[str, dict[str, Lease]] = {}
    spent, now = 1_000, NOON
    for gap, wins in steps:
        for k, name in enumerate(names):  # the interval after the previous tick
            lease, used = held[name]
            for phase, at in ((0, now + 1), (1, now + gap * TICK_MS - 1)):
                if phase == 1 and name in written:
                    new = written[name]["c1"]
                    lease, used = new, used if new.lease_id == lease.lease_id else 0
                for cost in wins[k][phase]:
                    if at < lease.expires_ms and lease.amount_micros - used >= 60:
                        used, spent = used + cost, spent + cost
            held[name] = (lease, used)
        now += gap * TICK_MS
        result = core.tick(now, [budget], {"c1": spent}, nodes)
        assert result.violations == []
        written = node_leases(names, result.plans)
    assert spent <= 2_000


def test_a_kept_lease_carries_the_new_rate() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(86_400_000_000)
    spent = {"c1": 86_400_000_000 - 200}  # seconds ahead of the curve, less so each tick
    first = core.tick(DAY0 + DAY_MS - 9_000, [budget], spent, nodes=2).plans[0]  # the rest: out
    later = core.tick(DAY0 + DAY_MS - 4_000, [budget], spent, nodes=2).plans[0]
    assert later.lease.lease_id == first.lease.lease_id and later.lease.amount_micros == 100
    assert 0 < first.rate < later.rate < 1


def test_no_lease_is_kept_for_a_different_number_of_nodes() -> None:
    core, budget = Reconcile(PacingConfig(chunk_micros=100)), _budget(200)
    first = core.tick(NOON, [budget], {"c1": 0}, nodes=2).plans[0]
    more = core.tick(NOON + TICK_MS, [budget], {"c1": 0}, nodes=3).plans[0]
    assert more.lease.lease_id != first.lease.lease_id and more.lease.amount_micros == 0


@given(near_exhaustion, st.integers(1, 60), steps)
def test_kept_leases_never_raise_the_exposure(
    left: int, nodes: int, steps: list[tuple[int, int]]
) -> None:
    ids: set[int] = set()
    previous = 0
    for result in _realistic(Reconcile(), left, nodes, steps):
        plan = result.plans[0]
        if plan.lease.lease_id in ids:  # re-sent: no new money on top of what was out
            assert plan.exposure_micros <= previous
        ids.add(plan.lease.lease_id)
        previous = plan.exposure_micros
