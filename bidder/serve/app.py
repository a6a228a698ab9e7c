"""The worker's HTTP application: ``POST /openrtb2/bid`` and the notice endpoints.

Theory of operation for a bid request: the deadline is fixed at receipt
(``received + deadline_ms``, tightened to ``tmax - network allowance`` once the
request says its tmax); the stages must be done ``answer_margin_ms`` before it, the
time it takes to write the answer, and ``overload_margin_ms`` earlier still when the
request was admitted while the worker sheds (``bidder.decide.overload``): under overload the
timer that ends a stage fires late by a loop iteration. Every await after receipt is
bounded by it with ``asyncio.timeout_at``: the body read when part of the body is
still in flight, and each pipeline stage that does I/O (see ``bidder.pipeline.runner``).
Pure work can't be interrupted, so the deadline is checked once more before a bid goes out.
Whatever goes wrong, the answer is a 204 with a typed reason: a remote fault
(bad body) is ``invalid``, lateness is ``deadline``, and our own bug is logged
loudly and answered ``internal_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.nobid import NoBid
from bidder.core.tokens import TokenSigner
from bidder.decide.overload import InFlightGate, LagShedder, LoopLag, run_lag_probe
from bidder.decide.ratelimit import RateLimiter
from bidder.openrtb.body import read_body
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.campaign_trace import HEADER as CAMPAIGN_TRACE
from bidder.pipeline.campaign_trace import CampaignTrace
from bidder.pipeline.response import NoticeUrls, build_response, winners
from bidder.pipeline.runner import Context, PricedCandidate, Stage, run_stages
from bidder.pipeline.stage_times import HEADER as STAGE_TIMES
from bidder.pipeline.stage_times import StageTimes
from bidder.serve.settings import Settings
from bidder.serve.view_notice import VIEW_PATH, CountViewable, ViewNoticeHandler
from bidder.winloop.billable import BillingOutcome
from bidder.winloop.billing import Biller, BillingUnavailable, ImpressionSink
from bidder.winloop.notices import NoticeError, parse_notice
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


def _nobid_headers(reason: NoBid) -> CIMultiDictProxy[str]:
    headers = CIMultiDict({"X-Nbr-Reason": reason.value})
    if reason.nbr is not None:
        headers["X-Nbr"] = str(reason.nbr)
    return CIMultiDictProxy(headers)


_NOBID_HEADERS = {reason: _nobid_headers(reason) for reason in NoBid}
_BID_HEADERS = CIMultiDictProxy(
    CIMultiDict({"Content-Type": "application/json", "X-Openrtb-Version": "2.6"})
)
# A bid whose claim was held for a better-placed copy says so, so a replay can tell its
# latency apart (``bidder.pipeline.auction_claims``).
_HELD_BID_HEADERS = CIMultiDictProxy(CIMultiDict({**_BID_HEADERS, "X-Dedup-Held": "1"}))


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
        self._overload_margin_s = state.settings.overload_margin_ms / 1000
        self._shedder = LagShedder(
            state.settings.shed_lag_s,
            state.settings.shed_stay_lag_ms / 1000,
            state.settings.shed_calm_ms / 1000,
        )
        self._gate = InFlightGate(state.settings.max_in_flight)
        self._lag = LoopLag(state.clock)
        self._partners = RateLimiter(state.settings.rate_limits, state.clock)
        state.background.append(self._probe_lag)

    async def _probe_lag(self) -> None:
        await run_lag_probe(self._lag, self._state.clock, on_sample=metrics.LOOP_LAG.set)

    async def handle(self, request: web.BaseRequest) -> web.Response:
        clock = self._state.clock
        now = clock.monotonic()
        lag = self._lag.current()
        if self._shedder.shed(lag, now):
            metrics.SHED_LOOP_LAG.inc()
            return self._answer_nobid(NoBid.OVERLOADED, now)
        if not self._partner_allowed(request.headers.get("X-Ssp", "")):
            return self._answer_nobid(NoBid.THROTTLED, now)
        if not self._gate.enter():
            metrics.SHED_IN_FLIGHT.inc()
            return self._answer_nobid(NoBid.OVERLOADED, now)
        margin = self._margin_s
        if self._shedder.overloaded(now):  # admitted in a lull of an overload
            margin += self._overload_margin_s
        times = StageTimes() if STAGE_TIMES in request.headers else None
        trace = CampaignTrace() if CAMPAIGN_TRACE in request.headers else None
        try:
            # Queueing before the handler counts against the deadline: charge the lag.
            outcome = await self._decide_in_time(request, now - lag, margin, times, trace)
        finally:
            self._gate.leave()
        if isinstance(outcome, NoBid):
            answer = self._answer_nobid(outcome, now)
        else:
            metrics.LATENCY.observe(clock.monotonic() - now)
            metrics.BIDS.inc()
            answer = outcome
        if times is not None:
            answer.headers[STAGE_TIMES] = times.header()
        if trace is not None:
            answer.headers[CAMPAIGN_TRACE] = trace.header()
        return answer

    def _partner_allowed(self, ssp: str) -> bool:
        """Stage 2, the SSP's token bucket: checked on the header, before the body is
        read or parsed, so a throttled partner costs microseconds."""
        allowed = self._partners.allow(ssp)
        outcome = "allowed" if allowed else "throttled"
        metrics.PARTNER_REQUESTS.labels(self._partners.label(ssp), outcome).inc()
        return allowed

    def _answer_nobid(self, reason: NoBid, started: float) -> web.Response:
        metrics.LATENCY.observe(self._state.clock.monotonic() - started)
        metrics.NOBID_BY_REASON[reason].inc()
        return web.Response(status=204, headers=_NOBID_HEADERS[reason])

    async def _decide_in_time(
        self,
        request: web.BaseRequest,
        received: float,
        margin: float,
        times: StageTimes | None,
        trace: CampaignTrace | None,
    ) -> web.Response | NoBid:
        try:
            return await self._decide(request, received, margin, times, trace)
        except TimeoutError:
            return NoBid.DEADLINE
        except Exception:
            metrics.INTERNAL_ERRORS.inc()
            log.exception("bug on the bid path; answered 204 internal_error")
            return NoBid.INTERNAL_ERROR

    async def _decide(
        self,
        request: web.BaseRequest,
        received: float,
        margin: float,
        times: StageTimes | None,
        trace: CampaignTrace | None,
    ) -> web.Response | NoBid:
        try:
            body = await self._read(request, self._deadline(received, None, margin))
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
            ssp=request.headers.get("X-Ssp", ""),
            received=received,
            times=times,
            trace=trace,
        )
        if trace is not None:
            ctx.finishers.append(trace.sent)
        sent: Sequence[PricedCandidate] = ()
        try:
            answer = await self._answer(ctx, deadline)
            if not isinstance(answer, NoBid):
                sent = winners(ctx.priced, bid_request.imps)
            return answer
        finally:  # also on a timeout or a bug: what a stage took is given back
            ctx.finish(sent)

    async def _answer(self, ctx: Context, deadline: float) -> web.Response | NoBid:
        reason = await run_stages(self._state.stages, ctx, deadline)
        if reason is not None:
            return reason
        state = self._state
        # Pure stages can't be cancelled, so lateness is checked here: a late answer
        # takes no ids, and is "deadline" whatever else went wrong while it was late.
        if state.clock.monotonic() > deadline:
            return NoBid.DEADLINE
        try:
            body = build_response(ctx, self._settings.seat, state.notice_urls, state.next_bid_id)
        except IdsUnavailable:  # no Snowflake id lease: no bid rather than a duplicate id
            metrics.IDS_UNAVAILABLE.inc()
            return NoBid.INTERNAL_ERROR
        if ctx.times is not None:
            ctx.times.mark("respond")
        if state.clock.monotonic() > deadline:  # building the response took it past
            return NoBid.DEADLINE
        return web.Response(body=body, headers=_HELD_BID_HEADERS if ctx.held else _BID_HEADERS)

    async def _read(self, request: web.BaseRequest, deadline: float) -> bytes:
        """The body; a timer is armed only if part of it has not arrived yet."""
        arrived = request.content.is_eof()
        async with contextlib.nullcontext() if arrived else asyncio.timeout_at(deadline):
            return await read_body(request, self._settings.max_body_bytes)

    def _deadline(self, received: float, tmax_ms: int | None, margin: float) -> float:
        """When the stages must be done: the answer's last byte is due at the deadline,
        and writing it takes the ``margin``."""
        deadline = received + self._budget_s
        if tmax_ms is not None:
            deadline = min(deadline, received + tmax_ms / 1000 - self._allowance_s)
        return deadline - margin


class NoticeHandler:
    """Win and billing notices (see ``bidder.winloop.notices`` and ``bidder.winloop.billing``).

    A refused notice is a 400 naming the reason and changes nothing but the rejected
    counter; a first valid notice bills the impression; a repeat is a duplicate
    (2xx, counted, no spend). A win for a nurl-served creative returns its markup,
    duplicate or not (the exchange may be retrying because it lost the markup).
    A valid notice whose billing can't be done now (Valkey, spool or ids down) is
    journaled and answered 202 (its markup for such a win): it is billed exactly once
    when they are back. Only when even the journal can't be written is it a 503, so
    the exchange retries rather than the impression being lost.
    """

    def __init__(self, state: BidderState, kind: str):
        self._state = state
        self._kind = kind
        self._max_age_ms = round(state.settings.notice_max_age_s * 1000)
        self._outcomes = {o: metrics.NOTICES.labels(kind, o.value) for o in _OUTCOMES}

    async def handle(self, request: web.BaseRequest) -> web.Response:
        state = self._state
        try:
            notice = parse_notice(
                request.query, state.signer, state.clock.wall_ms(), self._max_age_ms
            )
        except NoticeError as exc:
            metrics.NOTICES_REJECTED.labels(self._kind, exc.reason).inc()
            return web.Response(status=400, text=str(exc))
        try:
            outcome = await state.biller.bill(notice, self._kind)
        except BillingUnavailable:  # logged loudly by the biller: neither billed nor journaled
            self._outcomes[BillingOutcome.UNAVAILABLE].inc()
            return web.Response(status=503, text="try again later", headers={"Retry-After": "5"})
        self._outcomes[outcome].inc()
        claims = notice.claims
        creative = state.book.index.creative(claims.campaign_id, claims.creative_id)
        if self._kind == "win" and creative is not None and creative.serve == "nurl":
            return web.Response(text=creative.markup, content_type="text/html")
        return web.Response(status=202 if outcome is BillingOutcome.DEFERRED else 204)


_OUTCOMES = (
    BillingOutcome.BILLED,
    BillingOutcome.DUPLICATE,
    BillingOutcome.DEFERRED,
    BillingOutcome.UNAVAILABLE,
)
"""The outcomes of a live notice (the others are replays'), counted from zero."""


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def build_server(state: BidderState) -> web.Server:
    """The bid port: aiohttp's low-level server with a route table of five entries.

    No ``web.Application``: its router, middleware chain and signals cost about 6 µs of
    CPU per request (measured on the echo app under wrk), and these five routes need
    none of it. The body cap is enforced by ``read_body`` so an oversized body is a
    204, not a 413; gzip is decoded there too, within the cap (``auto_decompress`` off).
    ``GET /clock`` tells a replay which wall clock the bidder runs on.
    """
    routes: dict[tuple[str, str], Handler] = {
        ("POST", BID_PATH): BidHandler(state).handle,
        ("GET", "/notice/win"): NoticeHandler(state, "win").handle,
        ("GET", "/notice/bill"): NoticeHandler(state, "bill").handle,
        ("GET", VIEW_PATH): ViewNoticeHandler(
            state.signer,
            state.clock,
            round(state.settings.notice_max_age_s * 1000),
            state.count_viewable,
        ).handle,
        ("GET", CLOCK_PATH): partial(_clock, state),
    }
    paths = {path for _, path in routes}

    def dispatch(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        handler = routes.get((request.method, request.path))
        if handler is not None:
            return handler(request)
        status = 405 if request.path in paths else 404
        return _answer(web.Response(status=status))

    return web.Server(dispatch, auto_decompress=False)


async def _clock(state: BidderState, _: web.BaseRequest) -> web.StreamResponse:
    """``{"wall_ms", "speed", "sim_clock"}``: ``sim_clock`` is the ``--sim-clock`` value
    (``START_MS:SPEED:AT_MS``) or null on the real clock."""
    sim = state.settings.sim_clock
    body = {
        "wall_ms": state.clock.wall_ms(),
        "speed": state.clock.speed,
        "sim_clock": sim.text if sim is not None else None,
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def _answer(response: web.StreamResponse) -> web.StreamResponse:
    return response
