"""Open-loop replay of a bidstream against a bidder, as an exchange would send it.

Theory of operation. One scheduler coroutine walks the schedule (``schedule.py``) and
starts each request at its intended time, whether or not earlier ones have answered:
a slow bidder does not slow the offered load (closed-loop load generators do, and then
under-report latency: coordinated omission). Times are ``perf_counter_ns`` instants
(uvloop's ``loop.time()`` only has millisecond resolution). Loop timers only have a
resolution of 1 ms too, so the scheduler sleeps until about half a tick before the
next instant, then sends every request due within the coming tick (1 ms). Sends thus
go out up to 1 ms early and rarely late, without busy-waiting: spinning to hit
sub-millisecond instants costs a whole core, which the bidder under test needs on a
small machine. A request sent early is timed from its write, so early sending never
flatters a latency. When the scheduler falls behind it sends at once, yielding to the
loop every few sends so answers keep being read; a send more than 1 ms after its
intended time is a *late send* (a sign the client, not the bidder, is the limit).

Each request is one task: take a connection from the pool (waiting for one is
queueing an exchange would see too), write the bytes the scheduler built, await the
answer or the timeout (default 100 ms, the exchange's tmax; it covers the wait for a
connection), count. Latency is recorded twice: from the intended send (corrected) and
from the moment the bytes were written (uncorrected: what a closed-loop tool reports).
A timeout is recorded when abandoned, its uncorrected time counted from the task's
start. Requests whose intended time is inside the warm-up are sent, answered and
auctioned like the rest, but only counted in ``warmup_requests``.

A 200 is auctioned (``auction.py``); win and billing notices go out as fire-and-forget
tasks on separate connection pools, so they never add to bid latency, and are awaited
(with a bound) after the last bid request has been answered or timed out. A notice
counts as ok on any 2xx; a non-``http://`` URL, an error or a timeout is a failure.

Notice faults, to test exactly-once billing (``plan_notices``): ``duplicate_notices``
is the share of wins whose exchange sends one of the two notices again, half of those
at once (racing the original, like a retry after a lost answer) and half late (one to
one and a half ``notice_window_ms`` after the win's notices started);
``reorder_notices`` sends the billing notice before the win notice for half the wins and
starts each win's notices at a random point inside ``notice_window_ms``, so notices of
different wins arrive out of order. The choices are drawn from a hash of the market
seed and the win's first notice URL: the same bids get the same faults whatever the
order the answers come back in.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from bidder.bidstream.auction import Market, Win, settle
from bidder.bidstream.stream import StreamRecord
from bidder.core.tasks import TaskSet
from bidder.replay._duplicates import DuplicateTally
from bidder.replay.client import HttpPool, RequestTemplate, Response, TransportError, split_url
from bidder.replay.report import AuctionTotals, ReplayResult, record_latency
from bidder.replay.schedule import Pacing, Scheduled, schedule
from bidder.supply.path import DEFAULT_POLICY, PathPolicy

__all__ = ["DEFAULT_PATH", "NoticeSend", "ReplayOptions", "ReplayResult", "plan_notices", "replay"]

DEFAULT_PATH = "/openrtb2/bid"
LATE_SEND_NS = 1_000_000
_EARLY_NS = 1_000_000  # one loop-timer tick: how early a due request may go out
_MAX_UNYIELDED_SENDS = 16  # when behind schedule: sends between yields to the loop
_PROGRESS_EVERY = 200
_DRAIN_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    speed: float = 1.0
    rate: float | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    timeout_ms: float = 100.0
    deadline_ms: float = 8.0
    max_connections: int = 512
    market: Market = field(default_factory=Market)
    notices: bool = True
    notice_timeout_ms: float = 1000.0
    notice_drain_s: float = 5.0
    notice_connections: int = 64
    duplicate_notices: float = 0.0
    """Share (0-1) of wins whose exchange sends one of their notices twice."""
    reorder_notices: bool = False
    """Bill before win for half the wins; each win's notices start at a random point
    inside ``notice_window_ms``, so notices of different wins interleave."""
    notice_window_ms: float = 250.0
    """The reordering window; late duplicates go 1-1.5 windows after their win's start."""
    path_policy: PathPolicy = DEFAULT_POLICY
    """The bidder's supply-path preferences: ranks copies in the duplicate-auctions report."""

    def __post_init__(self) -> None:
        positive = (
            "timeout_ms",
            "deadline_ms",
            "notice_timeout_ms",
            "max_connections",
            "notice_connections",
        )
        problems = [f"{name} must be positive" for name in positive if not getattr(self, name) > 0]
        problems += [
            f"{name} must not be negative"
            for name in ("warmup_s", "notice_drain_s", "notice_window_ms")
            if getattr(self, name) < 0
        ]
        if not 0 <= self.duplicate_notices <= 1:
            problems.append(f"duplicate_notices must be 0-1, got {self.duplicate_notices}")
        if problems:
            raise ValueError("; ".join(problems))
        Pacing(self.speed, self.rate, self.duration_s)  # raises now for a bad pace, not mid-replay

    @property
    def pacing(self) -> Pacing:
        return Pacing(speed=self.speed, rate=self.rate, duration_s=self.duration_s)


async def replay(
    records: Iterable[StreamRecord], target: str, options: ReplayOptions, progress: bool = False
) -> ReplayResult:
    """Replay ``records`` open-loop against ``target`` (``http://host:port[/path]``).

    The bid path defaults to ``/openrtb2/bid`` when ``target`` has none. Raises
    ValueError for a bad target or options, and re-raises the first unexpected error
    of a request task after the replay has finished.
    """
    run, started_ns = _Replay(target, options), time.perf_counter_ns()
    bar = tqdm(total=_expected_count(options), unit="req", file=sys.stderr, disable=not progress)
    try:
        with _old_objects_frozen():
            await run.send_all(schedule(records, options.pacing), bar)
            await run.drain()
    finally:
        bar.close()
        await run.close()
        run.result.elapsed_s = (time.perf_counter_ns() - started_ns) / 1e9
    if run.error is not None:
        raise run.error
    return run.result


class _Replay:
    def __init__(self, target: str, options: ReplayOptions) -> None:
        host, port, path = split_url(target)
        self._host, self._path = f"{host}:{port}", DEFAULT_PATH if path == "/" else path
        self._options = options
        self._pool = HttpPool(host, port, max_connections=options.max_connections)
        self._templates: dict[str, RequestTemplate] = {}
        self._inflight = TaskSet()
        self.result = ReplayResult(
            deadline_ms=options.deadline_ms, duplicates=DuplicateTally(options.path_policy)
        )
        self._notices = _Notices(options, self.result.auction)
        self._deadline_ns = round(options.deadline_ms * 1_000_000)
        self._first_send_ns = self._last_send_ns = self._unyielded = 0
        self.error: BaseException | None = None

    async def send_all(self, scheduled: Iterator[Scheduled], bar: tqdm[Any]) -> None:
        start_ns, warmup_ns, seq = time.perf_counter_ns(), round(self._options.warmup_s * 1e9), -1
        for seq, (offset_s, record) in enumerate(scheduled):
            offset_ns = round(offset_s * 1e9)
            raw = self._template(record.ssp).build(record.body)
            await self._wait_until(start_ns + offset_ns)
            task = self._inflight.spawn(
                self._one(seq, record, raw, start_ns + offset_ns, measured=offset_ns >= warmup_ns)
            )
            task.add_done_callback(self._note_failure)
            if seq % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
                bar.update(_PROGRESS_EVERY)
        bar.update((seq + 1) % _PROGRESS_EVERY)

    async def _wait_until(self, instant_ns: int) -> None:
        """Sleep until the send instant; when already late, still yield every few sends."""
        if await _sleep_until(instant_ns):
            self._unyielded = 0
        elif self._unyielded >= _MAX_UNYIELDED_SENDS:
            await asyncio.sleep(0)  # let answers be read and started requests be written
            self._unyielded = 0
        self._unyielded += 1

    async def drain(self) -> None:
        """Wait for the requests still in flight (each ends by its own timeout), then notices."""
        if self._inflight:
            await asyncio.wait(
                set(self._inflight), timeout=self._options.timeout_ms / 1000 + _DRAIN_SLACK_S
            )
        await self._notices.drain(self._options.notice_drain_s)

    async def close(self) -> None:
        leftovers = set(self._inflight)
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        await self._pool.close()
        await self._notices.close()
        self.result.duration_s = (self._last_send_ns - self._first_send_ns) / 1e9

    def _template(self, ssp: str) -> RequestTemplate:
        template = self._templates.get(ssp)
        if template is None:
            headers = {"Content-Type": "application/json", "X-Openrtb-Version": "2.6", "X-Ssp": ssp}
            template = self._templates[ssp] = RequestTemplate(
                "POST", self._host, self._path, headers
            )
        return template

    async def _one(
        self, seq: int, record: StreamRecord, raw: bytes, intended_ns: int, *, measured: bool
    ) -> None:
        loop, started_ns = asyncio.get_running_loop(), time.perf_counter_ns()
        if measured:
            self._count_send(intended_ns, started_ns)
            self.result.ssp(record.ssp).requests += 1
        else:
            self.result.warmup_requests += 1
        try:
            response = await self._pool.send(raw, loop.time() + self._options.timeout_ms / 1000)
        except TimeoutError:
            if measured:
                self.result.timeouts += 1
                corrected_ns, _ = self._record(intended_ns, started_ns, time.perf_counter_ns())
                self.result.ssp(record.ssp).count_timeout(corrected_ns // 1000)
            return
        except TransportError:
            if measured:
                self.result.transport_errors += 1
            return
        if measured:
            self._count_answer(response, intended_ns, record)
        if response.status == 200:
            self._auction(seq, record.body, response.body, measured)

    def _count_send(self, intended_ns: int, sent_ns: int) -> None:
        result, lag_ns = self.result, sent_ns - intended_ns
        result.requests += 1
        result.late_sends += lag_ns > LATE_SEND_NS
        result.max_send_lag_ms = max(result.max_send_lag_ms, lag_ns / 1e6)
        self._first_send_ns = self._first_send_ns or sent_ns
        self._last_send_ns = max(self._last_send_ns, sent_ns)

    def _count_answer(self, response: Response, intended_ns: int, record: StreamRecord) -> None:
        result, status, ssp = self.result, response.status, record.ssp
        result.status[status] += 1
        reason = response.headers.get("x-nbr-reason", "unlabelled") if status == 204 else None
        if reason is not None:
            result.nbr_reasons[reason] += 1
        corrected_ns, uncorrected_ns = self._record(
            intended_ns, response.sent_ns, response.arrived_ns
        )
        answered = status in (200, 204)
        result.within_deadline += answered and corrected_ns <= self._deadline_ns
        result.within_deadline_from_write += answered and uncorrected_ns <= self._deadline_ns
        result.ssp(ssp).count_answer(status, reason, corrected_ns // 1000)
        held = "x-dedup-held" in response.headers
        result.count_copy(ssp, record.body, status, reason, corrected_ns // 1000, held)

    def _record(self, intended_ns: int, sent_ns: int, done_ns: int) -> tuple[int, int]:
        """Record both latencies; returns them (ns): corrected, uncorrected."""
        uncorrected_ns = done_ns - sent_ns
        corrected_ns = max(done_ns - intended_ns, uncorrected_ns)  # early sends: from the write
        record_latency(self.result.corrected, corrected_ns // 1000)
        record_latency(self.result.uncorrected, uncorrected_ns // 1000)
        return corrected_ns, uncorrected_ns

    def _auction(self, seq: int, request: bytes, response: bytes, measured: bool) -> None:
        settlement = settle(self._options.market, seq, request, response)
        if measured:
            totals = self.result.auction
            totals.bids += settlement.bids
            totals.wins += len(settlement.wins)
            totals.spend_micros += sum(win.spend_micros for win in settlement.wins)
        if self._options.notices:
            for win in settlement.wins:
                self._notices.send(win, measured)

    def _note_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self.error is None:
            self.error = task.exception()  # our bug: surface it after the replay, don't lose it


@dataclass(frozen=True, slots=True)
class NoticeSend:
    """Notices the exchange sends one after the other, starting ``delay_s`` after the win."""

    delay_s: float
    urls: tuple[str, ...]


def plan_notices(urls: Sequence[str], options: ReplayOptions) -> list[NoticeSend]:
    """How the exchange sends one win's notices (``urls``: nurl then burl, non-empty).

    Without faults: one send, in order, at once. See the module docstring for the faults.
    """
    draw = _uniforms(f"{options.market.seed}/{urls[0]}", 5)
    window_s, chain, start = options.notice_window_ms / 1000, tuple(urls), 0.0
    if options.reorder_notices:
        chain = chain[::-1] if draw[0] < 0.5 else chain
        start = draw[1] * window_s
    plan = [NoticeSend(start, chain)]
    if draw[2] < options.duplicate_notices:
        copy = urls[min(int(draw[3] * len(urls)), len(urls) - 1)]
        late_s = window_s * (1 + draw[4]) if draw[4] < 0.5 else 0.0
        plan.append(NoticeSend(start + late_s, (copy,)))
    return plan


def _uniforms(key: str, count: int) -> list[float]:
    """``count`` uniforms in (0, 1) fixed by ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8 * count).digest()
    return [
        (int.from_bytes(digest[i : i + 8], "big") + 0.5) / 2**64 for i in range(0, 8 * count, 8)
    ]


class _Notices:
    """Win (nurl) and billing (burl) notices: fire-and-forget GETs on their own pools."""

    def __init__(self, options: ReplayOptions, totals: AuctionTotals) -> None:
        self._options = options
        self._timeout_s = options.notice_timeout_ms / 1000
        self._connections = options.notice_connections
        self._totals = totals
        self._pools: dict[tuple[str, int], HttpPool] = {}
        self._tasks = TaskSet()

    def send(self, win: Win, measured: bool) -> None:
        urls = [url for url in (win.nurl, win.burl) if url]
        if not urls:
            return
        for planned in plan_notices(urls, self._options):
            self._tasks.spawn(self._call(planned, measured))

    async def drain(self, bound_s: float) -> None:
        """Wait up to ``bound_s`` for notices; the rest are cancelled and count as failed."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=bound_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        for pool in self._pools.values():
            await pool.close()

    async def _call(self, planned: NoticeSend, measured: bool) -> None:
        done = 0
        try:
            if planned.delay_s > 0:
                await asyncio.sleep(planned.delay_s)
            for url in planned.urls:  # one after the other: a bill follows its win (or leads it)
                self._count(await self._get(url), measured)
                done += 1
        finally:  # notices cancelled at the drain bound, or never started, count as failed
            for _ in planned.urls[done:]:
                self._count(False, measured)

    def _count(self, ok: bool, measured: bool) -> None:
        if measured:
            self._totals.notices_sent += 1
            self._totals.notices_ok += ok
            self._totals.notices_failed += not ok

    async def _get(self, url: str) -> bool:
        try:
            host, port, target = split_url(url)
        except ValueError:
            return False
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[host, port] = HttpPool(host, port, max_connections=self._connections)
        try:
            response = await pool.request("GET", target, timeout_s=self._timeout_s)
        except (TimeoutError, TransportError):
            return False
        return 200 <= response.status < 300


@contextlib.contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """Keep the garbage collector off everything that existed before the replay.

    A full collection walks every tracked object. In a process that already holds a
    parsed stream and a local stack's clients that took 40-160 ms (``gc.callbacks``,
    measured in ``scripts/chaos.py``), during which no answer is read: every answer
    due in that pause counts as late, a client artefact the bidder did not cause.
    Frozen objects are skipped; what the replay itself allocates is still collected.
    No collection first: it would run other code's finalizers inside the replay (a test
    suite's leaked sockets then warn in whichever test replays next); garbage frozen
    with the rest is collected after ``unfreeze``.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _sleep_until(instant_ns: int) -> bool:
    """Sleep until ``instant_ns`` (perf_counter) is less than one timer tick away.

    Returns True if it slept, False if the instant was already that close (or past).
    """
    slept = False
    while (wait_ns := instant_ns - time.perf_counter_ns()) > _EARLY_NS:
        # Timers can fire early (uvloop rounds to whole ms): check, sleep again if needed.
        await asyncio.sleep((wait_ns - _EARLY_NS // 2) / 1e9)
        slept = True
    return slept


def _expected_count(options: ReplayOptions) -> int | None:
    if options.rate is not None and options.duration_s is not None:
        return int(options.rate * options.duration_s)
    return None
