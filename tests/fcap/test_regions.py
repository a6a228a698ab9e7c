"""The regional merge, as pure functions: a grow-only counter per field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fcap import regions

pytestmark = pytest.mark.pure

SLOTS = st.dictionaries(
    st.sampled_from([regions.slot(f, r) for f in ("aaaaaa1k", "bbbbbb!") for r in "xyz"]),
    st.integers(min_value=0, max_value=10**6),
)


@given(SLOTS, SLOTS)
def test_merge_is_commutative(a: dict[str, int], b: dict[str, int]) -> None:
    assert regions.merge(a, b) == regions.merge(b, a)


@given(SLOTS, SLOTS, SLOTS)
def test_merge_is_associative(a: dict[str, int], b: dict[str, int], c: dict[str, int]) -> None:
    assert regions.merge(regions.merge(a, b), c) == regions.merge(a, regions.merge(b, c))


@given(SLOTS, SLOTS)
def test_merge_is_idempotent(a: dict[str, int], b: dict[str, int]) -> None:
    once = regions.merge(a, b)
    assert regions.merge(once, b) == once and regions.merge(a, a) == a


@given(SLOTS, SLOTS)
def test_merge_never_lowers_a_read(a: dict[str, int], b: dict[str, int]) -> None:
    merged = regions.merge(a, b)
    for field in ("aaaaaa1k", "bbbbbb!"):
        assert regions.read(merged, field, "xyz") >= regions.read(a, field, "xyz")


@given(st.lists(st.sampled_from("xyz"), max_size=40), st.randoms())
def test_replicas_applying_the_changes_in_any_order_read_every_count(
    counted_in: list[str], rnd: object
) -> None:
    # Each region counts into its own slot and logs the slot's new value; a replica
    # that applies all logged values, shuffled, reads the number of impressions.
    field, own, changes = "aaaaaa1k", {r: 0 for r in "xyz"}, []
    for region in counted_in:
        own[region] += 1
        changes.append({regions.slot(field, region): own[region]})
    rnd.shuffle(changes)  # type: ignore[attr-defined]
    replica: dict[str, int] = {}
    for change in changes + changes[: len(changes) // 2]:  # and some applied twice
        replica = regions.merge(replica, change)
    assert regions.read(replica, field, "xyz") == len(counted_in)


def test_a_recency_field_reads_the_latest_instant() -> None:
    slots = {regions.slot("bbbbbb!", "x"): 500, regions.slot("bbbbbb!", "y"): 900}
    assert regions.read(slots, "bbbbbb!", "xy") == 900


@given(st.text(min_size=1, max_size=30), st.permutations(["eu", "us", "ap"]))
def test_every_region_picks_the_same_home(key: str, order: list[str]) -> None:
    assert regions.home_region(key, order) == regions.home_region(key, ["ap", "eu", "us"])


def test_split_slot_finds_field_and_region() -> None:
    assert regions.split_slot(regions.slot("aaaaaa1k", "eu-2")) == ("aaaaaa1k", "eu-2")
    assert regions.split_slot("aaaaaa1k") is None


@pytest.mark.parametrize("name", ["", "EU", "-eu", "eu@1", "a" * 17])
def test_bad_region_names_are_named(name: str) -> None:
    problem = regions.name_problem(name)
    assert problem is not None and repr(name) in problem


@given(st.floats(0, 100), st.floats(0, 10))
def test_the_bound_covers_rate_times_delay(rate: float, delay: float) -> None:
    assert regions.over_cap_bound(rate, delay) >= rate * delay
