"""The in-process TTL cache in front of a DynamoDB table (DAX's role): the profile table,
and the identity table (``bidder.decide.identity_table``) through the same class, each
with its own metrics.

Stage 5 looks a profile up by the request's user key (``bidder.decide.identity``) on the event
loop thread, inside an 8 ms budget, while a DynamoDB read takes milliseconds and an
outage can hang one for seconds. So the bid path never waits for the store:

* ``ProfileCache.lookup`` is synchronous and answers from memory at once: a *hit*
  (a fresh entry: the profile, or "this user has no profile") or a *miss*.
* A miss adds its key to the *pending batch* and returns; a key already pending or in
  flight is not added again. The batch is sent as one ``BatchGetItem`` (``fetch_many``)
  ``batch_window_s`` after its first key, or at once when it holds ``max_batch`` keys.
  Fills are off the bid path, so a short wait costs nothing, and it holds the store's call
  rate per worker to about one per window however fast requests come, until batches fill
  up (one ``GetItem`` per miss kept the local moto at 50-70% of a core at 800 req/s).
  ``flush()`` sends the batch now.
* Calls run in a small thread pool of their own (boto3 blocks; it never runs on the loop
  thread), at most ``max_in_flight`` at a time; while all are busy the pending batch
  waits for the next call to finish. Once ``max_in_flight * max_batch`` keys are pending
  or in flight, a miss is dropped, not queued: a queue would only grow during an outage.
* A key the answer leaves out (DynamoDB's ``UnprocessedKeys``, or a malformed item,
  which the table logs) is not filled; it misses again later. Nobody retries: a late
  fill is worthless, and the store is up, so fills go on.
* A failed call caches nothing, forgets the pending batch and pauses new fills for
  ``error_backoff_s``, so a dead store costs a few threads and some log lines, never the
  bid path's time.
* Entries live ``ttl_s`` (profiles) or ``absent_ttl_s`` (users without a profile) on
  the injected clock's monotonic time; the cache holds at most ``capacity`` entries and
  forgets the oldest first. (The window timer is the loop's own ``call_later``: it only
  decides how soon a fill is sent, never what an answer means.)

``lookup`` never raises: any fault becomes a miss. Metrics: ``bidsim_profile_lookups``
by result (hit rate = hit / (hit + miss)), ``bidsim_profile_fills`` by outcome, in keys
(found, absent, unanswered, error, dropped), ``bidsim_profile_fill_calls`` (keys per
call = fills / calls) and ``bidsim_profile_fill_seconds`` (miss latency: from a key's
miss to its batch's answer, the window included).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Generic, NamedTuple, TypeVar

from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.published_metrics import Counter, Histogram
from bidder.decide.profiles import MAX_BATCH_KEYS, Profile

log = logging.getLogger(__name__)


V = TypeVar("V")


class Lookup(NamedTuple, Generic[V]):
    hit: bool
    """True when the cache could answer (a value, or 'no item'); False on a miss."""
    value: V | None


MISS: Lookup[object] = Lookup(False, None)
_ABSENT: Lookup[object] = Lookup(True, None)

FetchMany = Callable[[Sequence[str]], Mapping[str, V | None]]
"""Blocking batch read, e.g. ``ProfileTable.get_many``: keys it leaves out stay unfilled."""


@dataclass(frozen=True, slots=True)
class CacheConfig:
    ttl_s: float = 300.0
    absent_ttl_s: float = 60.0
    capacity: int = 200_000
    max_in_flight: int = 2
    """Concurrent ``fetch_many`` calls (pool threads)."""
    error_backoff_s: float = 1.0
    batch_window_s: float = 0.02
    """How long the pending batch waits after its first key before it is sent."""
    max_batch: int = MAX_BATCH_KEYS
    """A pending batch this big is sent at once."""

    def problems(self) -> list[str]:
        """Each invalid field, by name (empty when valid)."""
        checks = [
            (self.ttl_s > 0, f"ttl_s must be positive, got {self.ttl_s}"),
            (self.absent_ttl_s >= 0, f"absent_ttl_s must not be negative, got {self.absent_ttl_s}"),
            (self.capacity >= 1, f"capacity must be at least 1, got {self.capacity}"),
            (1 <= self.max_in_flight <= 256, "max_in_flight must be 1-256"),
            (self.error_backoff_s >= 0, "error_backoff_s must not be negative"),
            # a fill sent seconds after its miss is worthless: so is a longer window
            (0 <= self.batch_window_s <= 1, "batch_window_s must be 0-1 seconds"),
            (1 <= self.max_batch <= MAX_BATCH_KEYS, f"max_batch must be 1-{MAX_BATCH_KEYS}"),
        ]
        return [message for ok, message in checks if not ok]


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    found: int = 0
    absent: int = 0
    unanswered: int = 0
    """Keys a call left out (unprocessed by DynamoDB, malformed): they miss again later."""
    errors: int = 0
    """Keys of failed calls."""
    dropped: int = 0
    """Misses not queued: too many keys pending or in flight."""
    calls: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


_OUTCOMES = ("found", "absent", "unanswered", "error", "dropped")


class CacheMetrics:
    """A cache's Prometheus series: lookups by result, fills by outcome, calls, latency."""

    def __init__(
        self, name: str, lookups: Counter, fills: Counter, calls: Counter, latency: Histogram
    ):
        self.name = name
        """What the cache holds, in log lines and thread names ('profile', 'identity')."""
        self.hit, self.miss = lookups.labels("hit"), lookups.labels("miss")
        self.fills = {o: fills.labels(o) for o in _OUTCOMES}
        self.calls = calls
        self.latency = latency


PROFILE_METRICS = CacheMetrics(
    "profile",
    metrics.PROFILE_LOOKUPS,
    metrics.PROFILE_FILLS,
    metrics.PROFILE_FILL_CALLS,
    metrics.PROFILE_FILL_LATENCY,
)


class FillCache(Generic[V]):
    """Read-through TTL cache whose misses are filled in background batches (module doc)."""

    def __init__(
        self,
        fetch_many: FetchMany[V],
        clock: Clock,
        config: CacheConfig | None = None,
        series: CacheMetrics = PROFILE_METRICS,
    ):
        """``fetch_many`` blocks (e.g. ``ProfileTable.get_many``); it only runs in the pool."""
        self.config = config or CacheConfig()
        problems = self.config.problems()
        if problems:
            raise ValueError(f"invalid {series.name} cache config: " + "; ".join(problems))
        self._series = series
        self._hits, self._misses = series.hit, series.miss  # one attribute each: the bid path
        self._fetch_many = fetch_many
        self._clock = clock
        self._entries: dict[str, tuple[float, Lookup[V]]] = {}
        # key -> perf_counter() at its miss (the latency metric), in arrival order
        self._pending: dict[str, float] = {}
        self._flying: dict[str, float] = {}
        self._calls: set[asyncio.Future[Mapping[str, V | None]]] = set()
        self._window: asyncio.TimerHandle | None = None
        self._due = False  # the pending batch's window is over; it goes with the next free call
        self._paused_until = float("-inf")
        self._closed = False
        self._max_keys = self.config.max_in_flight * self.config.max_batch
        self._pool = ThreadPoolExecutor(self.config.max_in_flight, thread_name_prefix=series.name)
        self.stats = CacheStats()

    def lookup(self, key: str) -> Lookup[V]:
        """The cached answer for ``key``, or MISS (and a fill is queued). Never blocks or raises."""
        entry = self._entries.get(key)
        now = self._clock.monotonic()
        if entry is not None and entry[0] > now:
            self.stats.hits += 1
            self._hits.inc()
            return entry[1]
        self.stats.misses += 1
        self._misses.inc()
        try:
            self._enqueue(key, now)
        except Exception:  # a bug here must not cost the request; the fill is just skipped
            log.exception("%s cache could not queue a fill", self._series.name)
        return MISS  # type: ignore[return-value]  # (False, None) is a miss of any type

    @property
    def pending(self) -> int:
        """Keys waiting to be sent."""
        return len(self._pending)

    @property
    def in_flight(self) -> int:
        """Keys of the calls running now."""
        return len(self._flying)

    def flush(self) -> None:
        """Send the pending keys now, without waiting for the window (as call slots allow)."""
        if self._pending:
            self._due = True
            self._pump()

    async def drain(self) -> None:
        """Send everything pending and wait until every call has finished (tests, shutdown)."""
        while self._pending or self._calls:
            self.flush()
            await asyncio.gather(*self._calls, return_exceptions=True)

    def close(self) -> None:
        """Forget pending keys; stop the pool without waiting for calls stuck on a dead store."""
        self._closed = True
        self._forget_pending()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __len__(self) -> int:
        return len(self._entries)

    def _enqueue(self, key: str, now: float) -> None:
        if key in self._pending or key in self._flying or now < self._paused_until:
            return
        if self._closed:
            return
        if len(self._pending) + len(self._flying) >= self._max_keys:
            self.stats.dropped += 1
            self._series.fills["dropped"].inc()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a script, a sync test): nothing could run the fill
            return
        self._pending[key] = time.perf_counter()
        if len(self._pending) >= self.config.max_batch:
            self._pump()
        elif self._window is None and not self._due:
            self._window = loop.call_later(self.config.batch_window_s, self._window_over)

    def _window_over(self) -> None:
        self._window = None
        self._due = True
        self._pump()

    def _pump(self) -> None:
        """Send ready batches (window over, or full) while a call slot is free."""
        size = self.config.max_batch
        while (
            self._pending
            and len(self._calls) < self.config.max_in_flight
            and (self._due or len(self._pending) >= size)
        ):
            self._send({key: self._pending.pop(key) for key in list(islice(self._pending, size))})
        if not self._pending:
            self._forget_pending()

    def _send(self, batch: dict[str, float]) -> None:
        keys = list(batch)
        call = asyncio.get_running_loop().run_in_executor(self._pool, self._fetch_many, keys)
        self._flying.update(batch)
        self._calls.add(call)
        self.stats.calls += 1
        self._series.calls.inc()
        call.add_done_callback(partial(self._answered, keys))

    def _forget_pending(self) -> None:
        self._pending.clear()
        self._due = False
        if self._window is not None:
            self._window.cancel()
            self._window = None

    def _answered(self, keys: list[str], call: asyncio.Future[Mapping[str, V | None]]) -> None:
        """Runs on the loop thread when a call ends."""
        self._calls.discard(call)
        # Real elapsed time on purpose: a latency metric, not a decision on the clock.
        done = time.perf_counter()
        for key in keys:
            self._series.latency.observe(done - self._flying.pop(key))
        if call.cancelled():
            return
        try:
            error = call.exception()
            if error is None:
                self._fill(keys, call.result())
            else:
                self._failed(keys, error)
        finally:
            self._pump()  # a slot is free: a batch may be waiting for it

    def _failed(self, keys: list[str], error: BaseException) -> None:
        self.stats.errors += len(keys)
        self._series.fills["error"].inc(len(keys))
        self._paused_until = self._clock.monotonic() + self.config.error_backoff_s
        self._forget_pending()  # sending them now would be fills during the pause
        log.warning(
            "%s fill of %d keys failed; pausing fills for %gs: %s",
            self._series.name,
            len(keys),
            self.config.error_backoff_s,
            error,
        )

    def _fill(self, keys: list[str], answer: Mapping[str, V | None]) -> None:
        unanswered = [key for key in keys if key not in answer]
        for key in keys:
            if key in answer:
                self._store(key, answer[key])
        if unanswered:
            self.stats.unanswered += len(unanswered)
            self._series.fills["unanswered"].inc(len(unanswered))

    def _store(self, key: str, value: V | None) -> None:
        now = self._clock.monotonic()
        entry: Lookup[V]
        if value is None:
            self.stats.absent += 1
            self._series.fills["absent"].inc()
            entry, expires = _ABSENT, now + self.config.absent_ttl_s  # type: ignore[assignment]
        else:
            self.stats.found += 1
            self._series.fills["found"].inc()
            entry, expires = Lookup(True, value), now + self.config.ttl_s
        self._entries.pop(key, None)  # re-insert at the end: the oldest entries go first
        self._entries[key] = (expires, entry)
        if len(self._entries) > self.config.capacity:
            del self._entries[next(iter(self._entries))]


ProfileCache = FillCache[Profile]
"""Stage 5's profile cache."""

PROFILE_BATCH_WINDOW_S = 0.1
"""The profile cache's window. A profile fill serves the user's later requests, seconds
to minutes apart, so a fill 100 ms after the miss loses next to nothing, while below
the rate that fills batches the window sets the call rate, and every call costs the
worker's threads about a millisecond of boto3 CPU under the GIL. The identity cache
keeps the default: until its fill lands, a request is capped under its own key."""
