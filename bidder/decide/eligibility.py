"""Stage 3, eligibility: which (imp, campaign, creative) triples may go on to bid.

Pure and in-memory. It runs on every request and most requests end in a no-bid, so
``CampaignIndex`` does the work once per campaign refresh:

* campaigns are pre-filtered by (channel, country, device type): a request finds the
  campaigns that survive those three checks with one dict probe, together with the
  reason the dropped ones failed. Keys are normalized (a country no campaign names
  behaves like an unknown one) so the memo stays small whatever requests send;
* each campaign's creatives are grouped by format, banners also by (w, h);
* each creative carries the keys a request's ``bcat``/``badv`` are compared with (its
  categories plus their tier-1 parents; its adomains plus their parent domains), so a
  block check is one set-disjointness test.

Check order, cheapest first: test flag, currency, channel, geo, device type, site
(domain and bundle allow/block lists), format and size, creative blocks (bcat, badv,
battr), private auction, floor. When nothing survives, the answer is the reason of
the combination that got furthest through that order: "one campaign matched all but
the floor" says more about the request than "another was outside its geo".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bidder.core.campaigns import Campaign, Creative, normalize_domain
from bidder.core.nobid import NoBid
from bidder.openrtb.view import Audio, Banner, BidRequest, Imp, Video

INTERSTITIAL_SIZES = frozenset({(320, 480), (480, 320), (768, 1024), (1024, 768), (300, 250)})
"""Creative sizes an interstitial banner imp without any size accepts (full-screen
phone and tablet, either orientation, plus the medium rectangle most SDKs centre)."""

# Device codes that stand in for each other: 1 is OpenRTB 2.0's "mobile/tablet", which
# later versions split into 4 (phone) and 5 (tablet); exchanges still send all three.
_DEVICE_ALIASES = {1: (4, 5), 4: (1,), 5: (1,)}
_DEVICE_CODES = frozenset(range(1, 9))

# Ranks in check order; the highest rank among failures names the no-bid.
_REASONS = (
    NoBid.CURRENCY,
    NoBid.CHANNEL,
    NoBid.GEO,
    NoBid.DEVICE,
    NoBid.BLOCKED_SITE,
    NoBid.FORMAT,
    NoBid.BLOCKED_CREATIVE,
    NoBid.PRIVATE_AUCTION,
    NoBid.FLOOR,
)
_CURRENCY, _CHANNEL, _GEO, _DEVICE, _SITE, _FORMAT, _BLOCKED, _PRIVATE, _FLOOR = range(9)
_NONE = -1


@dataclass(frozen=True, slots=True)
class Candidate:
    imp: Imp
    campaign: Campaign
    creative: Creative


@dataclass(frozen=True, slots=True)
class EligibilityPolicy:
    bid_on_test: bool = False
    """Requests with test=1 get no bid (TEST_REQUEST) unless this is set."""


class _Creative:
    """A creative with its block-check keys precomputed."""

    __slots__ = ("adv_keys", "attr", "cat_keys", "creative", "size")

    def __init__(self, creative: Creative) -> None:
        self.creative = creative
        self.size = (creative.w or 0, creative.h or 0)
        self.attr = creative.attr
        # bcat 'IAB7' blocks 'IAB7-39': a category also answers to its tier-1 parent.
        self.cat_keys = frozenset(key for cat in creative.cat for key in (cat, cat.split("-")[0]))
        # badv 'acme.example' blocks 'shop.acme.example'; 'www.' is matched as well
        # because badv lists copied from site URLs often carry it.
        domains = [key for d in creative.adomain for key in domain_keys(d)]
        self.adv_keys = frozenset(domains + [f"www.{d}" for d in creative.adomain])


class _Entry:
    """One active campaign, shaped for the per-request scan."""

    __slots__ = (
        "allow_bundles",
        "allow_domains",
        "audios",
        "banners",
        "block_bundles",
        "block_domains",
        "by_size",
        "campaign",
        "deals",
        "max_bid",
        "natives",
        "site_rules",
        "videos",
    )

    def __init__(self, campaign: Campaign) -> None:
        t = campaign.targeting
        self.campaign = campaign
        self.max_bid = campaign.max_bid_cpm_micros
        self.deals = frozenset(campaign.deals)
        self.allow_domains, self.block_domains = t.allow_domains, t.block_domains
        self.allow_bundles, self.block_bundles = t.allow_bundles, t.block_bundles
        self.site_rules = any((t.allow_domains, t.block_domains, t.allow_bundles, t.block_bundles))
        creatives = [_Creative(c) for c in campaign.creatives]
        self.banners = tuple(c for c in creatives if c.creative.format == "banner")
        self.videos = tuple(c for c in creatives if c.creative.format == "video")
        self.natives = tuple(c for c in creatives if c.creative.format == "native")
        self.audios = tuple(c for c in creatives if c.creative.format == "audio")
        by_size: dict[tuple[int, int], list[_Creative]] = {}
        for c in self.banners:
            by_size.setdefault(c.size, []).append(c)
        self.by_size = {size: tuple(group) for size, group in by_size.items()}


_Row = tuple[tuple[_Entry, ...], int]


class CampaignIndex:
    """The active campaigns, precomputed for ``select``. Rebuild it on every refresh."""

    __slots__ = ("_countries", "_creatives", "_entries", "_rows")

    def __init__(self, campaigns: Sequence[Campaign]) -> None:
        self._entries = tuple(_Entry(c) for c in campaigns if c.active)
        # Paused campaigns too: a win for a bid made before the pause still needs its markup.
        self._creatives = {(c.id, cr.id): cr for c in campaigns for cr in c.creatives}
        self._countries = frozenset(
            country for e in self._entries for country in e.campaign.targeting.countries or ()
        )
        # Memo of audience rows, filled on first use (a dict store is atomic, so concurrent
        # readers are safe). Bounded: 4 channels x (named countries + 1) x 9 device keys.
        self._rows: dict[tuple[str, str | None, int | None], _Row] = {}

    @property
    def campaigns(self) -> tuple[Campaign, ...]:
        return tuple(e.campaign for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def creative(self, campaign_id: str, creative_id: str) -> Creative | None:
        """A creative by ids, for win notices that serve the markup (``serve: nurl``)."""
        return self._creatives.get((campaign_id, creative_id))

    def _audience(self, request: BidRequest) -> _Row:
        """Campaigns passing channel, geo and device checks; the best rank of the rest."""
        country = request.country if request.country in self._countries else None
        device = request.devicetype if request.devicetype in _DEVICE_CODES else None
        key = (request.channel, country, device)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self._build_row(*key)
        return row

    def _build_row(self, channel: str, country: str | None, device: int | None) -> _Row:
        passed: list[_Entry] = []
        best = _NONE
        for entry in self._entries:
            rank = _audience_failure(entry.campaign, channel, country, device)
            if rank == _NONE:
                passed.append(entry)
            best = max(best, rank)
        return tuple(passed), best


def _audience_failure(c: Campaign, channel: str, country: str | None, device: int | None) -> int:
    t = c.targeting
    if t.channels is not None and channel not in t.channels:
        return _CHANNEL
    if t.countries is not None and country not in t.countries:
        return _GEO
    if t.device_types is not None and not _device_matches(t.device_types, device):
        return _DEVICE
    return _NONE


def _device_matches(targeted: frozenset[int], device: int | None) -> bool:
    if device is None:
        return False
    return device in targeted or any(d in targeted for d in _DEVICE_ALIASES.get(device, ()))


def domain_keys(domain: str) -> tuple[str, ...]:
    """The domain (without a leading 'www.') and its parents down to two labels.

    'news.example.co' -> ('news.example.co', 'example.co'): a listed domain matches
    itself and its subdomains; a bare TLD is never a key, so 'co' matches nothing.
    """
    domain = normalize_domain(domain)
    keys = [domain]
    while domain.count(".") > 1:
        domain = domain.split(".", 1)[1]
        keys.append(domain)
    return tuple(keys)


def select(
    request: BidRequest, index: CampaignIndex, policy: EligibilityPolicy
) -> list[Candidate] | NoBid:
    """The eligible (imp, campaign, creative) candidates, or the one no-bid reason."""
    if request.test and not policy.bid_on_test:
        return NoBid.TEST_REQUEST
    if request.cur and "USD" not in request.cur and not _lists_usd(request.cur):
        return NoBid.CURRENCY
    if not index:
        return NoBid.NO_CAMPAIGNS
    imps = _usd_imps(request.imps)
    if not imps:
        return NoBid.CURRENCY
    entries, best = index._audience(request)
    best = max(best, _CURRENCY) if len(imps) < len(request.imps) else best
    candidates: list[Candidate] = []
    site_keys: tuple[str, ...] | None = None
    for entry in entries:
        if entry.site_rules:
            if site_keys is None:
                site_keys = domain_keys(request.domain) if request.domain else ()
            if not _site_allowed(entry, site_keys, request.bundle):
                best = max(best, _SITE)
                continue
        for imp in imps:
            best = max(best, _match_imp(request, imp, entry, candidates))
    if candidates:
        return candidates
    return _REASONS[best] if best != _NONE else NoBid.NO_CAMPAIGNS


def _lists_usd(currencies: tuple[str, ...]) -> bool:
    # The parser keeps cur as sent; a lower-case 'usd' is rare but still means USD.
    return any(c.upper() == "USD" for c in currencies)


def _usd_imps(imps: tuple[Imp, ...]) -> tuple[Imp, ...]:
    # bidfloorcur is normalized upper case by the parser and defaults to USD.
    if all(imp.bidfloorcur == "USD" for imp in imps):
        return imps
    return tuple(imp for imp in imps if imp.bidfloorcur == "USD")


def _site_allowed(entry: _Entry, keys: tuple[str, ...], bundle: str | None) -> bool:
    """Block lists apply to their own field; any allow list makes the lists exclusive."""
    if not entry.block_domains.isdisjoint(keys) or bundle in entry.block_bundles:
        return False
    if entry.allow_domains or entry.allow_bundles:
        return not entry.allow_domains.isdisjoint(keys) or bundle in entry.allow_bundles
    return True


def _match_imp(request: BidRequest, imp: Imp, entry: _Entry, out: list[Candidate]) -> int:
    """Append the imp's candidates from one campaign; return the best failure rank."""
    # Private auction and floor depend on (imp, campaign) only, but they come after the
    # creative checks in the order, so they only count for creatives that passed those.
    late = _late_failure(imp, entry)
    best, matched = _NONE, 0
    for creatives, battr in _formats(imp, entry):
        matched += len(creatives)
        for c in creatives:
            blocked = (
                not battr.isdisjoint(c.attr)
                or not request.bcat.isdisjoint(c.cat_keys)
                or not request.badv.isdisjoint(c.adv_keys)
            )
            if blocked:
                best = max(best, _BLOCKED)
            elif late != _NONE:
                best = max(best, late)
            else:
                out.append(Candidate(imp, entry.campaign, c.creative))
    return best if matched else _FORMAT


def _late_failure(imp: Imp, entry: _Entry) -> int:
    if imp.private_auction and entry.deals.isdisjoint(imp.deal_ids):
        return _PRIVATE
    if entry.max_bid < imp.bidfloor_micros:
        return _FLOOR
    return _NONE


_Group = tuple[Sequence[_Creative], frozenset[int]]


def _formats(imp: Imp, entry: _Entry) -> list[_Group]:
    """For each format the imp offers: the campaign's fitting creatives and its battr."""
    groups: list[_Group] = []
    if imp.banner is not None and entry.banners:
        groups.append((_banners(imp.banner, imp.instl, entry), imp.banner.battr))
    if imp.video is not None and entry.videos:
        video = imp.video
        groups.append(([c for c in entry.videos if _video_fits(c, video)], video.battr))
    if imp.native is not None and entry.natives:
        groups.append((entry.natives, imp.native.battr))
    if imp.audio is not None and entry.audios:
        audio = imp.audio
        groups.append(([c for c in entry.audios if _audio_fits(c, audio)], audio.battr))
    return groups


def _banners(banner: Banner, instl: bool, entry: _Entry) -> Sequence[_Creative]:
    if banner.size_range is None and banner.sizes:
        if len(banner.sizes) == 1:
            return entry.by_size.get(banner.sizes[0], ())
        return [c for size in banner.sizes for c in entry.by_size.get(size, ())]
    return [c for c in entry.banners if _banner_fits(c.size, banner, instl)]


def _banner_fits(size: tuple[int, int], banner: Banner, instl: bool) -> bool:
    if size in banner.sizes:
        return True
    if banner.size_range is not None:
        wmin, wmax, hmin, hmax = banner.size_range
        return wmin <= size[0] <= wmax and hmin <= size[1] <= hmax
    # The parser lets a banner without any size through only for interstitials.
    return instl and not banner.sizes and size in INTERSTITIAL_SIZES


def _video_fits(c: _Creative, video: Video) -> bool:
    creative = c.creative
    if video.mimes and creative.mime not in video.mimes:
        return False
    duration = creative.duration_s or 0
    # 0 for maxduration is "not stated" in practice (several exchanges send it so).
    if video.minduration and duration < video.minduration:
        return False
    return not video.maxduration or duration <= video.maxduration


def _audio_fits(c: _Creative, audio: Audio) -> bool:
    # The parsed Audio carries no durations, so audio matches on MIME type only.
    return not audio.mimes or c.creative.mime in audio.mimes
