"""Supply-path dedup, the claim: one bid per auction across every worker (stage 8b).

Theory of operation. Workers are separate processes, so the copies of one auction
(``source.tid``) arriving through several SSPs meet only in Valkey. The last stage
of the pipeline, after scoring, claims the auction for the copy it is about to bid
on: ``SET <ns>:auction:{<tid>} <ssp> NX PX <window>``. The first claim wins and
that copy bids; a later copy finds the key and answers ``204 duplicate_auction``.

- Only a copy that would bid keeps a claim (the stage runs after every stage that can
  say no), so a copy that would not bid never blocks a better placed one for long. A
  request without a usable tid is not deduped (counted).
- Early claim (stage 7a, ``EarlyClaimStage``): a top-ranked copy on the single-server
  connection sends its claim before the cap check, so the round trip runs under the
  cap check and scoring instead of after them, and stage 8b only reads the reply. A
  copy that claimed early and then does not bid gives the claim back (``DEL``, sent
  only while the claim is surely still its own, well inside the window). Pure no-bid
  stages all run before 7a, so a request that never reaches the cap check costs no
  round trip.
- Preferred path: a copy that is not top-ranked (``bidder.supply.path``) does not
  claim until ``hold_s`` after its receipt, so a better path arriving within the hold
  claims first. A top-ranked copy claims at once. A late copy holds at most half the time
  left until ``HOLD_MARGIN_S`` before its deadline; the other half is the claim's.
- Fail-open: a claim may take until ``CLAIM_MARGIN_S`` before the deadline. When Valkey
  errs, or does not answer by then although the claim started with at least the claim
  budget (default ``CLAIM_BUDGET_S``) to go, the copy bids (counted ``unavailable``): a
  rare duplicate bid costs less than dropping every bid while Valkey is away. A claim
  that started later than that and got no answer is lateness, not Valkey's failure:
  the copy answers ``deadline`` (counted ``late``), as any stage still waiting at the
  deadline does. On a loaded machine this keeps late copies from bidding unchecked.
  A claim with no answer by then is not cancelled but left to finish
  (``bidder.adapters.valkey_wait``): its connection goes back to the pool.
- The key carries its own hash tag, so on Valkey Cluster each auction's key lives on
  one slot and the claim is one single-key command.

What is guaranteed: within the window, whatever the arrival order, the number of
workers and the timing, at most one copy *claims* (SET NX is atomic), so with
Valkey answering at most one copy bids. Not guaranteed: that the winner is the best
path (a better copy arriving after the hold, or two non-top copies, go first come
first served), nor a bid at all when the claiming copy then misses its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bidder.adapters.valkey import VALKEY_FAILURES, AsyncValkey
from bidder.adapters.valkey_pipelined import PipelinedConnection, forget, pack
from bidder.adapters.valkey_wait import Waiter
from bidder.core.clock import Clock
from bidder.core.nobid import NoBid
from bidder.core.published_metrics import Counter
from bidder.pipeline.runner import Context, EarlyClaim, PricedCandidate, StageResult
from bidder.supply.files import SupplyCache
from bidder.supply.path import PathPolicy, auction_id, hold_s
from bidder.supply.schain import ads_file

CLAIM_BUDGET_S = 0.002
"""Default least time to the deadline's margin for a claim without an answer to fail
open (a loopback round trip is about 0.25 ms); a later one answers ``deadline``."""
CLAIM_MARGIN_S = 0.0005
"""A claim must answer this long before the deadline, leaving time to send the bid."""
HOLD_MARGIN_S = 0.0015
"""A hold ends at the latest this long before the deadline: the claim's round trip
(about 0.25 ms on loopback, more under load) and ``CLAIM_MARGIN_S``."""

CLAIMS = Counter(
    "bidsim_dedup_claims",
    "Supply-path dedup outcomes of bidding requests: won (bids), duplicate (204), "
    "unavailable (Valkey failed: bids, fail-open), late (deadline first: 204 deadline), "
    "no_tid (not deduped: bids).",
    ["outcome"],
)
WON, DUPLICATE, UNAVAILABLE, LATE, NO_TID = (
    CLAIMS.labels(o) for o in ("won", "duplicate", "unavailable", "late", "no_tid")
)
HELD = Counter("bidsim_dedup_holds", "Bidding copies that held their claim (not top-ranked).")
GIVEN_BACK = Counter(
    "bidsim_dedup_claims_given_back",
    "Claims sent early (stage 7a) and won by copies that then did not bid, given back.",
)

Sleep = Callable[[float], Awaitable[None]]


def auction_key(namespace: str, tid: str) -> str:
    """The claim key of the auction ``tid``: its own hash tag, one slot on Cluster."""
    return f"{namespace}:auction:{{{tid}}}"


class AuctionClaims:
    """The Valkey side: one ``SET NX PX`` per claim, on the worker's auto-pipelined
    connection (one server) or its redis-py client (a Cluster)."""

    def __init__(
        self, valkey: PipelinedConnection | AsyncValkey, namespace: str, window_ms: int
    ) -> None:
        if window_ms <= 0:
            raise ValueError("the dedup window must be positive")
        self._valkey = valkey
        self._namespace = namespace
        self._window_ms = window_ms
        self._waiter = Waiter()

    @property
    def window_s(self) -> float:
        return self._window_ms / 1000

    async def claim(self, tid: str, holder: str, until: float) -> bool:
        """True when this call claimed the auction, False when a copy already had.

        Raises ``TimeoutError`` when Valkey has not answered by ``until`` (the loop's
        clock), one of ``VALKEY_FAILURES`` when it fails.
        """
        valkey = self._valkey
        if isinstance(valkey, PipelinedConnection):
            return won(await self._send(valkey, tid, holder, until))
        key = auction_key(self._namespace, tid)
        (claimed,) = await self._waiter.gather([self._set(valkey, key, holder)], until)
        return claimed

    def send(self, tid: str, holder: str, until: float) -> asyncio.Future[Any] | None:
        """The claim sent now on the single-server connection: its reply (``won``
        reads it), failing as ``claim`` does; None on a Cluster client, which sends
        only from a task (``claim``)."""
        valkey = self._valkey
        if isinstance(valkey, PipelinedConnection):
            return self._send(valkey, tid, holder, until)
        return None

    def give_back(self, tid: str) -> None:
        """Delete the claim of ``tid`` on the single-server connection, not waiting for
        the answer: only for a claim this worker won less than the window ago, when no
        other copy can hold the key."""
        valkey = self._valkey
        if isinstance(valkey, PipelinedConnection):
            forget([valkey.send(pack(b"DEL", auction_key(self._namespace, tid)))])

    def _send(
        self, pipelined: PipelinedConnection, tid: str, holder: str, until: float
    ) -> asyncio.Future[Any]:
        key = auction_key(self._namespace, tid)
        command = pack(b"SET", key, holder or "-", b"NX", b"PX", self._window_ms)
        return pipelined.send(command, until)

    async def _set(self, client: AsyncValkey, key: str, holder: str) -> bool:
        return bool(await client.set(key, holder or "-", nx=True, px=self._window_ms))


def won(reply: Any) -> bool:
    """A ``SET NX`` reply: OK when it set the key, nil when a copy had it."""
    return reply is not None


async def _won(reply: asyncio.Future[Any]) -> bool:
    return won(await reply)


class SupplyDedupStage:
    """Stage 8b, after scoring: claim the auction for this copy, or say it is a duplicate."""

    def __init__(
        self,
        claims: AuctionClaims,
        policy: PathPolicy,
        supply: SupplyCache,
        clock: Clock,
        hold_s: float,
        claim_budget_s: float = CLAIM_BUDGET_S,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._claims = claims
        self._policy = policy
        self._supply = supply
        self._clock = clock
        self._hold_s = hold_s
        self._claim_budget_s = claim_budget_s
        self._sleep = sleep

    @property
    def claims(self) -> AuctionClaims:
        return self._claims

    @property
    def clock(self) -> Clock:
        return self._clock

    def better_path_possible(self, ctx: Context) -> bool:
        """A copy through another SSP could rank strictly better than this one."""
        request = ctx.request
        ads = ads_file(request.domain, request.bundle, self._supply.files)
        return self._policy.better_path_possible(ctx.ssp, request.schain, ads)

    def fair_chance(self, limit: float) -> bool:
        """A claim starting now with ``limit`` has the claim budget to go: a timeout
        then is Valkey's failure (fail open), not our own lateness."""
        return limit - self._clock.monotonic() >= self._claim_budget_s

    def __call__(self, ctx: Context, deadline: float) -> StageResult | Awaitable[StageResult]:
        tid = auction_id(ctx.request.tid)
        if tid is None:
            NO_TID.inc()
            return None
        early = ctx.claim
        if early is not None and early.reply.done() and not early.reply.cancelled():
            # The early claim's reply came with the cap read's, before it: no wait.
            reply = early.reply
            error = reply.exception()
            return _judged(won(reply.result()) if error is None else error, early.fair_chance)
        return self._claim(ctx, tid, deadline)

    async def _claim(self, ctx: Context, tid: str, deadline: float) -> NoBid | None:
        early = ctx.claim
        if early is not None:
            answer, fair_chance = _won(early.reply), early.fair_chance
        else:
            top_ranked = ctx.top_ranked
            if top_ranked is None:
                top_ranked = not self.better_path_possible(ctx)
            now = self._clock.monotonic()
            # The hold runs from the copy's receipt: a better copy that reached us
            # within it claims first, however long this one took to get here.
            hold = self._hold_s - (now - ctx.received)
            wait = hold_s(top_ranked, hold, deadline - now, HOLD_MARGIN_S)
            if wait > 0:
                HELD.inc()
                ctx.held = True
                await self._sleep(wait)
            limit = deadline - CLAIM_MARGIN_S
            fair_chance = self.fair_chance(limit)
            answer = self._claims.claim(tid, ctx.ssp, limit)
        try:
            claimed = await answer
        except VALKEY_FAILURES as exc:
            return _judged(exc, fair_chance)
        return _judged(claimed, fair_chance)


def _judged(claimed: bool | BaseException, fair_chance: bool) -> NoBid | None:
    """A claim's outcome (module docstring): won or failed open (None, the copy bids),
    a duplicate, or late. ``claimed`` is the claim's answer or how it failed; a failure
    other than Valkey's is raised."""
    if isinstance(claimed, TimeoutError) and not fair_chance:
        LATE.inc()
        return NoBid.DEADLINE
    if isinstance(claimed, VALKEY_FAILURES):
        UNAVAILABLE.inc()
        return None
    if isinstance(claimed, BaseException):
        raise claimed
    if claimed:
        WON.inc()
        return None
    DUPLICATE.inc()
    return NoBid.DUPLICATE_AUCTION


class EarlyClaimStage:
    """Stage 7a, before the cap check: a top-ranked copy sends its claim now, and stage
    8b (``dedup``) reads the reply (module docstring). Always pure: it never says no."""

    def __init__(self, dedup: SupplyDedupStage) -> None:
        self._dedup = dedup
        self._clock = dedup.clock

    def __call__(self, ctx: Context, deadline: float) -> StageResult:
        tid = auction_id(ctx.request.tid)
        if tid is None:
            return None
        dedup = self._dedup
        ctx.top_ranked = not dedup.better_path_possible(ctx)
        if not ctx.top_ranked:  # it may hold: stage 8b claims
            return None
        limit = deadline - CLAIM_MARGIN_S
        fair_chance = dedup.fair_chance(limit)
        reply = dedup.claims.send(tid, ctx.ssp, limit)
        if reply is None:  # a Cluster client: stage 8b claims
            return None
        claim = ctx.claim = EarlyClaim(reply, self._clock.monotonic(), fair_chance)
        ctx.finishers.append(lambda bids: self._give_back_unless_bid(claim, tid, bids))
        return None

    def _give_back_unless_bid(
        self, claim: EarlyClaim, tid: str, bids: Sequence[PricedCandidate]
    ) -> None:
        if bids:
            return
        if claim.reply.done():
            self._give_back_if_won(claim, tid)
        else:
            claim.reply.add_done_callback(lambda _: self._give_back_if_won(claim, tid))

    def _give_back_if_won(self, claim: EarlyClaim, tid: str) -> None:
        reply = claim.reply
        if reply.cancelled() or reply.exception() is not None or not won(reply.result()):
            return
        # Past half the window the key may have expired and been claimed by another
        # copy: it is left to expire rather than risk deleting that copy's claim.
        if self._clock.monotonic() - claim.sent_at < self._dedup.claims.window_s / 2:
            GIVEN_BACK.inc()
            self._dedup.claims.give_back(tid)
