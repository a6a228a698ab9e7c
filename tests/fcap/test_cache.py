"""The negative cache (capped until the instant given) and the count cache, both bounded."""

from __future__ import annotations

import pytest

from fcap.cache import CountCache, NegativeCache


def test_capped_until_one_ms_before_the_end() -> None:
    cache = NegativeCache()
    cache.put("k", 1_000)
    assert cache.capped("k", 999)


def test_free_at_the_end() -> None:
    cache = NegativeCache()
    cache.put("k", 1_000)
    assert not cache.capped("k", 1_000)


def test_least_recently_used_entry_goes_first() -> None:
    cache = NegativeCache(max_entries=2)
    cache.put("a", 10)
    cache.put("b", 10)
    cache.capped("a", 0)
    cache.put("c", 10)
    assert (cache.capped("a", 0), cache.capped("b", 0), len(cache)) == (True, False, 2)


def test_a_shorter_until_does_not_shorten_an_entry() -> None:
    cache = NegativeCache()
    cache.put("k", 1_000)
    cache.put("k", 500)
    assert cache.capped("k", 700)


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        NegativeCache(0)


def test_a_count_cache_entry_passes_until_its_room_is_spent() -> None:
    cache = CountCache()
    cache.put("k", until_ms=1_000, room=2)
    assert cache.passes("k", 0)
    cache.spend("k")
    assert cache.passes("k", 1)
    cache.spend("k")
    assert not cache.passes("k", 2) and cache.spent("k", 2)
    assert not cache.spent("k", 1_000) and len(cache) == 0


def test_a_count_cache_entry_ends_at_its_instant() -> None:
    cache = CountCache()
    cache.put("k", until_ms=1_000, room=5)
    assert cache.passes("k", 999) and not cache.passes("k", 1_000)


def test_a_count_cache_keeps_its_most_recently_used_entries() -> None:
    cache = CountCache(max_entries=2)
    cache.put("a", 100, 1)
    cache.put("b", 100, 1)
    assert cache.passes("a", 0)
    cache.put("c", 100, 1)
    assert (cache.passes("a", 0), cache.passes("b", 0), cache.passes("c", 0)) == (True, False, True)
