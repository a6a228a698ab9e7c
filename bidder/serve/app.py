"""The worker's HTTP application: ``POST /openrtb2/bid`` and the notice endpoints.

Theory of operation for a bid request: the deadline is fixed at receipt
(``received + deadline_ms``, tightened to ``tmax - network allowance`` once the
request says its tmax); the stages must be done ``answer_margin_ms`` before it, the
time it takes to write the answer, and up to ``overload_margin_ms`` earlier still when
the request was admitted while the worker sheds (``bidder.decide.overload``: the share
its learned pressure says): under overload the timer that ends a stage fires late by a
loop iteration. Every await after receipt is bounded by it: the body read when part of
the body is still in flight (the server's timer), and each pipeline stage that does I/O
(the worker's shared deadline timer, see ``bidder.pipeline.runner``). Pure work can't
be interrupted, so the deadline is checked once more before a bid goes out. Whatever
goes wrong, the answer is a 204 with a typed reason: a remote fault (bad body) is
``invalid``, lateness is ``deadline``, and our own bug is logged loudly and answered
``internal_error``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.deadlines import TaskDeadlines
from bidder.core.futures import Later, Outcome
from bidder.core.nobid import NoBid
from bidder.core.tokens import TokenSigner
from bidder.decide.overload import InFlightGate, LagShedder, LoopLag, run_lag_probe
from bidder.decide.ratelimit import RateLimiter
from bidder.openrtb.body import decode_body
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.campaign_trace import HEADER as CAMPAIGN_TRACE
from bidder.pipeline.campaign_trace import CampaignTrace
from bidder.pipeline.response import NoticeUrls, build_response, winners
from bidder.pipeline.runner import Context, PricedCandidate, Stage, StageResult, run_stages
from bidder.pipeline.stage_times import HEADER as STAGE_TIMES
from bidder.pipeline.stage_times import StageTimes
from bidder.serve.bill_notice import NoticeHandler, NoticeParts
from bidder.serve.http import messages
from bidder.serve.http.messages import Request, Response, header_lines
from bidder.serve.http.protocol import Route
from bidder.serve.http.server import HttpServer
from bidder.serve.settings import Settings
from bidder.serve.view_notice import VIEW_PATH, CountViewable, ViewNoticeHandler
from bidder.winloop.billing import Biller, ImpressionSink
from ids.snowflake import IdsUnavailable, Snowflake

log = logging.getLogger(__name__)

BID_PATH = "/openrtb2/bid"
CLOCK_PATH = "/clock"


Job = Callable[[], Coroutine[Any, Any, None]]
"""A background job: runs until cancelled."""
Closer = Callable[[], Awaitable[object] | None]
"""Closes one thing at shutdown; a coroutine function or a plain one."""


@dataclass
class BidderState:
    settings: Settings
    book: CampaignBook
    stages: Sequence[Stage]
    clock: Clock
    notice_urls: NoticeUrls
    """Each bid's Snowflake id and signed nurl/burl."""
    next_bid_id: Callable[[], str]
    signer: TokenSigner
    biller: Biller
    ids: Snowflake
    """This worker's Snowflake generator (bid and ledger ids); leased worker id."""
    impression_sinks: list[ImpressionSink] = field(default_factory=list)
    """Told of every billed impression (fcap counting, pacing lease debit); append here."""
    count_viewable: CountViewable | None = None
    """Counts verified viewability notices (``bidder.serve.view_notice``); None: ignored."""
    background: list[Job] = field(default_factory=list)
    """Forever-running jobs the server starts as tasks and cancels on shutdown."""
    closers: list[Closer] = field(default_factory=list)
    """Called in order on shutdown, after the background jobs are cancelled (and
    awaited when they return an awaitable)."""


def _nobid_answer(reason: NoBid) -> Response:
    headers = {"X-Nbr-Reason": reason.value}
    if reason.nbr is not None:
        headers["X-Nbr"] = str(reason.nbr)
    return Response(204, headers=header_lines(headers))


_NOBID = {reason: _nobid_answer(reason) for reason in NoBid}
_BID_HEADERS = header_lines({"Content-Type": "application/json", "X-Openrtb-Version": "2.6"})
# A bid whose claim was held for a better-placed copy says so, so a replay can tell its
# latency apart (``bidder.pipeline.auction_claims``).
_HELD_BID_HEADERS = _BID_HEADERS + header_lines({"X-Dedup-Held": "1"})
_SSP = "x-ssp"
_TIMES = STAGE_TIMES.lower()
_TRACE = CAMPAIGN_TRACE.lower()

Decision = Response | NoBid
"""What deciding a bid request comes to: the bid response, or why not."""


class BidHandler:
    """``POST /openrtb2/bid``; sheds under overload (see ``bidder.decide.overload``).

    It registers its event-loop lag probe as a background job of ``state``, so the
    probe runs wherever the state's jobs are started (worker, live test bidder).
    """

    def __init__(self, state: BidderState):
        self._state = state
        self._settings = state.settings
        self._budget_s = state.settings.deadline_ms / 1000
        self._allowance_s = state.settings.network_allowance_ms / 1000
        self._margin_s = state.settings.answer_margin_ms / 1000
        self._max_body = state.settings.max_body_bytes
        self._overload_margin_s = state.settings.overload_margin_ms / 1000
        self._shedder = LagShedder(
            state.settings.shed_lag_s,
            state.settings.shed_stay_lag_ms / 1000,
            state.settings.shed_calm_ms / 1000,
        )
        self._gate = InFlightGate(state.settings.max_in_flight)
        self._lag = LoopLag(state.clock)
        self._partners = RateLimiter(state.settings.rate_limits, state.clock)
        self._bounds = TaskDeadlines()
        state.background.append(self._probe_lag)

    async def _probe_lag(self) -> None:
        await run_lag_probe(self._lag, self._state.clock, on_sample=self._sampled)

    def _sampled(self, lateness: float) -> None:
        metrics.LOOP_LAG.set(lateness)
        metrics.SHED_PRESSURE.set(self._shedder.pressure)

    def handle(self, request: Request) -> Response | Later[Response]:
        """The answer at once when no stage awaits; else the answer once it is known."""
        now = request.received
        lag = self._lag.current()
        if self._shedder.shed(lag, now):
            metrics.SHED_LOOP_LAG.inc()
            return self._answer_nobid(NoBid.OVERLOADED, now)
        if not self._partner_allowed(request.headers.get(_SSP, "")):
            return self._answer_nobid(NoBid.THROTTLED, now)
        if not self._gate.enter():
            metrics.SHED_IN_FLIGHT.inc()
            return self._answer_nobid(NoBid.OVERLOADED, now)
        margin = self._margin_s
        if self._shedder.overloaded(now):  # admitted in a lull of an overload
            margin += self._overload_margin_s * self._shedder.pressure
        times = StageTimes() if _TIMES in request.headers else None
        trace = CampaignTrace() if _TRACE in request.headers else None
        try:
            # Queueing before the request was read counts against the deadline: charge the lag.
            decided = self._decide(request, now - lag, margin, times, trace)
        except Exception:
            decided = self._bug()
        if isinstance(decided, Response | NoBid):
            self._gate.leave()
            return self._reply(decided, now, times, trace)
        # Decided from a reply's callback, or by stages awaiting in a task: the answer
        # is given from the decision's done-callback either way.
        return decided.then(partial(self._reply_when_decided, now, times, trace))

    def _reply_when_decided(
        self,
        now: float,
        times: StageTimes | None,
        trace: CampaignTrace | None,
        deciding: Outcome[Decision],
    ) -> Response:
        try:
            decided = deciding.result()
        except TimeoutError:
            decided = NoBid.DEADLINE
        except Exception:
            decided = self._bug()
        finally:
            self._gate.leave()
        return self._reply(decided, now, times, trace)

    def _reply(
        self,
        decided: Decision,
        now: float,
        times: StageTimes | None,
        trace: CampaignTrace | None,
    ) -> Response:
        answered_at = self._state.clock.monotonic()
        took = answered_at - now
        self._shedder.answered(
            answered_at, late=took >= self._budget_s, cut=decided is NoBid.DEADLINE
        )
        if isinstance(decided, NoBid):
            answer = self._answer_nobid(decided, now, took)
        else:
            metrics.LATENCY.observe(took)
            metrics.BIDS.inc()
            answer = decided
        if times is not None:
            answer = answer.with_header(STAGE_TIMES, times.header())
        if trace is not None:
            answer = answer.with_header(CAMPAIGN_TRACE, trace.header())
        return answer

    def late(self, received: float) -> Response:
        """The answer to a request whose body had not all arrived by the deadline."""
        return self._answer_nobid(NoBid.DEADLINE, received)

    @staticmethod
    def _bug() -> NoBid:
        metrics.INTERNAL_ERRORS.inc()
        log.exception("bug on the bid path; answered 204 internal_error")
        return NoBid.INTERNAL_ERROR

    def _partner_allowed(self, ssp: str) -> bool:
        """Stage 2, the SSP's token bucket: checked on the header, before the body is
        decoded or parsed, so a throttled partner costs microseconds."""
        allowed = self._partners.allow(ssp)
        outcome = "allowed" if allowed else "throttled"
        metrics.PARTNER_REQUESTS.labels(self._partners.label(ssp), outcome).inc()
        return allowed

    def _answer_nobid(self, reason: NoBid, started: float, took: float | None = None) -> Response:
        metrics.LATENCY.observe(self._state.clock.monotonic() - started if took is None else took)
        metrics.NOBID_BY_REASON[reason].inc()
        return _NOBID[reason]

    def _decide(
        self,
        request: Request,
        received: float,
        margin: float,
        times: StageTimes | None,
        trace: CampaignTrace | None,
    ) -> Decision | Later[Decision]:
        try:
            if request.over_cap:
                raise InvalidRequest("body over the cap")
            body = decode_body(
                request.body, request.headers.get("content-encoding"), self._max_body
            )
            bid_request = parse_bid_request(body)
        except InvalidRequest:
            return NoBid.INVALID
        finally:
            if times is not None:
                times.mark("read")
        deadline = self._deadline(received, bid_request.tmax_ms, margin)
        if deadline <= self._state.clock.monotonic():
            return NoBid.DEADLINE
        ctx = Context(
            request=bid_request,
            ssp=request.headers.get(_SSP, ""),
            received=received,
            times=times,
            trace=trace,
        )
        if trace is not None:
            ctx.finishers.append(trace.sent)
        try:
            staged = run_stages(self._state.stages, ctx, deadline, self._bounds)
        except BaseException:
            ctx.finish(())  # what a stage took is given back
            raise
        if staged is None or isinstance(staged, NoBid):
            return self._conclude(ctx, staged, deadline)
        later = staged if isinstance(staged, Later) else Later.of(staged)
        return later.then(partial(self._conclude_when_staged, ctx, deadline))

    def _conclude_when_staged(
        self, ctx: Context, deadline: float, staging: Outcome[StageResult]
    ) -> Decision:
        try:
            staged = staging.result()
        except BaseException:  # a timeout, a bug, a cancel: what a stage took is given back
            ctx.finish(())
            raise
        return self._conclude(ctx, staged, deadline)

    def _conclude(self, ctx: Context, staged: StageResult, deadline: float) -> Decision:
        """The answer once the stages are done; then the stages' finishers run."""
        sent: Sequence[PricedCandidate] = ()
        try:
            answer = staged if staged is not None else self._respond(ctx, deadline)
            if not isinstance(answer, NoBid):
                sent = winners(ctx.priced, ctx.request.imps)
            return answer
        finally:  # also on a bug: what a stage took is given back
            ctx.finish(sent)

    def _respond(self, ctx: Context, deadline: float) -> Decision:
        state = self._state
        # Pure stages can't be cancelled, so lateness is checked here: a late answer
        # takes no ids, and is "deadline" whatever else went wrong while it was late.
        if state.clock.monotonic() > deadline:
            return NoBid.DEADLINE
        try:
            body = build_response(ctx, self._settings.seat, state.notice_urls, state.next_bid_id)
        except IdsUnavailable:  # no Snowflake id lease: no bid rather than a duplicate id
            metrics.IDS_UNAVAILABLE.inc()
            return NoBid.IDS_UNAVAILABLE
        if ctx.times is not None:
            ctx.times.mark("respond")
        if state.clock.monotonic() > deadline:  # building the response took it past
            return NoBid.DEADLINE
        return Response(200, body, _HELD_BID_HEADERS if ctx.held else _BID_HEADERS)

    def _deadline(self, received: float, tmax_ms: int | None, margin: float) -> float:
        """When the stages must be done: the answer's last byte is due at the deadline,
        and writing it takes the ``margin``."""
        deadline = received + self._budget_s
        if tmax_ms is not None:
            deadline = min(deadline, received + tmax_ms / 1000 - self._allowance_s)
        return deadline - margin


def build_server(state: BidderState) -> HttpServer:
    """The bid port: five routes on a lean HTTP/1.1 server (``bidder.serve.http``).

    The bid route's request must arrive whole within the deadline, or it is answered
    as a ``deadline`` no-bid. The body cap is the server's, so an oversized body is a
    204 ``invalid``, not a 413; gzip is decoded by the handler, within the cap.
    ``GET /clock`` tells a replay which wall clock the bidder runs on.
    """
    settings = state.settings
    bids = BidHandler(state)
    max_age_ms = round(settings.notice_max_age_s * 1000)
    view = ViewNoticeHandler(state.signer, state.clock, max_age_ms, state.count_viewable)
    notices = NoticeParts(state.signer, state.clock, state.biller, state.book, max_age_ms)
    routes = {
        ("POST", BID_PATH): Route(
            bids.handle, arrive_within_s=settings.deadline_ms / 1000, late=bids.late
        ),
        ("GET", "/notice/win"): Route(NoticeHandler(notices, "win").handle),
        ("GET", "/notice/bill"): Route(NoticeHandler(notices, "bill").handle),
        ("GET", VIEW_PATH): Route(view.handle),
        ("GET", CLOCK_PATH): Route(partial(_clock, state)),
    }
    return HttpServer(routes, now=state.clock.monotonic, max_body_bytes=settings.max_body_bytes)


def _clock(state: BidderState, _: Request) -> Response:
    """``{"wall_ms", "speed", "sim_clock"}``: ``sim_clock`` is the ``--sim-clock`` value
    (``START_MS:SPEED:AT_MS``) or null on the real clock."""
    sim = state.settings.sim_clock
    body = {
        "wall_ms": state.clock.wall_ms(),
        "speed": state.clock.speed,
        "sim_clock": sim.text if sim is not None else None,
    }
    return messages.json(200, body)
