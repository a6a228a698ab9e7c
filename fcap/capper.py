"""Stage 7's policy layer: negative cache, then one store round trip, then cap policy.

``FrequencyCapper.check`` never raises for the store: when the counters can't be read
(Valkey down or slow, or the request has no user/household key for a cap), each
subject's ``on_store_error`` decides: fail-open subjects pass, fail-closed ones
are ``unavailable``. The win path counts through ``count``, whose failures are
counted in metrics and re-raised (the caller decides whether to retry the notice).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bidder.core.clock import Clock
from fcap import metrics
from fcap.cache import CountCache, NegativeCache
from fcap.check_read import CheckResult, Reservation, SentCheck
from fcap.counted import CountedCopy, bit_of, day_of
from fcap.rules import Subject
from fcap.store import CountOutcome, FcapStore, FcapUnavailable

COUNTED_REFRESH_S = 5.0
"""How often a worker reads the counted bitmap: a copy stands in for reads only while
it is younger than the class's staleness (30 s for ``loose``) less ``COUNTED_FLUSH_S``."""
COUNTED_FLUSH_S = 1.0
"""How often a worker writes the bits of what it counted: a count reaches the bitmap
at most this late."""


@dataclass(frozen=True, slots=True)
class Verdict:
    capped: frozenset[Subject] = frozenset()
    """Over a cap: no bid (NoBid.CAPPED when nothing else is left)."""
    unavailable: frozenset[Subject] = frozenset()
    """Counters unknown and the campaign fails closed (NoBid.FCAP_UNAVAILABLE)."""
    reservations: Mapping[Subject, Reservation] = field(default_factory=dict)
    """Slots taken for reserve-at-bid subjects: release each one that is not bid."""
    store_error: bool = False
    unchecked: frozenset[Subject] = frozenset()
    """Allowed without their counters read (fail-open: store down or no key): their
    bids carry the unchecked mark (``bidder.core.tokens.CAPS_UNCHECKED``)."""
    on_count_cache: Mapping[Subject, Hashable] = field(default_factory=dict)
    """Allowed on a count-cache entry (classes that tolerate stale counts), with its
    key: report each one the worker bids on (``FrequencyCapper.bid_on``)."""

    def allows(self, subject: Subject) -> bool:
        return subject not in self.capped and subject not in self.unavailable

    @classmethod
    def merged(cls, verdicts: Iterable[Verdict]) -> Verdict:
        """One verdict of checks of disjoint subject sets."""
        capped: set[Subject] = set()
        unavailable: set[Subject] = set()
        unchecked: set[Subject] = set()
        reservations: dict[Subject, Reservation] = {}
        cached: dict[Subject, Hashable] = {}
        store_error = False
        for v in verdicts:
            capped |= v.capped
            unavailable |= v.unavailable
            unchecked |= v.unchecked
            reservations.update(v.reservations)
            cached.update(v.on_count_cache)
            store_error = store_error or v.store_error
        return cls(
            frozenset(capped), frozenset(unavailable), reservations, store_error,
            frozenset(unchecked), cached,
        )  # fmt: skip


# Not frozen, as ``fcap.check_read.SentCheck``: one is made for every cap read.
@dataclass(slots=True)
class PendingCheck:
    """A check whose read is on its way (``FrequencyCapper.begin``)."""

    sent: SentCheck
    ask: list[Subject]
    """The subjects read."""
    cached: set[Subject]
    """Capped by the caches already."""
    passed: dict[Subject, Hashable]
    """Allowed on a count-cache entry already, by key."""
    user_key: str | None
    household_key: str | None


def _unavailable(pending: PendingCheck) -> Verdict:
    """The verdict when the store failed: fail-closed subjects unavailable, the rest
    unchecked (fail-open)."""
    metrics.CHECK_ERRORS.inc()
    closed = frozenset(s for s in pending.ask if s.fail_closed)
    unchecked = frozenset(pending.ask) - closed
    return Verdict(
        frozenset(pending.cached), closed, store_error=True, unchecked=unchecked,
        on_count_cache=pending.passed,
    )  # fmt: skip


class FrequencyCapper:
    """``cache`` remembers who is capped until when; ``fresh`` remembers, for subjects of
    a class that tolerates stale counts, who was read under their caps, until when that
    read may stand in for a new one, and for how many more of this worker's bids (its
    share of the room the read found, so the workers together pass a cap by at most
    one bid each)."""

    def __init__(
        self,
        store: FcapStore,
        cache: NegativeCache | None = None,
        fresh: CountCache | None = None,
        workers: int = 1,
    ) -> None:
        """``workers``: how many workers check the same people (each with its own count
        cache); each one bids at most its share of the room a read finds."""
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self.store = store
        self.cache = cache if cache is not None else NegativeCache()
        self.fresh = fresh if fresh is not None else CountCache()
        self.counted: CountedCopy | None = None
        """This worker's copy of today's counted bitmap (``refresh_counted``)."""
        self._unmarked: dict[int, set[int]] = {}
        """Bits of the keys this worker counted, by day, not written yet (``flush_counted``)."""

    async def check(
        self,
        subjects: Sequence[Subject],
        user_key: str | None,
        household_key: str | None,
        now_ms: int,
        deadline: float,
    ) -> Verdict:
        """At most one round trip (two concurrent calls when households are capped too)."""
        begun = self.begin(subjects, user_key, household_key, now_ms, deadline)
        return begun if isinstance(begun, Verdict) else await self.finish(begun)

    def begin(
        self,
        subjects: Sequence[Subject],
        user_key: str | None,
        household_key: str | None,
        now_ms: int,
        deadline: float,
    ) -> Verdict | PendingCheck:
        """``check``'s first half, which never waits: the verdict when the caches answer
        for every subject, else the read sent (``FcapStore.begin``) for ``finish``."""
        cached: set[Subject] = set()
        spent: set[Subject] = set()
        ask: list[Subject] = []
        passed: dict[Subject, Hashable] = {}
        for subject in subjects:
            if not subject.has_caps:
                continue
            key = (user_key, household_key, subject.cache_id)
            if self.cache.capped(key, now_ms):
                cached.add(subject)
            elif not subject.max_stale_ms:
                ask.append(subject)
            elif self.fresh.spent(key, now_ms):
                # Its last read plus this worker's bids since reach a cap: until the read
                # is stale, as capped as a read would say if every bid were won.
                spent.add(subject)
            elif self._stands(subject, key, now_ms):
                passed[subject] = key
            else:
                ask.append(subject)
        if cached:
            metrics.CACHE_HITS.inc(len(cached))
            metrics.CAPPED_BY_CACHE.inc(len(cached))
        if spent:
            metrics.CAPPED_BY_COUNT_CACHE.inc(len(spent))
            cached |= spent
        if not ask:
            return Verdict(capped=frozenset(cached), on_count_cache=passed)
        metrics.CHECKS.inc()
        for subject in ask:
            metrics.READS_BY_CLASS[subject.cap_class].inc()
        sent = self.store.begin(ask, user_key, household_key, now_ms, deadline)
        return PendingCheck(sent, ask, cached, passed, user_key, household_key)

    async def finish(self, pending: PendingCheck) -> Verdict:
        """The verdict of a check ``begin`` left to the store."""
        try:
            result = await self.store.finish(pending.sent)
        except FcapUnavailable:
            return _unavailable(pending)
        return self._verdict(pending, result)

    def finish_now(self, pending: PendingCheck) -> Verdict | None:
        """``finish`` once every reply of the read is in, without awaiting; None when
        only ``finish`` can conclude (the check script must be loaded again)."""
        try:
            result = self.store.finish_now(pending.sent)
        except FcapUnavailable:
            return _unavailable(pending)
        return None if result is None else self._verdict(pending, result)

    def _verdict(self, pending: PendingCheck, result: CheckResult) -> Verdict:
        cached, passed = pending.cached, pending.passed
        user_key, household_key = pending.user_key, pending.household_key
        now_ms = pending.sent.now_ms
        for subject, until in result.capped.items():
            self.cache.put((user_key, household_key, subject.cache_id), until)
        metrics.CAPPED_BY_STORE.inc(len(result.capped))
        for subject, left in result.room.items():
            if subject not in result.capped and subject not in result.unknown:
                key = passed[subject] = (user_key, household_key, subject.cache_id)
                self.fresh.put(key, now_ms + subject.max_stale_ms, self._share(left))
        unavailable = frozenset(s for s in result.unknown if s.fail_closed)
        capped = frozenset(cached | result.capped.keys()) - unavailable
        unchecked = frozenset(result.unknown) - unavailable - capped
        return Verdict(
            capped, unavailable, result.reservations, unchecked=unchecked, on_count_cache=passed
        )

    def _stands(
        self, subject: Subject, key: tuple[str | None, str | None, int], now_ms: int
    ) -> bool:
        """A subject of a class that tolerates stale counts passes without a read: on its
        count-cache entry, or on the counted bitmap's word that its person was never
        counted today (``fcap.counted``), which then starts an entry."""
        if self.fresh.passes(key, now_ms):
            metrics.FRESH_HITS_BY_CLASS[subject.cap_class].inc()
            return True
        copy = self.counted
        if not subject.zero_room or copy is None:
            return False
        stands_ms = subject.max_stale_ms - round(COUNTED_FLUSH_S * 1000)
        if now_ms - copy.read_ms >= stands_ms:
            return False
        user_key, household_key = key[0], key[1]
        for side_key, rules in (
            (user_key, subject.user_rules),
            (household_key, subject.household_rules),
        ):
            if rules and (side_key is None or not copy.never_counted(side_key, now_ms)):
                return False
        metrics.NEVER_COUNTED_BY_CLASS[subject.cap_class].inc()
        self.fresh.put(key, copy.read_ms + stands_ms, self._share(subject.zero_room))
        return True

    def _share(self, room: int) -> int:
        """This worker's share of a room: rounded up, so the fleet's bids on one read
        pass a cap by at most ``workers - 1``."""
        return -(-room // self.workers)

    async def refresh_counted(self, now_ms: int, deadline: float) -> None:
        """Read today's counted bitmap (``fcap.counted``); on failure the old copy stays
        and ages out of use."""
        day = day_of(now_ms)
        try:
            bits = await self.store.read_counted(day, deadline)
        except FcapUnavailable:
            metrics.COUNTED_ERRORS.inc()
            return
        self.counted = CountedCopy(day, bits, now_ms)

    async def flush_counted(self, now_ms: int, deadline: float | None = None) -> None:
        """Write the bits of the keys this worker counted since the last flush, one call
        per day (batched: one bitmap key for the fleet must not take a write per win);
        on failure they are kept for the next flush."""
        unmarked, self._unmarked = self._unmarked, {}
        for day, bits in sorted(unmarked.items()):
            try:
                await self.store.mark_counted(day, bits, now_ms, deadline)
            except FcapUnavailable:
                metrics.COUNTED_ERRORS.inc()
                self._unmarked.setdefault(day, set()).update(bits)

    async def keep_counted_fresh(self, clock: Clock) -> None:
        """Flush this worker's marks every ``COUNTED_FLUSH_S`` and read the bitmap every
        ``COUNTED_REFRESH_S``, forever (a worker's background job)."""
        every = round(COUNTED_REFRESH_S / COUNTED_FLUSH_S)
        for n in itertools.count():
            await self.flush_counted(clock.wall_ms())
            if n % every == 0:
                limit = asyncio.get_running_loop().time() + COUNTED_REFRESH_S
                await self.refresh_counted(clock.wall_ms(), limit)
            await asyncio.sleep(COUNTED_FLUSH_S)

    def bid_on(self, key: Hashable) -> None:
        """This worker bid on a subject it allowed on a count-cache entry (``Verdict.
        on_count_cache``): one less bid that entry allows."""
        self.fresh.spend(key)

    async def check_keyed(
        self,
        groups: Sequence[tuple[str | None, Sequence[Subject]]],
        household_key: str | None,
        now_ms: int,
        deadline: float,
    ) -> Verdict:
        """``check`` of each group of subjects under its own user key (fallback keys,
        ``bidder.pipeline.cap_keys``), all concurrently: one round trip of latency."""
        if len(groups) == 1:
            key, subjects = groups[0]
            return await self.check(subjects, key, household_key, now_ms, deadline)
        verdicts = await asyncio.gather(
            *(self.check(group, key, household_key, now_ms, deadline) for key, group in groups)
        )
        return Verdict.merged(verdicts)

    async def count(
        self,
        impression_id: str,
        subject: Subject,
        event: str,
        user_key: str | None,
        household_key: str | None,
        impression_ms: int,
        now_ms: int,
        deadline: float | None = None,
    ) -> CountOutcome:
        """The win path: see ``FcapStore.count``. Raises FcapUnavailable."""
        try:
            outcome = await self.store.count(
                impression_id, subject, event, user_key, household_key, impression_ms, now_ms,
                deadline,
            )  # fmt: skip
        except FcapUnavailable:
            metrics.COUNT_ERRORS.inc()
            raise
        if outcome is not CountOutcome.NOT_COUNTED:
            bits = self._unmarked.setdefault(day_of(impression_ms), set())
            for key, rules in (
                (user_key, subject.user_count_rules),
                (household_key, subject.household_rules),
            ):
                if key and rules:
                    bits.add(bit_of(key))
        return outcome

    async def release(self, reservation: Reservation, deadline: float | None = None) -> None:
        """Give back a reserve-at-bid slot; failures are counted, not raised.

        A "capped" this process cached because of the slot stays until it expires
        (conservative; reservations are short-lived next to cap windows).
        """
        try:
            await self.store.release(reservation, deadline)
        except FcapUnavailable:
            metrics.RELEASE_ERRORS.inc()
