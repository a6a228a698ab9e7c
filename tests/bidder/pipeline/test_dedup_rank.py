"""bidder.supply.path: the path rank, top-ranked copies, the hold, and the options."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bidder.supply.path import (
    MAX_FEE_BPS,
    UNKNOWN_HOPS,
    PathPolicy,
    PolicyError,
    best,
    hold_s,
    hops,
    parse_fees,
    parse_preference,
)

pytestmark = pytest.mark.pure

SSP_NAMES = st.sampled_from(["ssp-a", "ssp-b", "ssp-c", "ssp-d", "ssp-e"])


def chain(n: int, complete: int = 1) -> dict[str, Any]:
    nodes = [{"asi": f"x{k}.example", "sid": f"s{k}", "hp": 1} for k in range(n)]
    return {"ver": "1.0", "complete": complete, "nodes": nodes}


SCHAINS = st.one_of(
    st.none(),
    st.builds(chain, st.integers(1, 5)),
    st.builds(chain, st.integers(1, 5), st.just(0)),
    st.just({"complete": 1, "nodes": []}),
    st.just({"complete": 1, "nodes": [{"asi": "x.example"}]}),
)
POLICIES = st.builds(
    PathPolicy,
    st.lists(SSP_NAMES, unique=True, max_size=4),
    st.dictionaries(SSP_NAMES, st.integers(0, 300), max_size=4),
)
COPIES = st.lists(st.tuples(SSP_NAMES, SCHAINS), min_size=1, max_size=6)


# -- hops ---------------------------------------------------------------------------------


@given(st.integers(1, 40))
def test_a_complete_chain_counts_its_nodes(n: int) -> None:
    assert hops(chain(n)) == n


@pytest.mark.parametrize(
    "schain",
    [None, chain(1, complete=0), {"complete": 1}, {"complete": 1, "nodes": [{"sid": "1"}]}],
    ids=["absent", "incomplete", "no nodes", "node without asi"],
)
def test_a_chain_of_unprovable_length_ranks_after_any_real_one(schain: Any) -> None:
    assert hops(schain) == UNKNOWN_HOPS > hops(chain(40))


# -- the rank -----------------------------------------------------------------------------


@given(POLICIES, COPIES)
def test_the_best_copy_does_not_depend_on_arrival_order(
    policy: PathPolicy, copies: list[tuple[str, Any]]
) -> None:
    ranks = [policy.rank(ssp, schain) for ssp, schain in copies]
    assert best(ranks) == best(reversed(ranks)) == min(ranks)[:3]
    assert sorted(ranks) == sorted(reversed(ranks))


@given(POLICIES, SCHAINS, SCHAINS)
def test_a_listed_ssp_beats_an_unlisted_one_whatever_the_chains(
    policy: PathPolicy, listed_chain: Any, other_chain: Any
) -> None:
    assume(policy.preference)
    listed = policy.preference[-1]
    assert policy.rank(listed, listed_chain) < policy.rank("ssp-unlisted", other_chain)


@given(st.lists(SSP_NAMES, unique=True, min_size=2, max_size=5), SCHAINS, SCHAINS)
def test_the_preference_order_decides_before_the_chain(
    order: list[str], first_chain: Any, second_chain: Any
) -> None:
    policy = PathPolicy(order)
    assert policy.rank(order[0], first_chain) < policy.rank(order[1], second_chain)


@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 300))
def test_fewer_hops_beat_a_lower_fee(short: int, extra: int, fee: int) -> None:
    policy = PathPolicy(fees_bps={"ssp-a": fee})
    assert policy.rank("ssp-a", chain(short)) < policy.rank("ssp-b", chain(short + extra))


@given(st.integers(0, 299), st.integers(1, 300), st.integers(1, 5))
def test_on_equal_chains_the_lower_fee_wins(fee: int, more: int, n: int) -> None:
    policy = PathPolicy(fees_bps={"ssp-a": fee + more, "ssp-b": fee})
    assert policy.rank("ssp-b", chain(n)) < policy.rank("ssp-a", chain(n))


def test_the_ssp_name_breaks_a_tie_but_is_not_part_of_the_key() -> None:
    policy = PathPolicy()
    assert policy.rank("ssp-a", chain(1)) < policy.rank("ssp-b", chain(1))
    assert policy.key("ssp-a", chain(1)) == policy.key("ssp-b", chain(1))


# -- top-ranked copies --------------------------------------------------------------------


def _rivals(policy: PathPolicy, ssp: str) -> list[str]:
    """Every SSP another copy could come through: the listed ones, a few more, a new one."""
    names = {*policy.preference, "ssp-a", "ssp-b", "ssp-c", "ssp-d", "ssp-e", "ssp-new"}
    return sorted(names - {ssp})


# Every shape SCHAINS draws, so a top-ranked copy can be picked rather than filtered for.
CHAIN_SHAPES: list[Any] = [
    None,
    *(chain(n) for n in range(1, 6)),
    *(chain(n, 0) for n in range(1, 6)),
    {"complete": 1, "nodes": []},
    {"complete": 1, "nodes": [{"asi": "x.example"}]},
]


@st.composite
def top_ranked_copies(draw: st.DrawFn) -> tuple[PathPolicy, str, Any]:
    policy = draw(POLICIES)
    names = ["ssp-a", "ssp-b", "ssp-c", "ssp-d", "ssp-e"]
    tops = [(s, c) for s in names for c in CHAIN_SHAPES if policy.is_top_ranked(s, c)]
    assume(tops)
    ssp, schain = draw(st.sampled_from(tops))
    return policy, ssp, schain


@given(top_ranked_copies(), SCHAINS)
def test_no_copy_through_another_ssp_beats_a_top_ranked_one(
    copy: tuple[PathPolicy, str, Any], rival_chain: Any
) -> None:
    policy, ssp, schain = copy
    key = policy.key(ssp, schain)
    assert all(policy.key(other, rival_chain) >= key for other in _rivals(policy, ssp))


@given(POLICIES, SSP_NAMES, SCHAINS)
def test_a_copy_that_is_not_top_ranked_can_be_beaten(
    policy: PathPolicy, ssp: str, schain: Any
) -> None:
    assume(not policy.is_top_ranked(ssp, schain))
    key = policy.key(ssp, schain)
    assert any(policy.key(other, chain(1)) < key for other in _rivals(policy, ssp))


def test_without_preferences_a_direct_fee_free_path_is_top_ranked() -> None:
    policy = PathPolicy()
    assert policy.is_top_ranked("ssp-a", chain(1))
    assert not policy.is_top_ranked("ssp-a", chain(2))
    assert not policy.is_top_ranked("ssp-a", None)


def test_the_first_preferred_ssp_is_top_ranked_on_any_chain() -> None:
    policy = PathPolicy(["ssp-b", "ssp-a"])
    assert policy.is_top_ranked("ssp-b", None)
    assert not policy.is_top_ranked("ssp-a", chain(1))
    assert not policy.is_top_ranked("ssp-c", chain(1))


def test_a_direct_path_with_a_fee_is_not_top_ranked() -> None:
    assert not PathPolicy(fees_bps={"ssp-a": 20}).is_top_ranked("ssp-a", chain(1))


# -- the hold -----------------------------------------------------------------------------

TIMES = st.floats(0, 0.05, allow_nan=False)


@given(st.booleans(), TIMES, st.floats(-0.01, 0.05, allow_nan=False), TIMES)
def test_the_hold_is_never_longer_than_asked_or_than_the_deadline_allows(
    top: bool, hold: float, remaining: float, margin: float
) -> None:
    wait = hold_s(top, hold, remaining, margin)
    assert 0 <= wait <= hold
    assert wait <= max(0.0, (remaining - margin) / 2)


@given(TIMES, TIMES)
def test_a_top_ranked_copy_claims_at_once(hold: float, remaining: float) -> None:
    assert hold_s(True, hold, remaining, 0.001) == 0


def test_a_copy_with_time_to_spare_holds_the_whole_hold() -> None:
    assert hold_s(False, 0.003, 0.008, 0.0015) == 0.003


def test_a_late_copy_leaves_half_its_time_to_the_claim() -> None:
    assert hold_s(False, 0.003, 0.0055, 0.0015) == pytest.approx(0.002)


# -- options ------------------------------------------------------------------------------


@given(st.lists(SSP_NAMES, unique=True, min_size=1))
def test_a_preference_list_round_trips(names: list[str]) -> None:
    assert parse_preference(",".join(names)) == tuple(names)


def test_an_empty_preference_means_none() -> None:
    assert parse_preference("") == ()


@pytest.mark.parametrize("text", ["a,,b", "a,b,a", ","])
def test_a_bad_preference_list_names_the_option(text: str) -> None:
    with pytest.raises(PolicyError, match="--ssp-preference"):
        parse_preference(text)


@given(st.dictionaries(SSP_NAMES, st.integers(0, MAX_FEE_BPS), min_size=1))
def test_fees_round_trip_in_one_spec_or_several(fees: dict[str, int]) -> None:
    specs = [f"{ssp}={bps}" for ssp, bps in fees.items()]
    assert parse_fees([",".join(specs)]) == fees == parse_fees(specs)


@pytest.mark.parametrize(
    "spec", ["ssp-a", "ssp-a=x", "ssp-a=-1", f"ssp-a={MAX_FEE_BPS + 1}", "=5", "ssp-a=1,ssp-a=2"]
)
def test_a_bad_fee_names_the_option_and_the_entry(spec: str) -> None:
    with pytest.raises(PolicyError, match="--ssp-fee-bps: '"):
        parse_fees([spec])


def test_policies_with_the_same_options_are_equal() -> None:
    assert PathPolicy(["a"], {"a": 1}) == PathPolicy(("a",), {"a": 1})
    assert hash(PathPolicy(["a"], {"a": 1})) == hash(PathPolicy(("a",), {"a": 1}))
