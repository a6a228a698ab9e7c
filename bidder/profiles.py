"""User profiles: a DynamoDB table and the in-process TTL cache in front of it (DAX's role).

Stage 5 looks a profile up by the request's user key (``bidder.identity``) on the event
loop thread, inside an 8 ms budget, while a DynamoDB read takes milliseconds and an
outage can hang one for seconds. So the bid path never waits for the store:

* ``ProfileCache.lookup`` is synchronous and answers from memory at once: a *hit*
  (a fresh entry: the profile, or "this user has no profile") or a *miss*.
* A miss schedules a background fill and returns. Fills run in a small thread pool of
  their own (boto3 blocks; it never runs on the loop thread), at most ``max_in_flight``
  at a time, one per key (a key already being fetched is not fetched again). When the
  pool is full the miss is dropped, not queued: a queue would only grow during an outage.
* A failed fill caches nothing and pauses new fills for ``error_backoff_s``, so a dead
  store costs a few threads and some log lines, never the bid path's time.
* Entries live ``ttl_s`` (profiles) or ``absent_ttl_s`` (users without a profile) on
  the injected clock's monotonic time; the cache holds at most ``capacity`` entries and
  forgets the oldest first.

``lookup`` never raises: any fault becomes a miss. Metrics: ``bidsim_profile_lookups``
by result (hit rate = hit / (hit + miss)), ``bidsim_profile_fills`` by outcome and
``bidsim_profile_fill_seconds`` (miss latency: from the miss to the finished read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, TypeGuard

import boto3
import orjson
from boto3.dynamodb.table import BatchWriter
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from bidder import metrics
from bidder.aws import DUMMY_CREDENTIALS, is_loopback
from bidder.clock import Clock

log = logging.getLogger(__name__)

DEFAULT_TABLE = "bidsim-profiles"
MISS_POLICIES = ("continue", "nobid")
"""What stage 5 does on a cache miss: go on without a profile, or no-bid (PROFILE_MISS)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """What the DSP knows about a user; the model reads it (``models.features``)."""

    segments: frozenset[int]
    """Interest segments as IAB tier-1 category numbers (13 is 'Personal Finance')."""
    last_click_ms: int | None
    """Epoch ms of the user's last ad click, None if none in the last 30 days."""
    clicks_30d: int


def profile_to_doc(profile: Profile) -> dict[str, Any]:
    return {
        "segments": sorted(profile.segments),
        "last_click_ms": profile.last_click_ms,
        "clicks_30d": profile.clicks_30d,
    }


def profile_from_doc(doc: Any) -> Profile:
    """Decode a stored profile; raises ValueError when the document is malformed."""
    if not isinstance(doc, dict):
        raise ValueError("a profile must be a JSON object")
    segments, last, clicks = doc.get("segments"), doc.get("last_click_ms"), doc.get("clicks_30d")
    if not isinstance(segments, list) or not all(_is_int(s) for s in segments):
        raise ValueError("profile segments must be a list of integers")
    if last is not None and not _is_int(last):
        raise ValueError("profile last_click_ms must be an integer or null")
    if not _is_int(clicks) or clicks < 0:
        raise ValueError("profile clicks_30d must be a non-negative integer")
    return Profile(frozenset(segments), last, clicks)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------ the table


class ProfileStoreError(Exception):
    """The profile table could not be read or written."""


_FAST_FAIL = Config(connect_timeout=0.5, read_timeout=1.0, retries={"max_attempts": 1})


def profile_client(endpoint: str, region: str = "us-east-1") -> BaseClient:
    """A DynamoDB client for background fills: one attempt, sub-second timeouts.

    ``bidder.aws.aws_client`` retries and waits seconds, right for loaders; a cache fill
    that is late is worthless, and a stuck one holds a pool thread.
    """
    credentials = DUMMY_CREDENTIALS if is_loopback(endpoint) else {}
    session = boto3.session.Session(region_name=region)
    client: BaseClient = session.client(
        "dynamodb", endpoint_url=endpoint, config=_FAST_FAIL, **credentials
    )
    return client


class ProfileTable:
    """Profiles in DynamoDB, one item per user key: ``{"k": S, "p": S (JSON)}``."""

    def __init__(self, client: Any, table_name: str = DEFAULT_TABLE) -> None:
        self._client = client
        self.table_name = table_name

    def ensure_table(self) -> None:
        """Create the on-demand table if it is missing and wait until it is ACTIVE."""
        with self._errors("ensure_table"):
            try:
                self._client.describe_table(TableName=self.table_name)
            except self._client.exceptions.ResourceNotFoundException:
                with contextlib.suppress(self._client.exceptions.ResourceInUseException):
                    self._client.create_table(
                        TableName=self.table_name,
                        BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                    )
            waiter = self._client.get_waiter("table_exists")
            waiter.wait(TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    def put_many(self, profiles: Iterable[tuple[str, Profile]]) -> int:
        """Write (user key, profile) pairs in batches of 25; returns the count."""
        count = 0
        with self._errors("put_many"), self._batch_writer() as batch:
            for key, profile in profiles:
                body = orjson.dumps(profile_to_doc(profile)).decode()
                batch.put_item(Item={"k": {"S": key}, "p": {"S": body}})
                count += 1
        return count

    def get(self, key: str) -> Profile | None:
        """The user's profile, None when there is none; raises ProfileStoreError."""
        with self._errors("get"):
            item = self._client.get_item(TableName=self.table_name, Key={"k": {"S": key}})
        found = item.get("Item")
        if found is None:
            return None
        try:
            return profile_from_doc(orjson.loads(found["p"]["S"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileStoreError(f"profile {key!r} is malformed: {exc}") from exc

    def _batch_writer(self) -> BatchWriter:
        # The low-level client is fine: the items are already in DynamoDB's wire format.
        return BatchWriter(self.table_name, self._client)

    @contextlib.contextmanager
    def _errors(self, operation: str) -> Any:
        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            endpoint = self._client.meta.endpoint_url
            raise ProfileStoreError(
                f"{operation} on table {self.table_name!r} at {endpoint} failed: {exc}"
            ) from exc


# ------------------------------------------------------------------------------ the cache


class Lookup(NamedTuple):
    hit: bool
    """True when the cache could answer (a profile, or 'no profile'); False on a miss."""
    profile: Profile | None


MISS = Lookup(False, None)
_ABSENT = Lookup(True, None)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    ttl_s: float = 300.0
    absent_ttl_s: float = 60.0
    capacity: int = 200_000
    max_in_flight: int = 8
    error_backoff_s: float = 1.0

    def problems(self) -> list[str]:
        """Each invalid field, by name (empty when valid)."""
        checks = [
            (self.ttl_s > 0, f"ttl_s must be positive, got {self.ttl_s}"),
            (self.absent_ttl_s >= 0, f"absent_ttl_s must not be negative, got {self.absent_ttl_s}"),
            (self.capacity >= 1, f"capacity must be at least 1, got {self.capacity}"),
            (1 <= self.max_in_flight <= 256, "max_in_flight must be 1-256"),
            (self.error_backoff_s >= 0, "error_backoff_s must not be negative"),
        ]
        return [message for ok, message in checks if not ok]


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    found: int = 0
    absent: int = 0
    errors: int = 0
    dropped: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


_HIT = metrics.PROFILE_LOOKUPS.labels("hit")
_MISSED = metrics.PROFILE_LOOKUPS.labels("miss")
_FILLS = {o: metrics.PROFILE_FILLS.labels(o) for o in ("found", "absent", "error", "dropped")}


class ProfileCache:
    """Read-through TTL cache whose misses are filled in the background (module doc)."""

    def __init__(
        self,
        fetch: Callable[[str], Profile | None],
        clock: Clock,
        config: CacheConfig | None = None,
    ) -> None:
        """``fetch`` blocks (e.g. ``ProfileTable.get``); it only ever runs in the pool."""
        self.config = config or CacheConfig()
        problems = self.config.problems()
        if problems:
            raise ValueError("invalid profile cache config: " + "; ".join(problems))
        self._fetch = fetch
        self._clock = clock
        self._entries: dict[str, tuple[float, Lookup]] = {}
        self._in_flight: dict[str, asyncio.Future[Profile | None]] = {}
        self._paused_until = float("-inf")
        self._pool = ThreadPoolExecutor(self.config.max_in_flight, thread_name_prefix="profiles")
        self.stats = CacheStats()

    def lookup(self, key: str) -> Lookup:
        """The cached answer for ``key``, or MISS (and a fill starts). Never blocks or raises."""
        entry = self._entries.get(key)
        now = self._clock.monotonic()
        if entry is not None and entry[0] > now:
            self.stats.hits += 1
            _HIT.inc()
            return entry[1]
        self.stats.misses += 1
        _MISSED.inc()
        try:
            self._start_fill(key, now)
        except Exception:  # a bug here must not cost the request; the fill is just skipped
            log.exception("profile cache could not start a fill")
        return MISS

    async def drain(self) -> None:
        """Wait until every fill started so far has finished (tests, shutdown)."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    def close(self) -> None:
        """Stop the pool without waiting for fills stuck on a dead store."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __len__(self) -> int:
        return len(self._entries)

    def _start_fill(self, key: str, now: float) -> None:
        if key in self._in_flight or now < self._paused_until:
            return
        if len(self._in_flight) >= self.config.max_in_flight:
            self.stats.dropped += 1
            _FILLS["dropped"].inc()
            return
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, self._fetch, key)
        self._in_flight[key] = future
        future.add_done_callback(partial(self._filled, key, time.perf_counter()))

    def _filled(self, key: str, started: float, future: Future[Profile | None]) -> None:
        """Runs on the loop thread when a fill ends."""
        del self._in_flight[key]
        # Real elapsed time on purpose: a latency metric, not a decision on the clock.
        metrics.PROFILE_FILL_LATENCY.observe(time.perf_counter() - started)
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self.stats.errors += 1
            _FILLS["error"].inc()
            self._paused_until = self._clock.monotonic() + self.config.error_backoff_s
            log.warning(
                "profile fill failed; pausing fills for %gs: %s", self.config.error_backoff_s, error
            )
            return
        profile = future.result()
        self._store(key, profile)

    def _store(self, key: str, profile: Profile | None) -> None:
        now = self._clock.monotonic()
        if profile is None:
            self.stats.absent += 1
            _FILLS["absent"].inc()
            value, expires = _ABSENT, now + self.config.absent_ttl_s
        else:
            self.stats.found += 1
            _FILLS["found"].inc()
            value, expires = Lookup(True, profile), now + self.config.ttl_s
        self._entries.pop(key, None)  # re-insert at the end: the oldest entries go first
        self._entries[key] = (expires, value)
        if len(self._entries) > self.config.capacity:
            del self._entries[next(iter(self._entries))]
