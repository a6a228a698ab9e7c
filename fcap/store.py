"""The Valkey adapter: three scripts behind an async API. Raises ``FcapUnavailable``.

Works with ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster`` alike: every
call touches the keys of one hash tag. A user's counters and a household's are two
tags (maybe two Cluster nodes), so a check or count that needs both sends two
script calls *concurrently*: about one round trip of latency, each side atomic on
its own. A count half-done by a failure is completed by retrying the whole count:
the side that already counted answers "duplicate".

Time authority: the caller's clock. ``now_ms`` (and a win's ``impression_ms``) go in
as ARGV, so simulations run in virtual time and every bidder process judges windows
by its own clock; see docs/fcap.md for what skew does at a window edge.

No retries, no backoff: a timed-out or failed call raises ``FcapUnavailable`` and the
campaign's policy decides (``fcap.capper``). ``connect`` builds clients that way.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from fcap import keys, scripts
from fcap.rules import Rule, Subject, capped_until, fields_at, rules_argv

CHECK_TIMEOUT_S = 0.004
RESERVED = -1
"""In a side's answers: the subject was under every cap and a slot was reserved."""
WRITE_TIMEOUT_S = 0.1


class FcapUnavailable(Exception):
    """The counters could not be read or written in time (Valkey down, slow or erroring)."""


class CountOutcome(enum.Enum):
    COUNTED = "counted"
    DUPLICATE = "duplicate"
    """This impression id was counted before; nothing changed."""
    EXPIRED = "expired"
    """So late that no check will read its buckets again; nothing changed."""
    NOT_COUNTED = "not_counted"
    """Nothing to count: no caps, another event counts it, or no user/household key."""


@dataclass(slots=True)
class Reservation:
    """A slot taken by a reserve-at-bid check; release it if the bid is not won."""

    subject: Subject
    at_ms: int
    sides: tuple[tuple[str, str], ...]
    """(keys.USER or keys.HOUSEHOLD, user or household key) of each side reserved."""
    released: bool = False


@dataclass(frozen=True, slots=True)
class CheckResult:
    capped: dict[Subject, int]
    """Capped subjects and the instant (caller ms) until which each stays capped."""
    unknown: frozenset[Subject]
    """Subjects with caps on a side whose key the request lacks (no user/household key)."""
    reservations: dict[Subject, Reservation] = field(default_factory=dict)


def connect(url: str, *, cluster: bool = False, socket_timeout_s: float = 0.25) -> Any:
    """A client for fcap: no retries or backoff; socket timeouts as a backstop only."""
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": socket_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
    }
    if cluster:
        return RedisCluster.from_url(url, **options)
    return Redis.from_url(url, **options)


class FcapStore:
    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        check_timeout_s: float = CHECK_TIMEOUT_S,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.check_timeout_s = check_timeout_s
        self.write_timeout_s = write_timeout_s
        self._background: set[asyncio.Task[Any]] = set()
        self._loading = asyncio.Lock()

    async def start(self, timeout_s: float = 5.0) -> None:
        """Once, before the first check: a Cluster client learns the slot map, and the
        scripts are loaded (on every primary). redis-py's async Cluster client must not
        see its first commands concurrently: the racing initializations close each
        other's connections. Raises FcapUnavailable."""

        async def prepare() -> None:
            if isinstance(self.client, RedisCluster):
                await self.client.initialize()
            for script in scripts.ALL:
                await self.client.script_load(script.body)

        await self._run([prepare()], asyncio.get_running_loop().time() + timeout_s)

    async def check(
        self,
        subjects: Sequence[Subject],
        user_key: str | None,
        household_key: str | None,
        now_ms: int,
        deadline: float,
    ) -> CheckResult:
        """Which subjects are capped; reserves for reserve-at-bid subjects under their caps.

        ``deadline`` is absolute on the loop's clock; the call also stops after
        ``check_timeout_s``. Raises FcapUnavailable.
        """
        unknown = frozenset(s for s in subjects if _lacks_key(s, user_key, household_key))
        # A fail-closed subject with unknown counters is out anyway: don't touch its others.
        live = [s for s in subjects if not (s.fail_closed and s in unknown)]
        user = [s for s in live if s.user_rules and user_key]
        house = [s for s in live if s.household_rules and household_key]
        plan = [(keys.USER, user_key, user), (keys.HOUSEHOLD, household_key, house)]
        plan = [(kind, key, side) for kind, key, side in plan if key and side]
        calls = [self._check_side(kind, key, side, now_ms) for kind, key, side in plan if key]
        limit = min(deadline, asyncio.get_running_loop().time() + self.check_timeout_s)
        answers = await self._run(calls, limit) if calls else []
        sides = [(k, key, side, a) for (k, key, side), a in zip(plan, answers, strict=True)]
        return self._result(sides, unknown, now_ms)

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
        """Count one impression (event 'win' or 'viewable') into every rule it belongs to.

        Counts only when ``event`` is the subject's ``count_event`` (reserve-at-bid
        subjects were counted by their reservation). Idempotent per impression id.
        Raises FcapUnavailable.
        """
        if event != subject.count_event:
            return CountOutcome.NOT_COUNTED
        calls = []
        for kind, key, rules in (
            (keys.USER, user_key, subject.user_count_rules),
            (keys.HOUSEHOLD, household_key, subject.household_rules),
        ):
            if key and rules:
                args = (now_ms, impression_ms, len(rules), *rules_argv(rules))
                dedup = keys.dedup(kind, key, impression_id)
                calls.append(
                    scripts.COUNT(
                        self.client, (keys.counters(kind, key), dedup), args, self._loading
                    )
                )
        if not calls:
            return CountOutcome.NOT_COUNTED
        codes = await self._run(calls, self._write_limit(deadline))
        return _combine(codes)

    async def release(self, reservation: Reservation, deadline: float | None = None) -> None:
        """Undo a reservation, at most once (a second call does nothing). Raises
        FcapUnavailable; a release that failed is not retried (the slot stays taken,
        which is the safe side, until its bucket expires)."""
        if reservation.released:
            return
        reservation.released = True
        subject = reservation.subject
        calls = []
        for kind, key in reservation.sides:
            rules = subject.user_rules if kind == keys.USER else subject.household_rules
            args = (reservation.at_ms, len(rules), *rules_argv(rules))
            calls.append(
                scripts.RELEASE(self.client, (keys.counters(kind, key),), args, self._loading)
            )
        await self._run(calls, self._write_limit(deadline))

    async def drain(self) -> None:
        """Wait for background releases (of half-reserved subjects) to finish."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # ------------------------------------------------------------------ internals

    async def _check_side(
        self, kind: str, key: str, subjects: list[Subject], now_ms: int
    ) -> list[int]:
        """One check.lua call; the instant each subject stays capped until (0: not; -1:
        reserved)."""
        fields: list[str] = []
        spans: list[list[tuple[Rule, int, int]]] = []
        requests: list[str] = []
        for subject in subjects:
            rules = subject.user_rules if kind == keys.USER else subject.household_rules
            mine = []
            for rule in rules:
                names = fields_at(rule, now_ms)
                mine.append((rule, len(fields), len(names)))
                fields += names
            spans.append(mine)
            if subject.reserve:
                requests.append(_reserve_request(mine))
        args = (now_ms, " ".join(fields), " ".join(requests))
        hash_key = (keys.counters(kind, key),)
        raw: list[Any] = await scripts.CHECK(self.client, hash_key, args, self._loading)
        values, granted = raw[: len(fields)], iter(raw[len(fields) :])
        untils = []
        for subject, mine in zip(subjects, spans, strict=True):
            if subject.reserve and next(granted) == 1:
                untils.append(RESERVED)
                continue
            until = 0
            for rule, first, count in mine:
                until = max(until, capped_until(rule, values[first : first + count], now_ms))
            untils.append(until)
        return untils

    def _result(
        self,
        sides: list[tuple[str, str | None, list[Subject], list[int]]],
        unknown: frozenset[Subject],
        now_ms: int,
    ) -> CheckResult:
        capped: dict[Subject, int] = {}
        taken: dict[Subject, list[tuple[str, str]]] = {}
        for kind, key, subjects, untils in sides:
            for subject, until in zip(subjects, untils, strict=True):
                if until == RESERVED and key:
                    taken.setdefault(subject, []).append((kind, key))
                elif until:
                    capped[subject] = max(until, capped.get(subject, 0))
        reservations = {s: Reservation(s, now_ms, tuple(sides_)) for s, sides_ in taken.items()}
        for subject in [s for s in reservations if s in capped]:
            # Reserved on one side, capped on the other: give the slot back.
            self._in_background(self.release(reservations.pop(subject)))
        return CheckResult(capped, unknown, reservations)

    def _in_background(self, call: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(_quietly(call))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _write_limit(self, deadline: float | None) -> float:
        limit = asyncio.get_running_loop().time() + self.write_timeout_s
        return limit if deadline is None else min(deadline, limit)

    async def _run(self, calls: Sequence[Coroutine[Any, Any, Any]], limit: float) -> list[Any]:
        """Run the calls concurrently until ``limit``; any failure is FcapUnavailable."""
        try:
            async with asyncio.timeout_at(limit):
                if len(calls) == 1:
                    return [await calls[0]]
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(call) for call in calls]
                return [task.result() for task in tasks]
        except (TimeoutError, RedisError, OSError) as exc:
            raise FcapUnavailable(f"frequency counters unavailable: {exc!r}") from exc
        except ExceptionGroup as group:
            _, rest = group.split((TimeoutError, RedisError, OSError))
            if rest is not None:
                raise
            raise FcapUnavailable(f"frequency counters unavailable: {group!r}") from group


def _reserve_request(spans: list[tuple[Rule, int, int]]) -> str:
    """check.lua's reserve request of one subject: its rules and where their fields are."""
    rules = (f"{r.kind} {r.limit} {r.size_ms} {first + 1} {count}" for r, first, count in spans)
    return " ".join((str(len(spans)), *rules))


def _lacks_key(subject: Subject, user_key: str | None, household_key: str | None) -> bool:
    return bool(subject.user_rules and not user_key) or bool(
        subject.household_rules and not household_key
    )


def _combine(codes: list[int]) -> CountOutcome:
    if 1 in codes:
        return CountOutcome.COUNTED
    if 0 in codes:
        return CountOutcome.DUPLICATE
    return CountOutcome.EXPIRED


async def _quietly(call: Coroutine[Any, Any, None]) -> None:
    # A failed release leaves the slot taken until its bucket expires: the safe side.
    with contextlib.suppress(FcapUnavailable):
        await call
