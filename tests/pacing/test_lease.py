"""Lease logic: chunk size, grants, expiry, node-side accounting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacing.breaker import Breaker
from pacing.lease import (
    FleetAccounts,
    Lease,
    LeaseAccount,
    LeaseBook,
    LeaseFormatError,
    chunk_micros,
    expiry_ms,
    grant_per_node,
    install,
    tail_holders,
)

pytestmark = pytest.mark.pure


def test_default_chunk_is_the_design_cards_69_cents() -> None:
    assert chunk_micros(10_000_000_000, 50) == 694_444


def test_lease_expires_after_two_missed_ticks() -> None:
    lease = Lease(1, 100, expiry_ms(1_000, 5_000), 500_000)
    account = LeaseAccount(lease)
    assert account.covers(1, 10_999)
    assert not account.covers(1, 11_000)


@given(
    st.integers(1, 10**12), st.integers(0, 10**12), st.integers(0, 10**12),
    st.integers(0, 500), st.integers(1, 10**9),
)  # fmt: skip
def test_grants_never_exceed_the_budget(
    budget: int, spent: int, exposure: int, nodes: int, chunk: int
) -> None:
    each = grant_per_node(budget, spent, exposure, nodes, chunk)
    assert 0 <= each <= chunk
    if each:
        assert spent + exposure + each * nodes <= budget


def test_a_share_below_one_impression_at_the_maximum_bid_is_not_granted() -> None:
    assert grant_per_node(1_000, 0, 0, 1, 500, max_cost=500) == 500
    assert grant_per_node(1_000, 600, 0, 1, 500, max_cost=500) == 0  # 400 left: no bid
    assert grant_per_node(1_000, 600, 0, 1, 500) == 400  # no maximum: every micro counts


def test_lease_encoding_round_trips_and_refuses_garbage() -> None:
    lease = Lease(7, 694_444, 1_767_225_610_000, 400_000)
    assert Lease.decode(lease.encode().encode()) == lease
    for bad in ("1:2:3", "a:b:c:d", "1:2:3:2000000"):
        with pytest.raises(LeaseFormatError):
            Lease.decode(bad)


def test_the_chunk_must_cover_the_bound() -> None:
    account = LeaseAccount(Lease(1, 1_000, 10_000, 1_000_000))
    account.debit(990)
    assert account.covers(10, 0) and not account.covers(11, 0)


def test_reinstalling_the_same_lease_keeps_its_spend() -> None:
    lease = Lease(1, 1_000, 10_000, 1_000_000)
    accounts = install({}, {"c": lease})
    accounts["c"].debit(600)
    assert install(accounts, {"c": lease})["c"].spent == 600
    assert install(accounts, {"c": Lease(2, 1_000, 15_000, 1_000_000)})["c"].spent == 0
    assert install(accounts, {}) == {}


def test_fleet_accounts_cap_each_node_at_its_lease() -> None:
    fleet = FleetAccounts(3)
    fleet.install(Lease(1, 100, 10_000, 1_000_000))
    got = fleet.spend_up_to(np.array([30, 150, 0]), 0)
    assert got.tolist() == [30, 100, 0]
    assert fleet.spend_up_to(np.array([100, 100, 100]), 0).tolist() == [70, 0, 100]
    assert fleet.spend_up_to(np.array([1, 1, 1]), 10_000).tolist() == [0, 0, 0]


def test_fleet_nodes_bid_only_while_their_lease_covers_the_maximum_cost() -> None:
    fleet = FleetAccounts(3)
    fleet.install(Lease(1, 100, 10_000, 1_000_000))
    bidders, costs = np.array([0, 0, 0, 0, 0, 1, 1]), np.array([20, 20, 20, 20, 20, 50, 10])
    # node 0 bids while 100 - spent >= 30: its first four wins; node 1 both
    assert fleet.spend_wins(bidders, costs, 0, 30).tolist() == [80, 60, 0]
    assert fleet.spend_wins(np.array([0, 1, 2]), np.array([5, 5, 5]), 0, 30).tolist() == [0, 5, 5]
    assert fleet.spend_wins(np.array([0]), np.array([5]), 10_000, 0).tolist() == [0, 0, 0]


def test_a_node_pays_its_own_wins_and_stops_below_one_bid_at_the_maximum() -> None:
    fleet = FleetAccounts(2)
    fleet.install(Lease(1, 12_000, 10_000, 1_000_000))
    bidders, costs = np.array([0, 0, 0]), np.array([5_000, 5_000, 5_000])
    own = fleet.spend_wins(bidders, costs, 0, 10_000)
    assert own.tolist() == [5_000, 0]  # then 7,000 left: below one bid at the maximum


def test_fleet_nodes_past_the_holders_hold_an_empty_lease() -> None:
    fleet = FleetAccounts(3)
    fleet.install(Lease(1, 100, 10_000, 1_000_000), holders=1)
    assert fleet.spend_wins(np.array([0, 1, 2]), np.array([30, 30, 30]), 0, 30).tolist() == [
        30, 0, 0,
    ]  # fmt: skip


@given(st.integers(0, 10**6), st.integers(1, 50), st.integers(1, 10**4))
def test_the_tail_goes_to_as_many_nodes_as_it_covers_one_maximum_bid_each(
    available: int, nodes: int, max_cost: int
) -> None:
    holders = tail_holders(available, nodes, max_cost)
    assert 1 <= holders <= nodes
    if available // nodes >= max_cost:
        assert holders == nodes
    elif available >= max_cost:
        assert available // holders >= max_cost and available // (holders + 1) < max_cost
    else:
        assert holders == 1


@given(
    st.integers(1, 10_000),
    st.integers(1, 500),
    st.lists(st.lists(st.integers(1, 500), max_size=30), min_size=1, max_size=5),
)
def test_fleet_nodes_stop_only_when_the_next_bid_could_pass_the_lease(
    amount: int, max_cost: int, per_node: list[list[int]]
) -> None:
    costs = [min(c, max_cost) for node in per_node for c in node]
    fleet = FleetAccounts(len(per_node))
    fleet.install(Lease(1, amount, 10_000, 1_000_000))
    bidders = np.repeat(np.arange(len(per_node)), [len(node) for node in per_node])
    got = fleet.spend_wins(bidders, np.array(costs, dtype=np.int64), 0, max_cost)
    for node, spent in zip(per_node, got.tolist(), strict=True):
        capped = [min(c, max_cost) for c in node]
        assert spent <= amount
        admitted = 0
        while admitted < len(capped) and sum(capped[:admitted]) <= amount - max_cost:
            admitted += 1
        assert spent == sum(capped[:admitted])


def test_lease_book_counts_unspent_leases_until_expiry() -> None:
    book = LeaseBook()
    book.observe(0, spent=0)
    book.record(1, 10, 5, expires_ms=10_000)
    book.observe(5_000, spent=0)
    book.record(2, 10, 5, expires_ms=15_000)
    assert book.exposure == 100
    assert book.observe(10_000, spent=0) == 50
    assert book.observe(15_000, spent=0) == 0


def test_spend_from_a_lease_is_not_counted_again_as_exposure() -> None:
    book = LeaseBook()
    book.observe(0, spent=700)
    book.record(1, 100, 1, expires_ms=10_000)
    assert book.observe(5_000, spent=760) == 40


def test_a_replaced_lease_spent_after_the_grant_leaves_the_new_one_whole() -> None:
    # the node kept spending lease 1 after lease 2 was written; lease 2 is untouched
    book = LeaseBook()
    book.observe(0, spent=0)
    book.record(1, 100, 1, expires_ms=10_000)
    book.observe(5_000, spent=0)
    book.record(2, 100, 1, expires_ms=15_000)
    assert book.observe(10_000, spent=100) == 100


def test_spend_beyond_the_exposure_is_reported_as_overdrawn() -> None:
    book = LeaseBook()
    book.observe(0, spent=0)
    book.record(1, 100, 2, expires_ms=10_000)
    assert book.observe(5_000, spent=230) == 0
    assert book.overdrawn == 30
    assert book.observe(6_000, spent=230) == 0 and book.overdrawn == 0


def test_a_rebased_book_keeps_the_leases_and_takes_a_new_baseline() -> None:
    book = LeaseBook()
    book.observe(0, spent=9_000)
    book.record(1, 100, 1, expires_ms=10_000)
    carried = book.rebased()
    assert carried.observe(5_000, spent=0) == 100 and carried.overdrawn == 0
    assert carried.observe(6_000, spent=40) == 60


ticks = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 10**6), st.integers(0, 10**4)), max_size=30
)


@given(ticks)
def test_exposure_stays_between_zero_and_the_unexpired_leases(
    steps: list[tuple[int, int, int]],
) -> None:
    book, spent, now = LeaseBook(), 0, 0
    granted: list[tuple[int, int]] = []  # (amount, expires_ms)
    for gap, extra, per_node in steps:
        now += gap * 5_000
        spent += extra
        live = sum(amount for amount, expires in granted if expires > now)
        assert 0 <= book.observe(now, spent) <= live
        book.record(now, per_node, 3, now + 10_000)
        granted.append((per_node * 3, now + 10_000))


def test_breaker_trips_after_a_full_window_over_ratio() -> None:
    breaker = Breaker(ratio=3.0, window_s=60.0)
    tripped = [breaker.observe(5.0 * k, 5.0, spend=400, target=100) for k in range(1, 13)]
    assert tripped == [False] * 11 + [True]
    assert breaker.open


def test_breaker_forgets_a_burst_that_ends() -> None:
    breaker = Breaker(ratio=3.0, window_s=60.0)
    for k in range(1, 7):
        breaker.observe(5.0 * k, 5.0, spend=400, target=100)  # 30 s over
    breaker.observe(35.0, 5.0, spend=100, target=100)
    breaker.observe(40.0, 5.0, spend=100, target=100)  # a second calm interval ends it
    tripped = [breaker.observe(40.0 + 5 * k, 5.0, 400, 100) for k in range(1, 12)]
    # the new runaway is dated from the last calm interval's start (35 s), not from 0 s
    assert tripped == [False] * 10 + [True]
    assert breaker.tripped_at == 95.0


def test_breaker_trips_at_the_last_tick_before_the_window_ends() -> None:
    """Ticks 0.9 s apart from 0 s: the one at 59.4 s trips, the next (60.3 s) would be late."""
    breaker = Breaker(ratio=3.0, window_s=60.0)
    ticks = [round(0.9 * k, 1) for k in range(1, 68)]
    tripped = [t for t in ticks if breaker.observe(t, 0.9, spend=400, target=100)]
    assert tripped == [59.4]


def test_one_quiet_interval_does_not_end_a_runaway() -> None:
    """Spend arrives in lumps: a tick that read none of the runaway's spend."""
    breaker = Breaker(ratio=3.0, window_s=60.0)
    spends = [400] * 5 + [0] + [400] * 6
    tripped = [breaker.observe(5.0 * k, 5.0, s, 100) for k, s in enumerate(spends, start=1)]
    assert tripped == [False] * 11 + [True]


def test_a_lone_spike_then_normal_spend_never_trips() -> None:
    breaker = Breaker(ratio=3.0, window_s=60.0)
    spends = [10_000] + [100] * 30
    assert not any(breaker.observe(5.0 * k, 5.0, s, 100) for k, s in enumerate(spends, start=1))


def test_spend_alternating_above_and_below_the_ratio_but_under_it_overall_never_trips() -> None:
    breaker = Breaker(ratio=3.0, window_s=60.0)
    spends = [350, 100] * 15  # 2.25x overall
    assert not any(breaker.observe(5.0 * k, 5.0, s, 100) for k, s in enumerate(spends, start=1))


def test_breaker_dates_a_runaway_from_the_last_calm_interval() -> None:
    """A runaway that began late in (5, 10] left it under the ratio; it may have begun
    just after 5 s, so the pause is due by 65 s, not 70 s."""
    breaker = Breaker(ratio=3.0, window_s=60.0)
    breaker.observe(5.0, 5.0, spend=100, target=100)
    breaker.observe(10.0, 5.0, spend=200, target=100)  # the runaway's partial interval
    tripped = [breaker.observe(10.0 + 5 * k, 5.0, spend=400, target=100) for k in range(1, 12)]
    assert tripped == [False] * 10 + [True]
    assert breaker.tripped_at == 65.0


@given(
    start=st.floats(0.0, 30.0),
    tick=st.sampled_from([1.0, 2.5, 5.0]),
    calm_share=st.floats(0.0, 1.0),
)
def test_breaker_pauses_within_its_window_of_the_runaway_start(
    start: float, tick: float, calm_share: float
) -> None:
    """Whatever the phase of the runaway against the ticks, and whether its partial
    first interval is over the ratio or not, the trip comes within 60 s of its start,
    and at most two intervals sooner."""
    breaker, now = Breaker(ratio=3.0, window_s=60.0), 0.0
    while breaker.tripped_at is None:
        now += tick
        running = max(0.0, min(tick, now - start))  # seconds of runaway in this interval
        over = running == tick or (running > 0 and calm_share < 0.5)
        breaker.observe(now, tick, spend=400 if over else 100, target=100)
    assert start + 60.0 - 2 * tick - 1e-9 <= breaker.tripped_at <= start + 60.0 + 1e-9


def _book_with_one_lease(per_node: int = 100, nodes: int = 2) -> LeaseBook:
    book = LeaseBook()
    book.observe(0, spent=0)
    book.record(1, per_node, nodes, expires_ms=10_000)
    book.observe(5_000, spent=0)
    return book


def test_a_returned_remainder_is_taken_off_the_exposure() -> None:
    book = _book_with_one_lease()
    assert book.give_back("n1", 1, 70) == 70
    assert book.exposure == 130


def test_a_remainder_is_taken_off_once_per_node_and_lease() -> None:
    book = _book_with_one_lease()
    book.give_back("n1", 1, 70)
    assert book.give_back("n1", 1, 70) == 0
    assert book.exposure == 130


def test_a_remainder_of_an_expired_lease_is_not_taken_off_again() -> None:
    book = _book_with_one_lease()
    book.record(2, 100, 2, expires_ms=15_000)
    book.observe(10_000, spent=0)  # lease 1 expired: the cap already dropped it
    assert book.give_back("n1", 1, 70) == 0
    assert book.exposure == 200


def test_a_return_never_takes_more_than_the_nodes_share() -> None:
    book = _book_with_one_lease()
    assert book.give_back("n1", 1, 10_000) == 100
    assert book.exposure == 100


def test_a_returned_remainder_leaves_its_lease_generation_too() -> None:
    book = _book_with_one_lease()
    book.give_back("n1", 1, 100)
    book.give_back("n2", 1, 100)
    assert book.observe(6_000, spent=0) == 0  # the cap: nothing of lease 1 is left


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 150), min_size=3, max_size=3),
            st.sampled_from([None, 0, 1, 2]),
        ),
        max_size=25,
    ),
    st.integers(1, 120),
    st.integers(0, 2),
)
def test_with_returns_and_a_late_ledger_exposure_bounds_unapplied_and_future_spend(
    steps: list[tuple[list[int], int | None]], per_node: int, lag_ticks: int
) -> None:
    """A model fleet: every tick each node installs a fresh lease and spends from it;
    now and then one leaves and returns its remainder (amount - debited), applied at
    the next tick after that tick's spend. The ledger runs ``lag_ticks`` behind.
    Exposure must stay >= what the nodes still holding leases can spend plus what
    they spent that is not applied yet, and >= 0."""
    book, spent, now = LeaseBook(), 0, 0
    ledger = [0] * 3  # the spend by each tick
    nodes = ["n0", "n1", "n2"]
    held: dict[str, list[int]] = {}  # node -> [lease id, amount, debited, expires]
    returns: list[tuple[str, int, int]] = []
    for wants, leaving in steps:
        now += 5_000
        ledger.append(spent)
        applied = ledger[-1 - lag_ticks]
        book.observe(now, applied, applied_through_ms=now - lag_ticks * 5_000)
        for node, lease_id, unspent in returns:
            before = book.exposure
            taken = book.give_back(node, lease_id, unspent)
            assert book.exposure == max(0, before - taken)
        returns = []
        can_spend = sum(a - d for _, a, d, expires in held.values() if expires > now)
        assert book.exposure >= can_spend + spent - applied >= 0
        book.record(now, per_node, len(nodes), now + 10_000)
        held = {node: [now, per_node, 0, now + 10_000] for node in nodes}
        for node, want in zip(nodes, wants, strict=False):
            debit = min(want, held[node][1] - held[node][2])
            held[node][2] += debit
            spent += debit
        if leaving is not None and leaving < len(nodes):
            node = nodes.pop(leaving)
            lease_id, amount, debited, _ = held.pop(node)
            returns.append((node, lease_id, amount - debited))


def _two_leases_spent_whole(book: LeaseBook) -> None:
    """One node: lease 1 at 0 (100), lease 2 at 5 s (100, all the budget of 200 out).
    The node spends lease 1 whole just after 5 s, before it picks up lease 2, then
    lease 2 whole before 10 s: 200 spent, none of it applied by 10 s."""
    book.observe(0, spent=0)
    book.record(1, 100, 1, expires_ms=10_000)
    book.observe(5_000, spent=0)
    book.record(2, 100, 1, expires_ms=15_000)


def test_a_lease_whose_spend_is_not_applied_yet_stays_in_the_cap_past_its_expiry() -> None:
    book = LeaseBook()
    _two_leases_spent_whole(book)
    # the ledger is a tick behind: at 10 s it holds the spend before 5 s, none
    exposure = book.observe(10_000, spent=0, applied_through_ms=5_000)
    assert exposure == 200  # lease 1 expired, but its spend may still be on its way
    assert grant_per_node(200, 0, exposure, 1, 100) == 0
    # the late spend arrives: both leases were spent whole, nothing was granted twice
    assert book.observe(15_000, spent=200, applied_through_ms=10_000) == 0
    assert book.overdrawn == 0


def test_an_expired_lease_in_the_cap_is_neither_kept_nor_renewed() -> None:
    book = LeaseBook()
    book.observe(0, spent=0)
    book.record(1, 100, 1, expires_ms=10_000)
    book.observe(10_000, spent=0, applied_through_ms=5_000)
    assert book.exposure == 100  # in the cap, but no node may spend it any more
    assert book.keepable(50, 1) is None
    assert not book.each_holder_covers(1, 1)
    book.renew(1, 20_000)
    assert book.observe(15_000, spent=0, applied_through_ms=10_000) == 0


def test_a_remainder_of_an_expired_lease_still_in_the_cap_is_taken_off() -> None:
    book = _book_with_one_lease()
    book.observe(10_000, spent=0, applied_through_ms=5_000)
    assert book.give_back("n1", 1, 70) == 70
    assert book.exposure == 130


def test_a_watermark_past_now_is_taken_as_now() -> None:
    book = LeaseBook()
    book.observe(0, spent=0)
    book.record(1, 100, 1, expires_ms=10_000)
    assert book.observe(5_000, spent=0, applied_through_ms=99_000) == 100
