"""Key formation: one module, one hash tag per user, one slot per user."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from fcap import keys


def _all_keys(kind: str, subject_key: str, impression_id: str) -> list[str]:
    return [keys.counters(kind, subject_key), keys.dedup(kind, subject_key, impression_id)]


@given(subject_key=st.text(min_size=1, max_size=96), impression_id=st.text(max_size=40))
def test_all_keys_of_a_user_map_to_one_slot(subject_key: str, impression_id: str) -> None:
    for kind in (keys.USER, keys.HOUSEHOLD):
        slots = {key_slot(k.encode()) for k in _all_keys(kind, subject_key, impression_id)}
        assert len(slots) == 1


@given(a=st.text(min_size=1, max_size=20), b=st.text(min_size=1, max_size=20))
def test_distinct_users_get_distinct_keys(a: str, b: str) -> None:
    if a != b:
        assert keys.counters(keys.USER, a) != keys.counters(keys.USER, b)


def test_a_user_and_a_household_with_the_same_key_do_not_share_counters() -> None:
    assert keys.counters(keys.USER, "k") != keys.counters(keys.HOUSEHOLD, "k")


def test_braces_in_a_key_cannot_end_the_hash_tag_early() -> None:
    assert keys.counters(keys.USER, "}x") == "fu:{%7Dx}"


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        keys.counters(keys.USER, "")
