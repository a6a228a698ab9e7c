"""User profiles: the DynamoDB table (moto) and the non-blocking TTL cache in front of it."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.adapters.aws import aws_client
from bidder.bidstream.stream import read_stream
from bidder.core.clock import ManualClock
from bidder.decide.identity import identify
from bidder.decide.profile_cache import MISS, CacheConfig, FetchMany, Lookup, ProfileCache
from bidder.decide.profiles import (
    MAX_BATCH_KEYS,
    Profile,
    ProfileStoreError,
    ProfileTable,
    profile_from_doc,
    profile_to_doc,
)
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.stack.local import LocalStack
from tests.published import sample

SAMPLE = Path(__file__).resolve().parents[3] / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
ALICE = Profile(frozenset({13, 19}), 1_767_225_000_000, 2)

MakeCache = Callable[..., ProfileCache]


@pytest.fixture
def table(aws_endpoint: str) -> ProfileTable:
    # A table per test: the moto server is shared by the whole session.
    table = ProfileTable(aws_client("dynamodb", aws_endpoint), f"profiles-{uuid.uuid4().hex[:12]}")
    table.ensure_table()
    return table


@pytest.fixture
def make_cache() -> Iterator[MakeCache]:
    made: list[ProfileCache] = []

    def make(fetch_many: FetchMany, clock: Any = None, **config: Any) -> ProfileCache:
        cache = ProfileCache(fetch_many, clock or ManualClock(), CacheConfig(**config))
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


def _put_raw(aws_endpoint: str, table: ProfileTable, bodies: dict[str, str]) -> None:
    """Items written past ``put_many``, as another writer (or a bug) could."""
    client = aws_client("dynamodb", aws_endpoint)
    for key, body in bodies.items():
        client.put_item(TableName=table.table_name, Item={"k": {"S": key}, "p": {"S": body}})


def test_get_many_answers_profiles_and_none_for_users_without_one(table: ProfileTable) -> None:
    assert table.put_many([("b:alice", ALICE)]) == 1
    assert table.get_many(["b:alice", "b:nobody"]) == {"b:alice": ALICE, "b:nobody": None}


def test_get_many_leaves_a_malformed_item_out_and_answers_the_others(
    table: ProfileTable, aws_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    table.put_many([("b:alice", ALICE)])
    _put_raw(aws_endpoint, table, {"b:bad": "{"})
    assert table.get_many(["b:alice", "b:bad", "b:nobody"]) == {"b:alice": ALICE, "b:nobody": None}
    assert "'b:bad'" in caplog.text and "malformed" in caplog.text


def test_get_many_refuses_more_than_100_distinct_keys(table: ProfileTable) -> None:
    with pytest.raises(ValueError, match="at most 100 keys"):
        table.get_many([f"b:user{n}" for n in range(MAX_BATCH_KEYS + 1)])


def test_get_many_asks_for_a_repeated_key_once(table: ProfileTable) -> None:
    # DynamoDB refuses a batch with duplicate keys; 101 entries, 100 distinct keys
    keys = [f"b:user{n}" for n in range(MAX_BATCH_KEYS)] + ["b:user0"]
    assert len(table.get_many(keys)) == MAX_BATCH_KEYS


def test_get_many_of_a_missing_table_is_a_store_error(aws_endpoint: str) -> None:
    table = ProfileTable(aws_client("dynamodb", aws_endpoint), f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ProfileStoreError, match="get_many"):
        table.get_many(["b:alice"])


def test_keys_dynamodb_leaves_unprocessed_are_absent_from_the_answer(
    table: ProfileTable, aws_endpoint: str
) -> None:
    # One BatchGetItem answers at most 16 MB: 45 items of ~380 KB leave some unprocessed.
    doc = orjson.dumps({**profile_to_doc(ALICE), "pad": "x" * 380_000}).decode()
    keys = [f"b:big{n}" for n in range(45)]
    _put_raw(aws_endpoint, table, dict.fromkeys(keys, doc))
    answer = table.get_many(keys)
    assert 0 < len(answer) < len(keys)
    assert set(answer.values()) == {ALICE}


# ------------------------------------------------------------------------------- the cache


class _Store:
    """An in-process ``fetch_many`` over a dict; records every call's keys.

    ``gated``: calls wait until the test opens the gate. ``leave_out``: keys the first
    answer leaves out (as DynamoDB's UnprocessedKeys). ``fail``: calls raise.
    """

    def __init__(
        self,
        profiles: dict[str, Profile] | None = None,
        *,
        gated: bool = False,
        leave_out: Sequence[str] = (),
        fail: bool = False,
    ) -> None:
        self.profiles = profiles or {}
        self.open = threading.Event()
        if not gated:
            self.open.set()
        self.called = threading.Event()
        self.calls: list[list[str]] = []
        self.most_at_once = 0
        self._leave_out = set(leave_out)
        self._fail = fail
        self._running = 0
        self._lock = threading.Lock()

    def fetch_many(self, keys: Sequence[str]) -> dict[str, Profile | None]:
        with self._lock:
            self.calls.append(list(keys))
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        self.called.set()
        try:
            self.open.wait(30)
            if self._fail:
                raise ProfileStoreError("store down")
            with self._lock:
                left_out, self._leave_out = self._leave_out, set()
            return {k: self.profiles.get(k) for k in keys if k not in left_out}
        finally:
            with self._lock:
                self._running -= 1


NO_WINDOW = 1.0
"""The longest window: these tests await nothing between a lookup and its assert, so the
timer never fires first; only drain(), flush() or a full batch send keys."""


@pytest.mark.asyncio
async def test_a_miss_answers_at_once_and_the_fill_makes_a_hit(
    table: ProfileTable, make_cache: MakeCache
) -> None:
    table.put_many([("b:alice", ALICE)])
    cache = make_cache(table.get_many)
    assert cache.lookup("b:alice") == MISS
    await cache.drain()
    assert cache.lookup("b:alice") == Lookup(True, ALICE)


@pytest.mark.asyncio
async def test_a_user_without_a_profile_is_a_cached_hit(
    table: ProfileTable, make_cache: MakeCache
) -> None:
    cache = make_cache(table.get_many)
    cache.lookup("b:nobody")
    await cache.drain()
    assert cache.lookup("b:nobody") == Lookup(True, None)
    assert cache.stats.absent == 1


@pytest.mark.asyncio
async def test_misses_within_one_window_are_fetched_in_one_call(make_cache: MakeCache) -> None:
    store = _Store({"b:alice": ALICE})
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW)
    for key in ("b:alice", "b:bob", "b:carol"):
        cache.lookup(key)
    assert cache.pending == 3 and store.calls == []  # waiting for the window
    await cache.drain()
    assert store.calls == [["b:alice", "b:bob", "b:carol"]]
    assert [cache.lookup(k) for k in ("b:alice", "b:bob")] == [Lookup(True, ALICE), (True, None)]


@pytest.mark.asyncio
async def test_a_pending_batch_is_sent_when_its_window_ends(make_cache: MakeCache) -> None:
    store = _Store()
    cache = make_cache(store.fetch_many, batch_window_s=0.0)  # no flush, no drain below
    cache.lookup("b:alice")
    cache.lookup("b:bob")
    assert await asyncio.to_thread(store.called.wait, 30)
    assert store.calls == [["b:alice", "b:bob"]]
    await cache.drain()


@pytest.mark.asyncio
async def test_a_full_batch_is_sent_without_waiting_for_the_window(make_cache: MakeCache) -> None:
    store = _Store(gated=True)
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW, max_batch=3)
    for n in range(4):
        cache.lookup(f"b:user{n}")
    assert (cache.in_flight, cache.pending) == (3, 1)
    store.open.set()
    await cache.drain()
    assert store.calls == [["b:user0", "b:user1", "b:user2"], ["b:user3"]]


@pytest.mark.asyncio
async def test_a_key_pending_or_in_flight_is_fetched_once(make_cache: MakeCache) -> None:
    store = _Store({"b:alice": ALICE}, gated=True)
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW)
    results = [cache.lookup("b:alice") for _ in range(3)]  # pending
    cache.flush()
    results += [cache.lookup("b:alice") for _ in range(3)]  # in flight
    assert results == [MISS] * 6  # answered with the read still blocked in the pool
    store.open.set()
    await cache.drain()
    assert store.calls == [["b:alice"]]
    assert cache.lookup("b:alice").hit


@pytest.mark.asyncio
async def test_no_more_than_max_in_flight_calls_run_at_once(make_cache: MakeCache) -> None:
    store = _Store(gated=True)
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW, max_in_flight=2)
    for key in ("b:a", "b:b", "b:c"):
        cache.lookup(key)
        cache.flush()
    assert (cache.stats.calls, cache.in_flight, cache.pending) == (2, 2, 1)  # c waits
    store.open.set()
    await cache.drain()
    assert store.calls == [["b:a"], ["b:b"], ["b:c"]]
    assert store.most_at_once <= 2


@pytest.mark.asyncio
async def test_misses_beyond_max_in_flight_full_batches_are_dropped(make_cache: MakeCache) -> None:
    store = _Store(gated=True)
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW, max_in_flight=2, max_batch=2)
    for n in range(6):
        cache.lookup(f"b:user{n}")
    assert cache.stats.dropped == 2  # 2 calls of 2 keys are running: no room left
    store.open.set()
    await cache.drain()
    assert store.calls == [["b:user0", "b:user1"], ["b:user2", "b:user3"]]


@pytest.mark.asyncio
async def test_keys_left_out_of_an_answer_miss_again_and_are_fetched_again(
    make_cache: MakeCache,
) -> None:
    store = _Store({"b:alice": ALICE, "b:bob": ALICE}, leave_out=["b:bob"])
    cache = make_cache(store.fetch_many)
    cache.lookup("b:alice")
    cache.lookup("b:bob")
    await cache.drain()
    assert cache.stats.unanswered == 1 and cache.stats.errors == 0
    assert cache.lookup("b:alice").hit
    assert cache.lookup("b:bob") == MISS  # not paused: the store answered
    await cache.drain()
    assert store.calls == [["b:alice", "b:bob"], ["b:bob"]]
    assert cache.lookup("b:bob") == Lookup(True, ALICE)


@pytest.mark.asyncio
async def test_a_failed_call_caches_nothing_and_pauses_fills(make_cache: MakeCache) -> None:
    clock = ManualClock()
    cache = make_cache(_Store(fail=True).fetch_many, clock, error_backoff_s=1.0)
    cache.lookup("b:alice")
    cache.lookup("b:bob")
    await cache.drain()
    assert cache.stats.errors == 2  # counted in keys
    assert cache.lookup("b:bob") == MISS and cache.pending == 0  # paused: not queued
    clock.advance(1.1)
    cache.lookup("b:bob")
    assert cache.pending == 1  # the pause is over
    await cache.drain()


@pytest.mark.asyncio
async def test_a_failed_call_forgets_the_pending_batch(make_cache: MakeCache) -> None:
    store = _Store(gated=True, fail=True)
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW, max_in_flight=1)
    cache.lookup("b:alice")
    cache.flush()
    cache.lookup("b:bob")
    cache.flush()  # no free slot: b:bob waits for the running call
    store.open.set()
    await cache.drain()
    assert store.calls == [["b:alice"]]  # b:bob would have been a fill during the pause
    assert cache.pending == 0


@pytest.mark.asyncio
async def test_drain_sends_a_batch_still_waiting_for_its_window(make_cache: MakeCache) -> None:
    cache = make_cache(_Store({"b:alice": ALICE}).fetch_many, batch_window_s=NO_WINDOW)
    cache.lookup("b:alice")
    await cache.drain()
    assert cache.lookup("b:alice") == Lookup(True, ALICE)


@pytest.mark.asyncio
async def test_entries_expire_after_their_ttl(make_cache: MakeCache) -> None:
    clock = ManualClock()
    cache = make_cache(_Store({"b:alice": ALICE}).fetch_many, clock, ttl_s=10.0)
    cache.lookup("b:alice")
    await cache.drain()
    clock.advance(9.9)
    assert cache.lookup("b:alice").hit
    clock.advance(0.2)
    assert cache.lookup("b:alice") == MISS


@pytest.mark.asyncio
async def test_absent_users_are_forgotten_sooner(make_cache: MakeCache) -> None:
    clock = ManualClock()
    cache = make_cache(_Store().fetch_many, clock, ttl_s=300.0, absent_ttl_s=5.0)
    cache.lookup("b:nobody")
    await cache.drain()
    clock.advance(5.1)
    assert cache.lookup("b:nobody") == MISS


@pytest.mark.asyncio
async def test_a_full_cache_forgets_its_oldest_entry(make_cache: MakeCache) -> None:
    cache = make_cache(_Store().fetch_many, capacity=2)
    for key in ("b:1", "b:2", "b:3"):
        cache.lookup(key)
        await cache.drain()
    assert len(cache) == 2
    assert [cache.lookup(k).hit for k in ("b:2", "b:3", "b:1")] == [True, True, False]


def test_lookup_outside_an_event_loop_is_a_miss_not_an_error(
    make_cache: MakeCache, caplog: pytest.LogCaptureFixture
) -> None:
    cache = make_cache(_Store().fetch_many)
    assert cache.lookup("b:alice") == MISS
    assert cache.pending == 0 and not caplog.records


def test_an_invalid_config_names_every_bad_field() -> None:
    config = CacheConfig(ttl_s=0, capacity=0, batch_window_s=-1, max_batch=101)
    pattern = r"ttl_s must be positive.*capacity must be at least 1.*batch_window_s.*max_batch"
    with pytest.raises(ValueError, match=pattern):
        ProfileCache(_Store().fetch_many, ManualClock(), config)


def _sample(metric: str, label: str, value: str) -> float:
    return sample(metric, {label: value})


@pytest.mark.asyncio
async def test_lookups_are_counted_by_result_in_prometheus(make_cache: MakeCache) -> None:
    before = _sample("bidsim_profile_lookups_total", "result", "hit")
    cache = make_cache(_Store({"b:alice": ALICE}).fetch_many)
    cache.lookup("b:alice")
    await cache.drain()
    cache.lookup("b:alice")
    assert _sample("bidsim_profile_lookups_total", "result", "hit") == before + 1


@pytest.mark.asyncio
async def test_fills_are_counted_in_keys_by_outcome_in_prometheus(make_cache: MakeCache) -> None:
    outcomes = ("found", "absent", "unanswered")
    before = [_sample("bidsim_profile_fills_total", "outcome", o) for o in outcomes]
    cache = make_cache(_Store({"b:alice": ALICE}, leave_out=["b:carol"]).fetch_many)
    for key in ("b:alice", "b:bob", "b:carol"):
        cache.lookup(key)
    await cache.drain()
    after = [_sample("bidsim_profile_fills_total", "outcome", o) for o in outcomes]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]


@pytest.mark.asyncio
async def test_fill_calls_are_counted_so_keys_per_call_show(make_cache: MakeCache) -> None:
    before = sample("bidsim_profile_fill_calls_total")
    store = _Store(gated=True)
    cache = make_cache(store.fetch_many, batch_window_s=NO_WINDOW, max_batch=3)
    for n in range(4):
        cache.lookup(f"b:user{n}")
    store.open.set()
    await cache.drain()
    assert sample("bidsim_profile_fill_calls_total") == before + 2


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
        if cache.pending + cache.in_flight >= cache.config.max_batch:
            await cache.drain()  # the stream's pace leaves the store time; here we wait for it
    await cache.drain()


@pytest.mark.asyncio
async def test_hit_rate_on_the_sample_stream_after_warm_up_is_at_least_95_percent(
    table: ProfileTable, make_cache: MakeCache
) -> None:
    from models.synth import synth_profile  # the generated profiles `bidsim profiles load` writes

    keys = _sample_keys()
    table.put_many((k, p) for k in sorted({k for _, k in keys}) if (p := synth_profile(k, 0)))
    clock = ManualClock()
    cache = make_cache(table.get_many, clock)
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
        table = ProfileTable(aws_client("dynamodb", stack.aws_endpoint, quick=True), "profiles")
        table.ensure_table()
        table.put_many((f"b:user{n}", ALICE) for n in range(20))
        clock = ManualClock()
        cache = make_cache(table.get_many, clock)
        for n in range(10):
            cache.lookup(f"b:user{n}")
        await cache.drain()
        moto = stack.pids["moto"]
        os.kill(moto, signal.SIGSTOP)  # hung: reads now wait for their timeout
        assert cache.lookup("b:user10") == MISS
        cache.flush()
        assert cache.in_flight == 1  # answered while the read hangs
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
