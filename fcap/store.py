"""The Valkey adapter: three scripts and one read behind an async API. Raises
``FcapUnavailable``.

A check sends, per side, one command built from a cached plan (``fcap.plan``):
check.lua when a candidate reserves at bid, else a plain HMGET; the commands and the
decision made from the values read are ``fcap.check_read``.

Works with ``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster`` alike: every
call touches the keys of one hash tag. A user's counters and a household's are two
tags (maybe two Cluster nodes), so a check or count that needs both sends two
script calls *concurrently*: about one round trip of latency, each side atomic on
its own. A count half-done by a failure is completed by retrying the whole count:
the side that already counted answers "duplicate".

Two ways to the server. On one server, checks go through the worker's
auto-pipelined connection (``bidder.adapters.valkey_pipelined``): both sides are sent before
anything is awaited, and a check past its limit fails with ``TimeoutError`` while
its reply is simply dropped when it comes. On a Cluster (no ``pipelined``
connection), and for counts and releases everywhere, calls go through the redis-py
client; a call past its limit there is not cancelled but left to finish
(``bidder.adapters.valkey_wait``), so its connection goes back to the pool instead of being
dropped. Either way a check.lua whose caller gave up may still reserve a slot;
nobody releases it, which is the safe side (as when a release fails), until its
bucket expires.

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
from collections.abc import Coroutine, Sequence, Set
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import NoScriptError

from bidder.adapters.valkey import VALKEY_FAILURES, connect_async
from bidder.adapters.valkey_pipelined import PipelinedConnection, forget
from bidder.adapters.valkey_wait import Waiter
from bidder.core.tasks import TaskSet
from fcap import counted, keys, scripts
from fcap.check_read import CheckResult, Reservation, SentCheck, command, decided
from fcap.plan import Period, Plan, build_plan
from fcap.rules import Subject, rules_argv

CHECK_TIMEOUT_S = 0.004
MAX_PLANS = 4_096
"""Cached check plans (one per candidate set seen; ``fcap.plan``)."""
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


def connect(
    url: str, *, cluster: bool = False, socket_timeout_s: float = 0.25, replica_reads: bool = False
) -> Any:
    """A client for fcap (``bidder.adapters.valkey``: no retries or backoff; the socket timeout
    is a backstop only, each call has its own deadline).

    ``replica_reads`` (Cluster only, else ValueError): the read-only check's HMGET goes
    to a replica of the user's slot when it has one; count, release and reserve-at-bid
    checks are scripts and stay on the master. The replica lags the master (see
    docs/fcap.md, replica reads).
    """
    return connect_async(
        url, cluster=cluster, timeout_s=socket_timeout_s, replica_reads=replica_reads
    )


class FcapStore:
    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        pipelined: PipelinedConnection | None = None,
        check_timeout_s: float = CHECK_TIMEOUT_S,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        max_plans: int = MAX_PLANS,
    ) -> None:
        """``pipelined``: a connection to the same single server as ``client``, for
        the checks (module docstring); without it every call goes through ``client``.
        The store closes neither."""
        self.client = client
        self.pipelined = pipelined
        self.check_timeout_s = check_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_plans = max(1, max_plans)
        self._plans: dict[tuple[tuple[Subject, ...], bool, bool], Plan] = {}
        self._background = TaskSet()
        self._waiter = Waiter()
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
        return await self.finish(self.begin(subjects, user_key, household_key, now_ms, deadline))

    def begin(
        self,
        subjects: Sequence[Subject],
        user_key: str | None,
        household_key: str | None,
        now_ms: int,
        deadline: float,
    ) -> SentCheck:
        """``check``'s first half, which never waits: on the auto-pipelined connection
        every side's command is sent now, in the caller's loop iteration, so the round
        trip runs while the caller goes on. ``finish`` gives the result."""
        plan = self._plan(subjects, user_key, household_key)
        limit = min(deadline, asyncio.get_running_loop().time() + self.check_timeout_s)
        if not plan.sides:
            return SentCheck(plan, [], [], now_ms, limit, result=CheckResult({}, plan.unknown))
        keyed = [user_key if side.kind == keys.USER else household_key for side in plan.sides]
        periods = [side.at(now_ms) for side in plan.sides]
        pipelined = self.pipelined
        if pipelined is None:
            return SentCheck(plan, keyed, periods, now_ms, limit)
        commands = [
            command(side.kind, key, period, now_ms)
            for side, key, period in zip(plan.sides, keyed, periods, strict=True)
        ]
        replies = [pipelined.send(c, limit) for c in commands]
        return SentCheck(plan, keyed, periods, now_ms, limit, commands, replies)

    async def finish(self, sent: SentCheck) -> CheckResult:
        """The result of a check ``begin`` started. Raises FcapUnavailable."""
        if sent.result is not None:
            return sent.result
        if sent.commands is not None and self.pipelined is not None:
            answers = await self._settle_all(self.pipelined, sent)
        else:
            calls = [
                self._read(side.kind, key, period, sent.now_ms)
                for side, key, period in zip(sent.plan.sides, sent.keyed, sent.periods, strict=True)
            ]
            answers = await self._run(calls, sent.limit)
        return self._decided(sent, answers)

    def finish_now(self, sent: SentCheck) -> CheckResult | None:
        """``finish`` of a check whose replies are all in, without awaiting; None when
        a reply asks for the check script to be loaded again, which only ``finish``
        does. Raises FcapUnavailable."""
        if sent.result is not None:
            return sent.result
        answers = []
        try:
            for reply in sent.replies:
                if reply.cancelled():
                    raise TimeoutError("the read was given up")
                error = reply.exception()
                if isinstance(error, NoScriptError):
                    return None
                if error is not None:
                    raise error
                answers.append(reply.result())
        except VALKEY_FAILURES as exc:
            forget(sent.replies)
            raise FcapUnavailable(f"frequency counters unavailable: {exc!r}") from exc
        return self._decided(sent, answers)

    def _decided(self, sent: SentCheck, answers: list[Any]) -> CheckResult:
        result, given_back = decided(sent, answers)
        for reservation in given_back:
            self._background.spawn(_quietly(self.release(reservation)))
        return result

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
                calls.append(self._count_call(kind, key, impression_id, args))
        if not calls:
            return CountOutcome.NOT_COUNTED
        codes = await self._run(calls, self._write_limit(deadline))
        return _combine(codes)

    async def mark_counted(
        self, day: int, bits: Set[int], now_ms: int, deadline: float | None = None
    ) -> None:
        """Set ``bits`` in the counted bitmap of ``day`` (``fcap.counted``), which lives
        until the day after it ends by the caller's clock. Raises FcapUnavailable."""
        ttl_ms = max((day + 2) * counted.DAY_MS - now_ms, 1)
        args = (ttl_ms, *sorted(bits))
        call = scripts.COUNTED.run(self.client, (keys.counted(day),), args, self._loading)
        await self._run([call], self._write_limit(deadline))

    async def read_counted(self, day: int, deadline: float) -> bytes:
        """The bitmap of keys counted on ``day`` (``fcap.counted``); b"" when none was.
        Raises FcapUnavailable."""
        [bits] = await self._run([self._command("GET", keys.counted(day))], deadline)
        return bytes(bits or b"")

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
                scripts.RELEASE.run(self.client, (keys.counters(kind, key),), args, self._loading)
            )
        await self._run(calls, self._write_limit(deadline))

    async def drain(self) -> None:
        """Wait for background releases (of half-reserved subjects) and for the calls
        left running past their limit to finish."""
        await self._background.drain()
        await self._waiter.drain()

    # ------------------------------------------------------------------ internals

    def _plan(
        self, subjects: Sequence[Subject], user_key: str | None, household_key: str | None
    ) -> Plan:
        """The cached plan of these candidates (``fcap.plan``); oldest plans go first."""
        key = (tuple(subjects), bool(user_key), bool(household_key))
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) >= self.max_plans:
                del self._plans[next(iter(self._plans))]
            found = self._plans[key] = build_plan(key[0], key[1], key[2])
        return found

    def _count_call(
        self, kind: str, key: str, impression_id: str, args: tuple[int | str, ...]
    ) -> Coroutine[Any, Any, Any]:
        """count.lua on one side. ``args``: its ARGV (now, impression instant, rules)."""
        dedup = keys.dedup(kind, key, impression_id)
        return scripts.COUNT.run(
            self.client, (keys.counters(kind, key), dedup), args, self._loading
        )

    async def _read(self, kind: str, key: str | None, period: Period, now_ms: int) -> Any:
        """One side's answer: the values of ``period.fields`` (then the grants of its
        reserve requests). A side with a reserve-at-bid subject runs check.lua (decide
        and reserve atomically); any other is a plain HMGET, atomic on its own."""
        hash_key = keys.counters(kind, key or "")
        if period.requests:
            args: tuple[str | int, ...] = (now_ms, period.requests, *period.fields)
            return await scripts.CHECK.run(self.client, (hash_key,), args, self._loading)
        # A Cluster client routes the read to the key's node (to a replica of its slot
        # when built with replica reads: ``fcap.connect``).
        return await self.client.execute_command("HMGET", hash_key, *period.fields)

    async def _settle_all(self, pipelined: PipelinedConnection, sent: SentCheck) -> list[Any]:
        """The replies to a check's commands, in order."""
        assert sent.commands is not None
        try:
            return [
                await self._settle(pipelined, reply, command, sent.limit)
                for reply, command in zip(sent.replies, sent.commands, strict=True)
            ]
        except VALKEY_FAILURES as exc:
            raise FcapUnavailable(f"frequency counters unavailable: {exc!r}") from exc
        finally:
            forget(sent.replies)

    async def _settle(
        self,
        pipelined: PipelinedConnection,
        reply: asyncio.Future[Any],
        command: bytes,
        until: float,
    ) -> Any:
        """``reply``; on NOSCRIPT (only check.lua can answer that), the script is loaded
        and ``command`` sent once more."""
        try:
            return await reply
        except NoScriptError:
            await scripts.CHECK.reload(pipelined, until, self._loading)
            return await pipelined.send(command, until)

    async def _command(self, *args: str | int) -> Any:
        return await self.client.execute_command(*args)

    def _write_limit(self, deadline: float | None) -> float:
        limit = asyncio.get_running_loop().time() + self.write_timeout_s
        return limit if deadline is None else min(deadline, limit)

    async def _run(self, calls: Sequence[Coroutine[Any, Any, Any]], limit: float) -> list[Any]:
        """Run the calls concurrently until ``limit``; any failure is FcapUnavailable.
        Calls still running at ``limit`` are left to finish (``bidder.adapters.valkey_wait``)."""
        try:
            return await self._waiter.gather(calls, limit)
        except VALKEY_FAILURES as exc:
            raise FcapUnavailable(f"frequency counters unavailable: {exc!r}") from exc


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
