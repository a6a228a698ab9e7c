"""The pipeline stages, each a thin adapter over pure logic, in hot-path order."""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Sequence
from functools import partial
from typing import Any

from bidder.core.clock import Clock
from bidder.core.futures import Later, Outcome, when_all
from bidder.core.ledger import cost_of
from bidder.core.nobid import NoBid
from bidder.core.tasks import TaskSet
from bidder.decide.consent import ConsentPolicy, evaluate
from bidder.decide.eligibility import Candidate, EligibilityPolicy, select
from bidder.decide.identity import identify
from bidder.decide.identity_graph import Placer
from bidder.decide.profile_cache import ProfileCache
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.campaign_trace import capped_campaigns
from bidder.pipeline.cap_keys import cap_groups
from bidder.pipeline.runner import Context, PricedCandidate, StageResult
from bidder.supply.files import SupplyCache
from bidder.supply.schain import apply_policy, verify
from fcap import FrequencyCapper, PendingCheck, Subject, Verdict
from fcap.metrics import FALLBACK_CHECKS
from models.scorer import ScoringError
from models.serving import Pricer
from pacing import NodePacer


class ConsentStage:
    """Stage 3a: COPPA, GDPR (TCF v2), US privacy; may allow only a contextual bid."""

    def __init__(self, policy: ConsentPolicy):
        self._policy = policy

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        privacy = evaluate(ctx.request, self._policy)
        ctx.personalize = privacy.personalize
        return privacy.reason


class EligibilityStage:
    """Stage 3b: the in-memory campaign index narrows to candidates."""

    def __init__(self, book: CampaignBook, policy: EligibilityPolicy):
        self._book = book
        self._policy = policy

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        result = select(ctx.request, self._book.index, self._policy)
        if isinstance(result, NoBid):
            return result
        ctx.candidates = result
        if ctx.trace is not None:
            ctx.trace.keep_eligible(result)
        return None


class SupplyChainStage:
    """Stage 4: one schain/ads.txt verdict per request, applied per campaign policy."""

    def __init__(self, cache: SupplyCache):
        self._cache = cache

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        request = ctx.request
        verdict = verify(request.schain, request.domain, request.bundle, self._cache.files)
        result = apply_policy(ctx.candidates, verdict)
        if isinstance(result, NoBid):
            return result
        ctx.candidates = result
        return None


class ProfileStage:
    """Stage 5: one user key for the request, and its profile if the cache has it.

    A cache miss never waits: the cache fills in the background and the request goes
    on without a profile, unless ``miss_nobid`` (``--profile-miss nobid``) says a
    bid needs one. Without consent to personalize, no key is formed at all.
    """

    def __init__(self, cache: ProfileCache, miss_nobid: bool = False, graph: Placer | None = None):
        self._cache = cache
        self._miss_nobid = miss_nobid
        self._graph = graph

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        if not ctx.personalize:
            return None
        ctx.user_key, ctx.household_key = identify(ctx.request, ctx.ssp)
        if ctx.user_key is None:
            return None
        found = self._cache.lookup(ctx.user_key)
        ctx.profile = found.value
        if self._graph is not None:  # caps (and the notice token) count the person
            ctx.user_key, ctx.low_confidence = self._graph.place(ctx.user_key)
        return NoBid.PROFILE_MISS if self._miss_nobid and not found.hit else None


# When every candidate is refused, the reason reported is the most telling one.
_PACING_SEVERITY = (NoBid.BUDGET_UNAVAILABLE, NoBid.NO_LEASE, NoBid.PACED)


class PacingStage:
    """Stage 6: each campaign spends only from this node's lease, at its pacing rate.

    One decision per campaign per request (the pacing draw must not be repeated for
    each imp or creative). The bound checked against the lease is the most one
    impression can cost: the price is not known until stage 8.
    """

    def __init__(self, pacer: NodePacer):
        self._pacer = pacer

    @property
    def pacer(self) -> NodePacer:
        return self._pacer

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        decided: dict[str, NoBid | None] = {}
        kept: list[Candidate] = []
        for candidate in ctx.candidates:
            campaign = candidate.campaign
            if campaign.id not in decided:
                bound = cost_of(campaign.max_bid_cpm_micros)
                decided[campaign.id] = self._pacer.admit(campaign.id, bound)
            if decided[campaign.id] is None:
                kept.append(candidate)
        ctx.candidates = kept
        if kept:
            return None
        reasons = set(decided.values())
        return next((r for r in _PACING_SEVERITY if r in reasons), NoBid.NO_CAMPAIGNS)


class FcapStage:
    """Stage 7: one Valkey round trip checks every candidate's caps (module ``fcap``).

    When no candidate has caps, or the worker's caches answer for all of them, the
    stage stays pure and the pipeline arms no timer. Otherwise the read is sent from
    the stage call itself (``FrequencyCapper.begin``), and the stage returns its verdict
    as a ``Later``, which the replies' done-callback settles: on one Valkey server the
    request goes on from there with no task (``run_stages``). A Cluster client reads
    from a task. Reserve-at-bid slots that do not become a bid are
    released in the background once the answer is known (``Context.finish``).
    """

    def __init__(self, capper: FrequencyCapper, book: CampaignBook, clock: Clock):
        self._capper = capper
        self._book = book
        self._clock = clock
        self._releases = TaskSet()

    @property
    def releasing(self) -> int:
        """Slot releases still in flight."""
        return len(self._releases)

    def __call__(
        self, ctx: Context, deadline: float
    ) -> StageResult | Later[StageResult] | Awaitable[StageResult]:
        subjects = self._book.cap_subjects
        pairs = [(c, subjects[c.campaign.id, c.creative.id]) for c in ctx.candidates]
        if not any(subject.has_caps for _, subject in pairs):
            return None
        unique = list(dict.fromkeys(subject for _, subject in pairs))
        if self._book.fallback_caps and (ctx.user_key is None or ctx.low_confidence):
            return self._check_with_fallback(ctx, pairs, unique, deadline)
        # The read is sent here, before the request's task exists: its round trip runs
        # while the loop gets round to the task.
        begun = self._capper.begin(
            unique, ctx.user_key, ctx.household_key, self._clock.wall_ms(), deadline
        )
        if isinstance(begun, Verdict):  # the caches answered: no read, no task
            return self._apply(ctx, pairs, begun)
        replies = begun.sent.replies
        if not replies:  # a Cluster client reads from a task
            return self._finish(ctx, pairs, begun)
        # The stages after this one run from the replies' callback: they carry the
        # read's limit, at most the deadline, so the wait ends by itself.
        return Later(when_all(replies), partial(self._finish_now, ctx, pairs, begun))

    def _finish_now(
        self,
        ctx: Context,
        pairs: list[tuple[Candidate, Subject]],
        pending: PendingCheck,
        _: Outcome[Any],
    ) -> StageResult | Coroutine[Any, Any, StageResult]:
        verdict = self._capper.finish_now(pending)
        if verdict is None:  # the check script must be loaded again: that takes a task
            return self._finish(ctx, pairs, pending)
        return self._apply(ctx, pairs, verdict)

    async def _finish(
        self, ctx: Context, pairs: list[tuple[Candidate, Subject]], pending: PendingCheck
    ) -> NoBid | None:
        return self._apply(ctx, pairs, await self._capper.finish(pending))

    def _apply(
        self, ctx: Context, pairs: list[tuple[Candidate, Subject]], verdict: Verdict
    ) -> NoBid | None:
        if verdict.reservations:
            ctx.finishers.append(lambda bids: self._release_unbid(verdict, bids))
        if verdict.on_count_cache:
            ctx.finishers.append(lambda bids: self._bid_on_count_cache(verdict, bids))
        if verdict.unchecked:
            unchecked = verdict.unchecked
            ctx.caps_unchecked = frozenset((s.campaign_id, s.creative_id) for s in unchecked)
        ctx.candidates = [c for c, subject in pairs if verdict.allows(subject)]
        if ctx.trace is not None:
            over = (c.campaign.id for c, subject in pairs if subject in verdict.capped)
            allowed = (c.campaign.id for c in ctx.candidates)
            ctx.trace.capped = capped_campaigns(over, allowed)
        if ctx.candidates:
            return None
        return NoBid.CAPPED if verdict.capped else NoBid.FCAP_UNAVAILABLE

    async def _check_with_fallback(
        self,
        ctx: Context,
        pairs: list[tuple[Candidate, Subject]],
        subjects: list[Subject],
        deadline: float,
    ) -> NoBid | None:
        """Campaigns with a fallback policy check (and their bids count) their user caps
        under the fallback key; without consent to personalize no key of any kind is
        formed, so none is derived here either."""
        capper, now_ms = self._capper, self._clock.wall_ms()
        if not ctx.personalize:
            verdict = await capper.check(subjects, None, None, now_ms, deadline)
            return self._apply(ctx, pairs, verdict)
        groups, used = cap_groups(subjects, ctx.user_key, ctx.household_key, ctx.request)
        if used:
            ctx.fallback_keys = used
            for subject in subjects:
                if (subject.campaign_id, subject.creative_id) in used:
                    FALLBACK_CHECKS[subject.fallback].inc()
        verdict = await capper.check_keyed(groups, ctx.household_key, now_ms, deadline)
        return self._apply(ctx, pairs, verdict)

    def _bid_on_count_cache(self, verdict: Verdict, bids: Sequence[PricedCandidate]) -> None:
        bid = {(b.candidate.campaign.id, b.candidate.creative.id) for b in bids}
        for subject, key in verdict.on_count_cache.items():
            if (subject.campaign_id, subject.creative_id) in bid:
                self._capper.bid_on(key)

    def _release_unbid(self, verdict: Verdict, bids: Sequence[PricedCandidate]) -> None:
        bid = {(b.candidate.campaign.id, b.candidate.creative.id) for b in bids}
        for subject, reservation in verdict.reservations.items():
            if (subject.campaign_id, subject.creative_id) not in bid:
                self._releases.spawn(self._capper.release(reservation))


class ScoreStage:
    """Stage 8: all candidates scored in one batch, priced, shaded, floor-checked.

    The creatives' own feature columns come from the book (computed at campaign load).
    """

    def __init__(self, pricer: Pricer, book: CampaignBook):
        self._pricer = pricer
        self._book = book

    def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        columns = self._book.feature_columns
        unshaded: list[tuple[Candidate, int]] | None = None if ctx.trace is None else []
        try:
            priced = self._pricer.price(
                ctx.request, ctx.ssp, ctx.profile, ctx.candidates, columns, unshaded
            )
        except ScoringError:
            return NoBid.SCORE_ERROR
        if ctx.trace is not None and unshaded is not None:
            ctx.trace.keep_unshaded(unshaded)
            ctx.trace.keep_priced(priced)
        ctx.priced.extend(PricedCandidate(candidate, price) for candidate, price in priced)
        return None if ctx.priced else NoBid.FLOOR
