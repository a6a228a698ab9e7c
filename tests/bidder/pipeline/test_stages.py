"""The stage adapters: each narrows candidates or names one reason, as documented."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import Campaign
from bidder.core.clock import ManualClock
from bidder.core.nobid import NoBid
from bidder.decide.consent import ConsentPolicy
from bidder.decide.eligibility import Candidate
from bidder.decide.identity_graph import build_graph
from bidder.decide.identity_table import IDENTITY_METRICS, CachedGraph, Entry
from bidder.decide.profile_cache import FillCache, ProfileCache
from bidder.decide.profiles import Profile
from bidder.openrtb.request import parse_bid_request
from bidder.pipeline.runner import Context
from bidder.pipeline.stages import ConsentStage, PacingStage, ProfileStage
from pacing import Lease, NodePacer
from tests.bidder.conftest import CAMPAIGNS

_CAMPAIGNS = {c.id: c for c in load_campaign_file(CAMPAIGNS)}
_NOW_MS = ManualClock().wall_ms()


def _ctx(**fields: Any) -> Context:
    doc = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}], **fields}
    return Context(request=parse_bid_request(orjson.dumps(doc)), ssp="ssp-a", received=0.0)


def _candidates(ctx: Context, *campaign_ids: str) -> list[Candidate]:
    imp = ctx.request.imps[0]
    campaigns: list[Campaign] = [_CAMPAIGNS[cid] for cid in campaign_ids]
    return [Candidate(imp, c, creative) for c in campaigns for creative in c.creatives]


def _lease(rate_ppm: int = 1_000_000, amount: int = 10_000_000) -> Lease:
    return Lease(lease_id=1, amount_micros=amount, expires_ms=_NOW_MS + 10_000, rate_ppm=rate_ppm)


class _Draws:
    """A uniform source that counts its draws."""

    def __init__(self, value: float) -> None:
        self.value, self.count = value, 0

    def __call__(self) -> float:
        self.count += 1
        return self.value


def test_pacing_draws_once_per_campaign_however_many_creatives() -> None:
    draws = _Draws(0.0)
    pacer = NodePacer("n1", ManualClock(), rng=draws)
    pacer.install({"cobalt-skyscrapers": _lease()})
    ctx = _ctx()
    ctx.candidates = _candidates(ctx, "cobalt-skyscrapers")
    assert len(ctx.candidates) > 1
    assert PacingStage(pacer)(ctx, 1.0) is None
    assert draws.count == 1
    assert len(ctx.candidates) == len(_CAMPAIGNS["cobalt-skyscrapers"].creatives)


def test_pacing_keeps_only_campaigns_with_a_lease() -> None:
    pacer = NodePacer("n1", ManualClock(), rng=_Draws(0.0))
    pacer.install({"cobalt-skyscrapers": _lease()})
    ctx = _ctx()
    ctx.candidates = _candidates(ctx, "cobalt-skyscrapers", "meadow-home-spring-sale")
    assert PacingStage(pacer)(ctx, 1.0) is None
    assert {c.campaign.id for c in ctx.candidates} == {"cobalt-skyscrapers"}


@pytest.mark.parametrize(
    ("leases", "reason"),
    [
        (None, NoBid.BUDGET_UNAVAILABLE),
        ({}, NoBid.NO_LEASE),
        ({"cobalt-skyscrapers": _lease(rate_ppm=0)}, NoBid.PACED),
        ({"cobalt-skyscrapers": _lease(amount=1)}, NoBid.NO_LEASE),
    ],
    ids=["state-unreadable", "no-lease", "paced", "chunk-too-small"],
)
def test_pacing_names_why_no_campaign_may_spend(
    leases: dict[str, Lease] | None, reason: NoBid
) -> None:
    pacer = NodePacer("n1", ManualClock(), rng=_Draws(0.5))
    if leases is not None:
        pacer.install(leases)
    ctx = _ctx()
    ctx.candidates = _candidates(ctx, "cobalt-skyscrapers")
    assert PacingStage(pacer)(ctx, 1.0) is reason
    assert ctx.candidates == []


def test_pacing_reports_the_most_severe_reason_across_campaigns() -> None:
    pacer = NodePacer("n1", ManualClock(), rng=_Draws(0.5))
    pacer.install({"cobalt-skyscrapers": _lease(rate_ppm=0)})
    ctx = _ctx()
    ctx.candidates = _candidates(ctx, "cobalt-skyscrapers", "meadow-home-spring-sale")
    assert PacingStage(pacer)(ctx, 1.0) is NoBid.NO_LEASE


def test_consent_without_a_tc_string_under_gdpr_is_refused() -> None:
    ctx = _ctx(regs={"gdpr": 1})
    assert ConsentStage(ConsentPolicy())(ctx, 1.0) is NoBid.NO_CONSENT


def test_us_privacy_opt_out_allows_only_a_contextual_bid() -> None:
    ctx = _ctx(regs={"us_privacy": "1YYN"})
    assert ConsentStage(ConsentPolicy())(ctx, 1.0) is None
    assert ctx.personalize is False


def _cache(profiles: dict[str, Profile]) -> ProfileCache:
    return ProfileCache(lambda keys: {k: profiles.get(k) for k in keys}, ManualClock())


@pytest.mark.asyncio
async def test_profile_stage_without_consent_forms_no_user_key() -> None:
    cache = _cache({})
    ctx = _ctx(user={"buyeruid": "u1"})
    ctx.personalize = False
    assert ProfileStage(cache, miss_nobid=True)(ctx, 1.0) is None
    assert ctx.user_key is None
    assert cache.stats.misses == 0
    cache.close()


@pytest.mark.asyncio
async def test_profile_miss_goes_on_without_a_profile_then_hits_after_the_fill() -> None:
    profile = Profile(segments=frozenset({7}), last_click_ms=None, clicks_30d=0)
    cache = _cache({"b:u1": profile})
    stage = ProfileStage(cache)
    first = _ctx(user={"buyeruid": "u1"})
    assert stage(first, 1.0) is None
    assert (first.user_key, first.profile) == ("b:u1", None)
    await cache.drain()
    second = _ctx(user={"buyeruid": "u1"})
    assert stage(second, 1.0) is None
    assert second.profile == profile
    cache.close()


@pytest.mark.asyncio
async def test_profile_miss_is_a_nobid_when_configured() -> None:
    cache = _cache({})
    assert ProfileStage(cache, miss_nobid=True)(_ctx(user={"buyeruid": "u1"}), 1.0) is (
        NoBid.PROFILE_MISS
    )
    await cache.drain()
    cache.close()


@pytest.mark.asyncio
async def test_with_a_graph_caps_key_the_person_and_profiles_the_id() -> None:
    profile = Profile(segments=frozenset({7}), last_click_ms=None, clicks_30d=0)
    cache = _cache({"b:u1": profile})
    graph = build_graph(2, [["b:u1", "i:ifa-1"]])
    stage = ProfileStage(cache, graph=graph)
    ctx = _ctx(user={"buyeruid": "u1"})
    stage(ctx, 1.0)
    await cache.drain()
    stage(ctx, 1.0)
    assert (ctx.user_key, ctx.profile) == ("g:b:u1", profile)
    cache.close()


@pytest.mark.asyncio
async def test_with_a_graph_table_a_miss_caps_the_id_and_the_next_request_the_person() -> None:
    profiles = _cache({})
    clusters = {"b:u1": ("b:u1", 1.0)}
    identities = FillCache[Entry](
        lambda keys: {k: clusters.get(k) for k in keys}, ManualClock(), series=IDENTITY_METRICS
    )
    stage = ProfileStage(profiles, graph=CachedGraph(identities))
    first, second = _ctx(user={"buyeruid": "u1"}), _ctx(user={"buyeruid": "u1"})
    stage(first, 1.0)
    await identities.drain()
    stage(second, 1.0)
    assert (first.user_key, second.user_key) == ("b:u1", "g:b:u1")
    profiles.close()
    identities.close()
