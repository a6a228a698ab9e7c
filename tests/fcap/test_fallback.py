"""Fallback keys through stage 7 on a real Valkey: a request without a usable user key
is capped under the household or network key when its campaign asks for it, and the
bid's token carries that key so the win counts where the check read."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest

from bidder.core.campaigns import Campaign, CapPolicy
from bidder.core.clock import ManualClock
from bidder.core.nobid import NoBid
from bidder.core.tokens import TokenSigner
from bidder.decide.eligibility import Candidate
from bidder.decide.identity_graph import IdentityGraph
from bidder.decide.profile_cache import ProfileCache
from bidder.openrtb.request import parse_bid_request
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.response import NoticeUrls, build_response
from bidder.pipeline.runner import Context, PricedCandidate
from bidder.pipeline.stages import FcapStage, ProfileStage
from fcap.capper import FrequencyCapper
from fcap.rules import subject_for
from fcap.store import FcapStore
from ids import Snowflake, bid_id_source
from tests.fcap.support import DAY_S, campaign, cap, far_deadline
from tests.published import sample

pytestmark = pytest.mark.asyncio
_ONCE = cap("campaign", "fixed", DAY_S, 1)
_CLOCK = ManualClock()
_SIGNER = TokenSigner({"k1": b"f" * 32}, "k1")


def _campaign(fallback: str, cid: str | None = None) -> Campaign:
    name = cid or f"fb-{fallback}-{uuid.uuid4().hex[:8]}"
    return campaign(_ONCE, cid=name, policy=CapPolicy(fallback=fallback))


def _stage(store: FcapStore, *campaigns: Campaign) -> FcapStage:
    book = CampaignBook(table=None)  # type: ignore[arg-type]  # never refreshed here
    book.install(campaigns)
    return FcapStage(FrequencyCapper(store), book, _CLOCK)


def _ctx(
    ip: str, user: dict[str, Any] | None, *campaigns: Campaign, graph: IdentityGraph | None = None
) -> Context:
    """A request through stage 5 (keys, the graph's placement), with ``campaigns``'
    creatives as its candidates."""
    doc = {
        "id": "r",
        "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}],
        "device": {"ip": ip},
        "user": user or {},
    }
    ctx = Context(request=parse_bid_request(orjson.dumps(doc)), ssp="ssp-a", received=0.0)
    cache = ProfileCache(lambda keys: dict.fromkeys(keys), ManualClock())
    ProfileStage(cache, graph=graph)(ctx, 0.0)
    cache.close()
    imp = ctx.request.imps[0]
    ctx.candidates = [Candidate(imp, c, cr) for c in campaigns for cr in c.creatives]
    return ctx


def _new_ip() -> str:
    n = uuid.uuid4().int
    return f"10.{n % 250}.{n // 250 % 250}.{n // 62_500 % 250 + 1}"


async def _bid_and_win(stage: FcapStage, store: FcapStore, ctx: Context) -> NoBid | None:
    """Stage 7, then the win counted with the key the bid's token carries."""
    result = await stage(ctx, far_deadline())  # type: ignore[misc]
    if result is not None:
        return result
    for candidate in ctx.candidates:
        subject = subject_for(candidate.campaign, candidate.creative.id)
        claims = _token_claims(ctx, candidate)
        await store.count(
            uuid.uuid4().hex, subject, "win", claims.user_key, claims.household_key,
            _CLOCK.wall_ms(), _CLOCK.wall_ms(),
        )  # fmt: skip
    return None


def _token_claims(ctx: Context, candidate: Candidate) -> Any:
    ctx.priced = [PricedCandidate(candidate, 1_000_000)]
    urls = NoticeUrls("https://bidder.example", _SIGNER, Snowflake(_CLOCK, 3).next_id, _CLOCK)
    body = orjson.loads(build_response(ctx, "seat", urls, bid_id_source()))
    nurl = body["seatbid"][0]["bid"][0]["nurl"]
    return _SIGNER.verify(dict(parse_qsl(urlsplit(nurl).query))["t"])


async def test_without_an_id_a_household_fallback_caps_the_household(store: FcapStore) -> None:
    c = _campaign("household")
    stage, ip = _stage(store, c), _new_ip()
    first = _ctx(ip, None, c)
    assert await _bid_and_win(stage, store, first) is None
    assert first.fallback_keys == {(c.id, "cr1"): f"h:4:{ip}"}
    assert first.caps_unchecked == frozenset()
    assert await stage(_ctx(ip, None, c), far_deadline()) is NoBid.CAPPED  # type: ignore[misc]


async def test_an_ip_fallback_caps_the_whole_slash_24(store: FcapStore) -> None:
    c = _campaign("ip")
    stage, ip = _stage(store, c), _new_ip()
    assert await _bid_and_win(stage, store, _ctx(ip, None, c)) is None
    neighbour = ip.rsplit(".", 1)[0] + ".254"
    assert await stage(_ctx(neighbour, None, c), far_deadline()) is NoBid.CAPPED  # type: ignore[misc]
    elsewhere = _ctx(_new_ip(), None, c)
    assert await stage(elsewhere, far_deadline()) is None  # type: ignore[misc]


async def test_none_keeps_a_request_without_an_id_unchecked(store: FcapStore) -> None:
    c = _campaign("none")
    stage, ip = _stage(store, c), _new_ip()
    for _ in range(3):
        ctx = _ctx(ip, None, c)
        assert await _bid_and_win(stage, store, ctx) is None
        assert ctx.fallback_keys is None and ctx.caps_unchecked == {(c.id, "cr1")}


async def test_a_request_with_an_id_keeps_its_own_key(store: FcapStore) -> None:
    c = _campaign("household")
    stage, ip = _stage(store, c), _new_ip()
    ctx = _ctx(ip, {"buyeruid": uuid.uuid4().hex}, c)
    assert await _bid_and_win(stage, store, ctx) is None and ctx.fallback_keys is None
    other = _ctx(ip, {"buyeruid": uuid.uuid4().hex}, c)
    assert await stage(other, far_deadline()) is None  # type: ignore[misc]


async def test_a_low_confidence_id_falls_back_and_a_confident_one_does_not(
    store: FcapStore,
) -> None:
    c = _campaign("household")
    stage, ip = _stage(store, c), _new_ip()
    weak, sure = uuid.uuid4().hex, uuid.uuid4().hex
    graph = IdentityGraph(1, {f"b:{weak}": ("weak", 0.3), f"b:{sure}": ("sure", 0.9)})
    weak_ctx = _ctx(ip, {"buyeruid": weak}, c, graph=graph)
    assert weak_ctx.low_confidence and weak_ctx.user_key == f"b:{weak}"
    assert await _bid_and_win(stage, store, weak_ctx) is None
    assert weak_ctx.fallback_keys == {(c.id, "cr1"): f"h:4:{ip}"}
    assert await stage(_ctx(ip, None, c), far_deadline()) is NoBid.CAPPED  # type: ignore[misc]
    sure_ctx = _ctx(ip, {"buyeruid": sure}, c, graph=graph)
    assert await stage(sure_ctx, far_deadline()) is None  # type: ignore[misc]
    assert sure_ctx.user_key == "g:sure" and sure_ctx.fallback_keys is None


async def test_campaigns_with_and_without_a_fallback_are_checked_in_one_request(
    store: FcapStore,
) -> None:
    fallback, plain = _campaign("household"), _campaign("none")
    stage, ip = _stage(store, fallback, plain), _new_ip()
    before = sample("bidsim_fcap_fallback_checks_total", {"fallback": "household"})
    assert await _bid_and_win(stage, store, _ctx(ip, None, fallback, plain)) is None
    again = _ctx(ip, None, fallback, plain)
    assert await stage(again, far_deadline()) is None  # type: ignore[misc]
    assert [c.campaign.id for c in again.candidates] == [plain.id]
    assert again.caps_unchecked == {(plain.id, "cr1")}
    after = sample("bidsim_fcap_fallback_checks_total", {"fallback": "household"})
    assert after == before + 2
