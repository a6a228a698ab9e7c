"""Stage 9: the OpenRTB 2.6 BidResponse for the winning candidate of each imp.

One bid per imp: the highest-priced candidate, ties broken by campaign id so
the answer is deterministic. ``Bid.id`` only has to be unique within the
response (the design says so): a per-process counter (``ids.bid_id_source``).
Each bid also gets a fleet-unique Snowflake id, inside its signed notice token
(``bidder.core.tokens``), which the notice path uses as the impression's identity and
the ledger's correlation. Win (nurl) and billing (burl) URLs carry that token
and the ``${AUCTION_PRICE}`` / ``${AUCTION_CURRENCY}`` macros verbatim for the
exchange to fill in. No Snowflake id (the worker lost its id lease) means no
bid: ``build_response`` raises ``IdsUnavailable``.

The response is written as JSON bytes piece by piece. What a (campaign, creative)
puts in every bid (cid, crid, adomain, mtype, cat, attr, w, h, adm, and its ids as
packed for the token) is rendered by orjson when the campaigns are loaded
(``bid_templates``, kept by the campaign book); per bid only the ids, the price and
the notice URLs are added. Strings from the request (its id, the imp id) go through
``orjson.dumps``, so they are escaped as any JSON string is; the price is
``orjson.dumps`` of the CPM as a float, as it would be inside a dict. The keys come
in the order a dict of the same bid would give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple, Protocol

import orjson

from bidder.core.campaigns import Campaign, Creative
from bidder.core.clock import Clock
from bidder.core.tokens import CAPS_UNCHECKED, TokenSigner, pack_texts
from bidder.decide.eligibility import Candidate
from bidder.openrtb.view import Imp
from bidder.pipeline.runner import Context, PricedCandidate
from bidder.winloop.notices import CURRENCY_MACRO, PRICE_MACRO

# The macros must reach the exchange verbatim, so they are appended unescaped.
_MACROS = f"&p={PRICE_MACRO}&c={CURRENCY_MACRO}".encode()

# OpenRTB 2.6 "Creative Markup Types" (Bid.mtype).
_MTYPE = {"banner": 1, "video": 2, "audio": 3, "native": 4}


class BidTemplate(NamedTuple):
    """What one (campaign, creative) puts in every bid it makes, pre-rendered."""

    creative: Creative
    """The creative it was rendered from: a candidate uses it only if it is the same."""
    head: bytes
    """``,"cid":…,"crid":…,"adomain":[…],"mtype":…``: the members after the price."""
    tail: bytes
    """``,"cat":…,"attr":…,"w":…,"h":…,"adm":…}``: the members after the notice URLs,
    each only when the creative has it, and the bid's closing brace."""
    token_texts: bytes
    """Campaign id, advertiser and creative id, packed for the token (``pack_texts``)."""


TemplateTable = Mapping[tuple[str, str], BidTemplate]
"""(campaign id, creative id) -> its bid template."""
_NO_TEMPLATES: TemplateTable = MappingProxyType({})


class TemplateSource(Protocol):
    """Where the current templates are (the campaign book, swapped on refresh)."""

    @property
    def bid_templates(self) -> TemplateTable: ...


def bid_template(campaign: Campaign, creative: Creative) -> BidTemplate:
    head: dict[str, object] = {
        "cid": campaign.id,
        "crid": creative.id,
        "adomain": list(creative.adomain),
        "mtype": _MTYPE[creative.format],
    }
    tail: dict[str, object] = {}
    if creative.cat:
        tail["cat"] = list(creative.cat)
    if creative.attr:
        tail["attr"] = sorted(creative.attr)
    if creative.w and creative.h:
        tail["w"], tail["h"] = creative.w, creative.h
    if creative.serve == "adm":
        tail["adm"] = creative.markup
    return BidTemplate(
        creative,
        _members(head),
        _members(tail) + b"}",
        pack_texts(campaign.id, campaign.advertiser, creative.id),
    )


def bid_templates(campaigns: Iterable[Campaign]) -> dict[tuple[str, str], BidTemplate]:
    """Every creative's template, rendered when the campaigns are loaded."""
    return {(c.id, cr.id): bid_template(c, cr) for c in campaigns for cr in c.creatives}


def _members(fields: dict[str, object]) -> bytes:
    """``,"k":v,…`` of a dict's JSON (empty for an empty dict)."""
    return b"," + orjson.dumps(fields)[1:-1] if fields else b""


def winners(priced: Iterable[PricedCandidate], imps: Iterable[Imp]) -> list[PricedCandidate]:
    """The best candidate per imp, in the request's imp order (``imps``)."""
    best: dict[str, PricedCandidate] = {}
    for option in priced:
        imp_id = option.candidate.imp.id
        current = best.get(imp_id)
        if current is None or _beats(option, current):
            best[imp_id] = option
    return [best[imp.id] for imp in imps if imp.id in best]


def _beats(option: PricedCandidate, current: PricedCandidate) -> bool:
    if option.price_cpm_micros != current.price_cpm_micros:
        return option.price_cpm_micros > current.price_cpm_micros
    return option.candidate.campaign.id < current.candidate.campaign.id


class NoticeUrls:
    """Gives each bid its template, a Snowflake id and its signed nurl and burl.

    ``templates``: where the bid templates are kept (the campaign book). A candidate
    whose template is not there (no source, or a campaign refreshed after the
    candidate was chosen) has its template rendered on the spot.
    """

    def __init__(
        self,
        base_url: str,
        signer: TokenSigner,
        next_id: Callable[[], int],
        clock: Clock,
        templates: TemplateSource | None = None,
    ) -> None:
        # JSON-escaped once; the token and the macros need no escaping.
        self._win = b',"nurl":' + orjson.dumps(f"{base_url}/notice/win?t=")[:-1]
        self._bill = b'","burl":' + orjson.dumps(f"{base_url}/notice/bill?t=")[:-1]
        self._signer = signer
        self._next_id = next_id
        self._clock = clock
        self._templates = templates

    def template(self, candidate: Candidate) -> BidTemplate:
        campaign, creative = candidate.campaign, candidate.creative
        table = self._templates.bid_templates if self._templates is not None else _NO_TEMPLATES
        found = table.get((campaign.id, creative.id))
        if found is None or found.creative is not creative:
            found = bid_template(campaign, creative)
        return found

    def members(
        self,
        option: PricedCandidate,
        template: BidTemplate,
        user_texts: bytes,
        now_ms: int,
        flags: int = 0,
    ) -> bytes:
        """``,"nurl":"…","burl":"…"`` of one bid; raises ``IdsUnavailable`` when no
        Snowflake id can be issued. ``user_texts``: the user and household keys, packed;
        ``flags``: the token's flags (``bidder.core.tokens``)."""
        texts = pack_texts(option.candidate.imp.id) + template.token_texts + user_texts
        price, bid_id = option.price_cpm_micros, self._next_id()
        token = self._signer.sign_packed(bid_id, price, now_ms, texts, flags)
        query = token + _MACROS
        return b"".join((self._win, query, self._bill, query, b'"'))

    def now_ms(self) -> int:
        return self._clock.wall_ms()


def build_response(
    ctx: Context, seat: str, urls: NoticeUrls, next_bid_id: Callable[[], str]
) -> bytes:
    """Serialized BidResponse with one bid per imp that has a priced candidate."""
    now_ms = urls.now_ms()
    user_texts = pack_texts(ctx.user_key or "", ctx.household_key or "")
    unchecked = ctx.caps_unchecked
    options = winners(ctx.priced, ctx.request.imps)
    fallback = ctx.fallback_keys
    if fallback:
        house = ctx.household_key or ""
        texts = [_fallback_texts(fallback, option, user_texts, house) for option in options]
        bids = [
            _bid(next_bid_id(), option, urls, text, now_ms, _flags(option, unchecked))
            for option, text in zip(options, texts, strict=True)
        ]
    else:
        bids = [
            _bid(next_bid_id(), option, urls, user_texts, now_ms, _flags(option, unchecked))
            for option in options
        ]
    return b"".join(
        (
            b'{"id":',
            orjson.dumps(ctx.request.id),
            b',"cur":"USD","seatbid":[{"seat":',
            orjson.dumps(seat),
            b',"bid":[',
            b",".join(bids),
            b"]}]}",
        )
    )


def _fallback_texts(
    fallback: dict[tuple[str, str], str], option: PricedCandidate, user_texts: bytes, house: str
) -> bytes:
    """The user texts of a bid whose caps were checked under a fallback key: the token
    carries that key as the user key, so its win counts where the check read."""
    candidate = option.candidate
    key = fallback.get((candidate.campaign.id, candidate.creative.id))
    return user_texts if key is None else pack_texts(key, house)


def _flags(option: PricedCandidate, unchecked: frozenset[tuple[str, str]]) -> int:
    if not unchecked:
        return 0
    candidate = option.candidate
    return CAPS_UNCHECKED if (candidate.campaign.id, candidate.creative.id) in unchecked else 0


def _bid(
    bid_id: str,
    option: PricedCandidate,
    urls: NoticeUrls,
    user_texts: bytes,
    now_ms: int,
    flags: int,
) -> bytes:
    template = urls.template(option.candidate)
    return b"".join(
        (
            b'{"id":',
            orjson.dumps(bid_id),
            b',"impid":',
            orjson.dumps(option.candidate.imp.id),
            b',"price":',
            orjson.dumps(option.price_cpm_micros / 1_000_000),
            template.head,
            urls.members(option, template, user_texts, now_ms, flags),
            template.tail,
        )
    )
