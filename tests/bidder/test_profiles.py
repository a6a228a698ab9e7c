"""User profiles: the DynamoDB table (moto) and the non-blocking TTL cache in front of it."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from bidder.aws import aws_client
from bidder.clock import ManualClock
from bidder.identity import identify
from bidder.openrtb import InvalidRequest, parse_bid_request
from bidder.profiles import (
    MISS,
    CacheConfig,
    Lookup,
    Profile,
    ProfileCache,
    ProfileStoreError,
    ProfileTable,
    profile_client,
    profile_from_doc,
    profile_to_doc,
)
from bidder.replay.stream import read_stream
from bidder.stack import LocalStack

SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
ALICE = Profile(frozenset({13, 19}), 1_767_225_000_000, 2)

MakeCache = Callable[..., ProfileCache]
Fetch = Callable[[str], Profile | None]


@pytest.fixture
def table(aws_endpoint: str) -> ProfileTable:
    # A table per test: the moto server is shared by the whole session.
    table = ProfileTable(aws_client("dynamodb", aws_endpoint), f"profiles-{uuid.uuid4().hex[:12]}")
    table.ensure_table()
    return table


@pytest.fixture
def make_cache() -> Iterator[MakeCache]:
    made: list[ProfileCache] = []

    def make(
        fetch: Callable[[str], Profile | None], clock: Any = None, **config: Any
    ) -> ProfileCache:
        cache = ProfileCache(fetch, clock or ManualClock(), CacheConfig(**config))
        made.append(cache)
        return cache

    yield make
    for cache in made:
        cache.close()


# ---------------------------------------------------------------------------- the document

profiles = st.builds(
    Profile,
    st.frozensets(st.integers(1, 26)),
    st.one_of(st.none(), st.integers(0, 2**53)),
    st.integers(0, 1000),
)


@given(profiles)
def test_profile_document_round_trips(profile: Profile) -> None:
    assert profile_from_doc(profile_to_doc(profile)) == profile


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"segments": "13", "last_click_ms": None, "clicks_30d": 0},
        {"segments": [13], "last_click_ms": "x", "clicks_30d": 0},
        {"segments": [13], "last_click_ms": None, "clicks_30d": -1},
        {"segments": [True], "last_click_ms": None, "clicks_30d": 0},
    ],
)
def test_a_malformed_profile_document_is_refused(doc: Any) -> None:
    with pytest.raises(ValueError):
        profile_from_doc(doc)


# ------------------------------------------------------------------------------- the table


def test_put_then_get_returns_the_profile(table: ProfileTable) -> None:
    assert table.put_many([("b:alice", ALICE)]) == 1
    assert table.get("b:alice") == ALICE


def test_get_of_an_unknown_user_is_none(table: ProfileTable) -> None:
    assert table.get("b:nobody") is None


def test_a_malformed_item_is_a_store_error(table: ProfileTable, aws_endpoint: str) -> None:
    client = aws_client("dynamodb", aws_endpoint)
    client.put_item(TableName=table.table_name, Item={"k": {"S": "b:bad"}, "p": {"S": "{"}})
    with pytest.raises(ProfileStoreError, match="malformed"):
        table.get("b:bad")


# ------------------------------------------------------------------------------- the cache


@pytest.mark.asyncio
async def test_a_miss_answers_at_once_and_the_fill_makes_a_hit(
    table: ProfileTable, make_cache: MakeCache
) -> None:
    table.put_many([("b:alice", ALICE)])
    cache = make_cache(table.get)
    assert cache.lookup("b:alice") == MISS
    await cache.drain()
    assert cache.lookup("b:alice") == Lookup(True, ALICE)


@pytest.mark.asyncio
async def test_a_user_without_a_profile_is_a_cached_hit(
    table: ProfileTable, make_cache: MakeCache
) -> None:
    cache = make_cache(table.get)
    cache.lookup("b:nobody")
    await cache.drain()
    assert cache.lookup("b:nobody") == Lookup(True, None)
    assert cache.stats.absent == 1


class _Gate:
    """A store whose reads wait until the test opens the gate; counts reads per key."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.reads: list[str] = []

    def fetch(self, key: str) -> Profile | None:
        self.reads.append(key)
        self.open.wait(30)
        return ALICE


@pytest.mark.asyncio
async def test_lookup_returns_while_the_store_read_is_still_running(make_cache: MakeCache) -> None:
    gate = _Gate()
    cache = make_cache(gate.fetch)
    results = [cache.lookup("b:alice") for _ in range(5)]
    assert results == [MISS] * 5  # answered with the read still blocked in the pool
    gate.open.set()
    await cache.drain()
    assert gate.reads == ["b:alice"]  # five misses, one read: in-flight keys are deduplicated
    assert cache.lookup("b:alice").hit


@pytest.mark.asyncio
async def test_misses_beyond_max_in_flight_are_dropped_not_queued(make_cache: MakeCache) -> None:
    gate = _Gate()
    cache = make_cache(gate.fetch, max_in_flight=2)
    for n in range(5):
        cache.lookup(f"b:user{n}")
    assert cache.stats.dropped == 3
    gate.open.set()
    await cache.drain()
    assert sorted(gate.reads) == ["b:user0", "b:user1"]


@pytest.mark.asyncio
async def test_entries_expire_after_their_ttl(make_cache: MakeCache) -> None:
    clock = ManualClock()
    cache = make_cache(lambda key: ALICE, clock, ttl_s=10.0)
    cache.lookup("b:alice")
    await cache.drain()
    clock.advance(9.9)
    assert cache.lookup("b:alice").hit
    clock.advance(0.2)
    assert cache.lookup("b:alice") == MISS


@pytest.mark.asyncio
async def test_absent_users_are_forgotten_sooner(make_cache: MakeCache) -> None:
    clock = ManualClock()
    cache = make_cache(lambda key: None, clock, ttl_s=300.0, absent_ttl_s=5.0)
    cache.lookup("b:nobody")
    await cache.drain()
    clock.advance(5.1)
    assert cache.lookup("b:nobody") == MISS


@pytest.mark.asyncio
async def test_a_full_cache_forgets_its_oldest_entry(make_cache: MakeCache) -> None:
    cache = make_cache(lambda key: ALICE, capacity=2)
    for key in ("b:1", "b:2", "b:3"):
        cache.lookup(key)
        await cache.drain()
    assert len(cache) == 2
    assert [cache.lookup(k).hit for k in ("b:2", "b:3", "b:1")] == [True, True, False]


def _failing(key: str) -> Profile | None:
    raise ProfileStoreError("store down")


@pytest.mark.asyncio
async def test_a_failed_fill_caches_nothing_and_pauses_fills(make_cache: MakeCache) -> None:
    clock = ManualClock()
    cache = make_cache(_failing, clock, error_backoff_s=1.0)
    cache.lookup("b:alice")
    await cache.drain()
    assert cache.stats.errors == 1
    assert cache.lookup("b:bob") == MISS and not cache._in_flight  # paused: no new read
    clock.advance(1.1)
    cache.lookup("b:bob")
    assert cache._in_flight  # the pause is over
    await cache.drain()


def test_lookup_outside_an_event_loop_is_a_miss_not_an_error(make_cache: MakeCache) -> None:
    cache = make_cache(lambda key: ALICE)
    assert cache.lookup("b:alice") == MISS


def test_an_invalid_config_names_every_bad_field() -> None:
    with pytest.raises(ValueError, match=r"ttl_s must be positive.*capacity must be at least 1"):
        ProfileCache(lambda key: None, ManualClock(), CacheConfig(ttl_s=0, capacity=0))


@pytest.mark.asyncio
async def test_lookups_are_counted_by_result_in_prometheus(make_cache: MakeCache) -> None:
    def hits() -> float:
        return REGISTRY.get_sample_value("bidsim_profile_lookups_total", {"result": "hit"}) or 0.0

    before = hits()
    cache = make_cache(lambda key: ALICE)
    cache.lookup("b:alice")
    await cache.drain()
    cache.lookup("b:alice")
    assert hits() == before + 1


# -------------------------------------------------------------- the sample stream, the outage


def _sample_keys() -> list[tuple[int, str]]:
    """(t_ms, user key) of every identified request of the sample stream, in order."""
    out = []
    for record in read_stream(SAMPLE):
        try:
            key = identify(parse_bid_request(record.body), record.ssp).user_key
        except InvalidRequest:
            continue
        if key is not None:
            out.append((record.t_ms, key))
    return out


async def _replay(cache: ProfileCache, clock: ManualClock, keys: list[tuple[int, str]]) -> None:
    start = clock.monotonic()
    for t_ms, key in keys:
        clock.advance(max(start + t_ms / 1000 - clock.monotonic(), 0.0))
        cache.lookup(key)
        if len(cache._in_flight) >= cache.config.max_in_flight:
            await cache.drain()  # the stream's pace leaves the pool time; here we wait for it
    await cache.drain()


@pytest.mark.asyncio
async def test_hit_rate_on_the_sample_stream_after_warm_up_is_at_least_95_percent(
    table: ProfileTable, make_cache: MakeCache
) -> None:
    from models.synth import synth_profile  # the generated profiles `bidsim profiles load` writes

    keys = _sample_keys()
    table.put_many((k, p) for k in sorted({k for _, k in keys}) if (p := synth_profile(k, 0)))
    clock = ManualClock()
    cache = make_cache(table.get, clock)
    await _replay(cache, clock, keys)  # warm-up: the first replay of the stream
    warm = cache.stats.hits, cache.stats.misses
    await _replay(cache, clock, keys)
    hits, misses = cache.stats.hits - warm[0], cache.stats.misses - warm[1]
    assert hits / (hits + misses) >= 0.95


@pytest.mark.asyncio
async def test_a_dynamodb_outage_mid_run_never_blocks_or_raises(
    valkey_url: str, make_cache: MakeCache
) -> None:
    with LocalStack(valkey_url=valkey_url) as stack:  # a private moto: this test kills it
        table = ProfileTable(profile_client(stack.aws_endpoint), "profiles")
        table.ensure_table()
        table.put_many((f"b:user{n}", ALICE) for n in range(20))
        clock = ManualClock()
        cache = make_cache(table.get, clock)
        for n in range(10):
            cache.lookup(f"b:user{n}")
            await cache.drain()
        moto = stack.pids["moto"]
        os.kill(moto, signal.SIGSTOP)  # hung: reads now wait for their timeout
        assert cache.lookup("b:user10") == MISS
        assert "b:user10" in cache._in_flight  # answered while the read hangs
        os.kill(moto, signal.SIGKILL)  # and then gone
        results = [cache.lookup(f"b:user{n}") for n in range(20)]
        await cache.drain()
        assert all(r == Lookup(True, ALICE) for r in results[:10])  # warm entries keep serving
        assert all(r == MISS for r in results[10:])
        assert cache.stats.errors >= 1
        clock.advance(cache.config.error_backoff_s + 1)
        cache.lookup("b:user11")
        await cache.drain()  # a fill against the dead store fails quietly again
        assert cache.lookup("b:user0").hit
