"""The pure reconciler tick and the exactly-once spend book."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bidder.ledger import LedgerEntry
from pacing.curves import STANDARD
from pacing.reconcile import Budget, PacingConfig, Reconcile, SpendBook, advertiser_mismatches

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


@given(st.lists(st.integers(0, 2_000_000_000), min_size=1, max_size=40), st.integers(1, 60))
def test_spent_plus_leased_never_exceeds_budget(spends: list[int], nodes: int) -> None:
    core, spent, budget = Reconcile(), 0, _budget(5_000_000_000)
    for k, extra in enumerate(spends):
        spent = min(spent + extra, budget.daily_budget_micros)
        result = core.tick(NOON + 5_000 * k, [budget], {"c1": spent}, nodes)
        assert result.violations == []
        plan = result.plans[0]
        assert plan.spent_micros + plan.exposure_micros <= budget.daily_budget_micros


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
    assert ok == [] and bad and "advertiser a" in bad[0]
