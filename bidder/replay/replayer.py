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
tasks on separate connection pools (``notices.py``, which also plans the notice
faults), so they never add to bid latency, and are awaited (with a bound) after the
last bid request has been answered or timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm import tqdm

from bidder.bidstream.auction import settle
from bidder.bidstream.stream import StreamRecord
from bidder.core.tasks import TaskSet
from bidder.pipeline.campaign_trace import HEADER as CAMPAIGN_TRACE
from bidder.pipeline.campaign_trace import TraceFigures
from bidder.pipeline.campaign_trace import parse_header as parse_trace
from bidder.pipeline.stage_times import HEADER as STAGE_TIMES
from bidder.replay._duplicates import DuplicateTally
from bidder.replay.campaign_outcomes import CampaignOutcomes
from bidder.replay.client import HttpPool, RequestTemplate, Response, TransportError, split_url
from bidder.replay.notices import NoticeSender
from bidder.replay.options import ReplayOptions
from bidder.replay.over_cap import OverCapTally
from bidder.replay.report import ReplayResult, record_latency
from bidder.replay.schedule import Scheduled, schedule
from bidder.replay.slowest import SlowestAnswers, asks_for_times
from bidder.replay.throttle import Throttle
from bidder.replay.viewability import imp_formats

__all__ = ["DEFAULT_PATH", "ReplayOptions", "ReplayResult", "replay"]

DEFAULT_PATH = "/openrtb2/bid"
_STAGE_TIMES_KEY = STAGE_TIMES.lower()  # the client's answer headers are lower-cased
_CAMPAIGN_TRACE_KEY = CAMPAIGN_TRACE.lower()
LATE_SEND_NS = 1_000_000
_EARLY_NS = 1_000_000  # one loop-timer tick: how early a due request may go out
_MAX_UNYIELDED_SENDS = 16  # when behind schedule: sends between yields to the loop
_PROGRESS_EVERY = 200
_DRAIN_SLACK_S = 1.0


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
        self._pool = HttpPool(
            host,
            port,
            max_connections=options.max_connections,
            spread=min(options.connections, options.max_connections),
        )
        self._templates: dict[tuple[str, bool], RequestTemplate] = {}
        self._inflight = TaskSet()
        self.result = ReplayResult(
            deadline_ms=options.deadline_ms,
            duplicates=DuplicateTally(options.path_policy),
            campaigns=CampaignOutcomes(
                dict(options.budgets), over_cap=OverCapTally(options.cap_subjects)
            ),
            warmup_s=options.warmup_s,
            slowest=SlowestAnswers(options.slowest),
        )
        self._notices = NoticeSender(options, self.result.auction, self.result.views)
        self._throttle = None if options.throttle is None else Throttle(options.throttle)
        self.result.pushback.enabled = self._throttle is not None
        self._deadline_ns = round(options.deadline_ms * 1_000_000)
        self._first_send_ns = self._last_send_ns = self._unyielded = self._start_ns = 0
        self.error: BaseException | None = None

    async def send_all(self, scheduled: Iterator[Scheduled], bar: tqdm[Any]) -> None:
        start_ns, warmup_ns, seq = time.perf_counter_ns(), round(self._options.warmup_s * 1e9), -1
        self._start_ns = start_ns
        for seq, (offset_s, record) in enumerate(scheduled):
            offset_ns = round(offset_s * 1e9)
            if self._throttle is not None and not self._throttle.admit(offset_s):
                self._withhold(measured=offset_ns >= warmup_ns)
                continue
            timed = asks_for_times(seq, self._options.stage_times)
            raw = self._template(record.ssp, timed).build(record.body)
            await self._wait_until(start_ns + offset_ns)
            task = self._inflight.spawn(
                self._one(seq, record, raw, start_ns + offset_ns, measured=offset_ns >= warmup_ns)
            )
            task.add_done_callback(self._note_failure)
            if seq % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
                bar.update(_PROGRESS_EVERY)
        bar.update((seq + 1) % _PROGRESS_EVERY)

    def _withhold(self, *, measured: bool) -> None:
        pushback = self.result.pushback
        if measured:
            pushback.withheld += 1
        else:
            pushback.withheld_warmup += 1

    def _judge(self, on_time: bool) -> None:
        """Tell the exchange's response-rate rule of one answer (or its absence)."""
        if self._throttle is not None:
            self._throttle.record((time.perf_counter_ns() - self._start_ns) / 1e9, on_time)

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
        if self._throttle is not None:
            self.result.pushback.note(self._throttle)
        leftovers = set(self._inflight)
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        await self._pool.close()
        await self._notices.close()
        self.result.duration_s = (self._last_send_ns - self._first_send_ns) / 1e9

    def _template(self, ssp: str, timed: bool) -> RequestTemplate:
        template = self._templates.get((ssp, timed))
        if template is None:
            headers = {"Content-Type": "application/json", "X-Openrtb-Version": "2.6", "X-Ssp": ssp}
            if timed:
                headers[STAGE_TIMES] = "1"
            if self._options.campaign_trace:
                headers[CAMPAIGN_TRACE] = "1"
            template = self._templates[ssp, timed] = RequestTemplate(
                "POST", self._host, self._path, headers
            )
        return template

    async def _one(
        self, seq: int, record: StreamRecord, raw: bytes, intended_ns: int, *, measured: bool
    ) -> None:
        loop, started_ns = asyncio.get_running_loop(), time.perf_counter_ns()
        timeline = self.result.timeline
        timeline.add("sent", intended_ns - self._start_ns)
        if measured:
            self._count_send(intended_ns, started_ns)
            self.result.ssp(record.ssp).requests += 1
            self.result.campaigns.see(record.ts)
            self.result.shed.see(record.ts)
        else:
            self.result.warmup_requests += 1
        try:
            response = await self._pool.send(raw, loop.time() + self._options.timeout_ms / 1000)
        except TimeoutError:
            self._judge(False)
            timeline.add("timeouts", time.perf_counter_ns() - self._start_ns)
            if measured:
                self.result.timeouts += 1
                corrected_ns, _ = self._record(intended_ns, started_ns, time.perf_counter_ns())
                self.result.ssp(record.ssp).count_timeout(corrected_ns // 1000)
            return
        except TransportError:
            self._judge(False)
            timeline.add("errors", time.perf_counter_ns() - self._start_ns)
            if measured:
                self.result.transport_errors += 1
            return
        self._judge(response.status in (200, 204))
        timeline.add_answer(response.status, response.arrived_ns - self._start_ns)
        trace = self._count_answer(response, intended_ns, record, seq) if measured else None
        if response.status == 200:
            self._auction(seq, record, response.body, measured, trace)

    def _count_send(self, intended_ns: int, sent_ns: int) -> None:
        result, lag_ns = self.result, sent_ns - intended_ns
        result.requests += 1
        result.late_sends += lag_ns > LATE_SEND_NS
        result.max_send_lag_ms = max(result.max_send_lag_ms, lag_ns / 1e6)
        self._first_send_ns = self._first_send_ns or sent_ns
        self._last_send_ns = max(self._last_send_ns, sent_ns)

    def _count_answer(
        self, response: Response, intended_ns: int, record: StreamRecord, seq: int
    ) -> TraceFigures | None:
        """Count a measured answer; returns its campaign trace, read back, if it had one."""
        result, status, ssp = self.result, response.status, record.ssp
        result.status[status] += 1
        reason = response.headers.get("x-nbr-reason", "unlabelled") if status == 204 else None
        if reason is not None:
            result.nbr_reasons[reason] += 1
            result.shed.answer(reason, record.ts)
        corrected_ns, uncorrected_ns = self._record(
            intended_ns, response.sent_ns, response.arrived_ns
        )
        answered = status in (200, 204)
        result.within_deadline += answered and corrected_ns <= self._deadline_ns
        result.within_deadline_from_write += answered and uncorrected_ns <= self._deadline_ns
        result.ssp(ssp).count_answer(status, reason, corrected_ns // 1000)
        held = "x-dedup-held" in response.headers
        result.count_copy(ssp, record.body, status, reason, corrected_ns // 1000, held)
        header = response.headers.get(_CAMPAIGN_TRACE_KEY)
        trace = None if header is None else parse_trace(header)
        if trace is not None:
            result.campaigns.note_trace(trace, record.ts)
        times = response.headers.get(_STAGE_TIMES_KEY)
        if times is not None:
            outcome = "bid" if status == 200 else reason or str(status)
            result.slowest.offer(corrected_ns // 1000, record.body, ssp, outcome, times, seq)
        return trace

    def _record(self, intended_ns: int, sent_ns: int, done_ns: int) -> tuple[int, int]:
        """Record both latencies; returns them (ns): corrected, uncorrected."""
        uncorrected_ns = done_ns - sent_ns
        corrected_ns = max(done_ns - intended_ns, uncorrected_ns)  # early sends: from the write
        record_latency(self.result.corrected, corrected_ns // 1000)
        record_latency(self.result.uncorrected, uncorrected_ns // 1000)
        return corrected_ns, uncorrected_ns

    def _auction(
        self,
        seq: int,
        record: StreamRecord,
        response: bytes,
        measured: bool,
        trace: TraceFigures | None,
    ) -> None:
        market = self._options.market
        settlement = settle(market, seq, record.body, response, record.market_price, record.click)
        if measured:
            self.result.auction.count(settlement)
            self.result.campaigns.count(settlement, record.ts)
        if trace is not None and trace.priced:
            self.result.supply_book.add(
                market, seq, settlement, trace.priced, record.ts, record.market_price
            )
        self.result.campaigns.over_cap.deliver(settlement.wins, measured)
        if self._options.notices and settlement.wins:
            formats = imp_formats(record.body)
            for win in settlement.wins:
                self._notices.send(win, measured, formats.get(win.impid, ""))

    def _note_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self.error is None:
            self.error = task.exception()  # our bug: surface it after the replay, don't lose it


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
