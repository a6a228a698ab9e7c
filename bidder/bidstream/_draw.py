"""One auction as the publisher side sees it, before any SSP shapes it into a request.

An ``Auction`` is what duplicates share: the user, the page or app, the slots and their
base floors, the privacy signals and the transaction id. ``_render`` turns it into one
OpenRTB request per SSP that auctions it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bidder.bidstream import inventory as inv
from bidder.bidstream.population import User

JUNK = inv.Weighted([(None, 85.0), ("geo", 2.5), ("size", 6.5), ("currency", 6.0)])
"""'Junk for us': valid OpenRTB nobody bids on. Kinds exclude each other."""
NO_GEO = 0.03
CONSENT_MODES = inv.Weighted([("string", 90.0), ("missing", 6.0), ("garbage", 4.0)])
US_PRIVACY = 0.30
US_PRIVACY_OPT_OUT = 0.20
GPP = 0.10
COPPA = 0.01
TEST = 0.005

_SITE_KIND = inv.Weighted(
    [(kind, w) for kind, w in zip(inv.SITE_KINDS, (50.0, 30.0, 20.0), strict=True)]
)
_APP_KIND = inv.Weighted([(kind, w) for kind, w in zip(inv.APP_KINDS, (75.0, 25.0), strict=True)])
_VIDEO_MAXDURATION = inv.Weighted([(30, 70.0), (60, 30.0)])


def _popularity(count: int) -> inv.Weighted[int]:
    """Property numbers 1..count with a Zipf(1) popularity: a few big publishers."""
    return inv.Weighted([(n, 1.0 / (n + 1)) for n in range(1, count + 1)])


_SITE_NUMBER = {kind: _popularity(count) for kind, count, _ in inv.SITE_KINDS}
_APP_NUMBER = {kind: _popularity(count) for kind, count, _ in inv.APP_KINDS}
_CTV_NUMBER = _popularity(inv.CTV_CHANNELS)
_PAGE = _popularity(inv.PAGES_PER_SITE)


@dataclass(frozen=True, slots=True)
class ImpSpec:
    media: str
    """'banner', 'video' or 'native'."""
    sizes: inv.Placement
    """Banner sizes, or the one video player size; empty for native."""
    instl: bool
    floor: float
    """In the request currency (USD, or EUR for currency junk), before SSP adjustments."""
    maxduration: int = 0


@dataclass(frozen=True, slots=True)
class Auction:
    user: User
    channel: str
    """'site', 'app' or 'ctv' (an app on a TV)."""
    kind: str
    """Site kind ('news', 'sports', 'recipes'), app kind ('game', 'news') or 'tv'."""
    category: str
    number: int
    page: int
    imps: tuple[ImpSpec, ...]
    country: str | None
    junk: str | None
    tid: str
    test: bool
    coppa: bool
    consent: str | None
    """EU users: 'string', 'missing' or 'garbage'; None outside the EU."""
    us_privacy: str | None
    gpp: bool

    @property
    def publisher_id(self) -> str:
        if self.channel == "site":
            return f"pub-{self.kind}-{self.number}"
        if self.channel == "ctv":
            return f"pub-tv-{self.number}"
        return f"pub-app-{self.kind}-{self.number}"


def draw_auction(rng: random.Random, user: User) -> Auction:
    channel = _channel(rng, user)
    kind, category, number = _property(rng, channel)
    junk = JUNK.pick(rng)
    if junk == "size" and channel == "ctv":
        junk = "currency"  # CTV is video only: no banner size to spoil
    us = user.country == "USA"
    return Auction(
        user=user,
        channel=channel,
        kind=kind,
        category=category,
        number=number,
        page=_PAGE.pick(rng) if channel == "site" else 0,
        imps=_imps(rng, channel, user.device_class, junk),
        country=_country(rng, user, junk),
        junk=junk,
        tid=uuid_like(rng),
        test=rng.random() < TEST,
        coppa=rng.random() < COPPA,
        consent=CONSENT_MODES.pick(rng) if user.country in inv.EU_COUNTRIES else None,
        us_privacy=_us_privacy(rng) if us and rng.random() < US_PRIVACY else None,
        gpp=us and rng.random() < GPP,
    )


def uuid_like(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:]}"


def _channel(rng: random.Random, user: User) -> str:
    if user.device_class == "desktop":
        return "site"
    if user.device_class == "ctv":
        return "ctv"
    return "site" if rng.random() < inv.SITE_SHARE_ON_MOBILE else "app"


def _property(rng: random.Random, channel: str) -> tuple[str, str, int]:
    """(kind, IAB category, number) of the site, app or TV channel."""
    if channel == "site":
        kind, _, category = _SITE_KIND.pick(rng)
        return kind, category, _SITE_NUMBER[kind].pick(rng)
    if channel == "app":
        kind, _, category = _APP_KIND.pick(rng)
        return kind, category, _APP_NUMBER[kind].pick(rng)
    return "tv", "IAB1", _CTV_NUMBER.pick(rng)


def _country(rng: random.Random, user: User, junk: str | None) -> str | None:
    if junk == "geo":
        return rng.choice(inv.JUNK_COUNTRIES)
    return None if rng.random() < NO_GEO else user.country


def _us_privacy(rng: random.Random) -> str:
    return "1YYN" if rng.random() < US_PRIVACY_OPT_OUT else "1YNN"


def floor(rng: random.Random) -> float:
    """A base floor: ~10% zero, ~3% above 10, the rest lognormal within 0.05-3.00."""
    draw = rng.random()
    if draw < inv.FLOOR_ZERO:
        return 0.0
    if draw < inv.FLOOR_ZERO + inv.FLOOR_HIGH:
        return round(rng.uniform(10.0, 25.0), 2)
    low, high = inv.FLOOR_RANGE
    return round(
        min(max(rng.lognormvariate(0.0, inv.FLOOR_SIGMA) * inv.FLOOR_MEDIAN, low), high), 2
    )


def _imps(rng: random.Random, channel: str, device: str, junk: str | None) -> tuple[ImpSpec, ...]:
    if channel == "site" and device == "desktop" and rng.random() < 0.08:
        slots = rng.sample(inv.MULTI_IMP_SLOTS, rng.choice((2, 3)))
        imps = [ImpSpec("banner", slot, False, floor(rng)) for slot in slots]
    else:
        imps = [_imp(rng, channel, device)]
    if junk == "size":  # only unbiddable sizes remain: the first slot, other banners dropped
        imps[0] = ImpSpec("banner", (rng.choice(inv.JUNK_SIZES),), False, imps[0].floor)
        imps = [imps[0], *(i for i in imps[1:] if i.media != "banner")]
    return tuple(imps)


def _imp(rng: random.Random, channel: str, device: str) -> ImpSpec:
    media = inv.MEDIA[channel].pick(rng)
    base = floor(rng)
    if media == "video":
        size = inv.VIDEO_SIZES[channel].pick(rng)
        instl = channel == "app" and rng.random() < 0.6  # rewarded / interstitial video
        return ImpSpec("video", (size,), instl, base, _VIDEO_MAXDURATION.pick(rng))
    if media == "native":
        return ImpSpec("native", (), False, base)
    instl_share = 0.15 if channel == "app" else 0.03
    if device in inv.INTERSTITIAL_SIZES and rng.random() < instl_share:
        return ImpSpec("banner", (inv.INTERSTITIAL_SIZES[device],), True, base)
    return ImpSpec("banner", inv.BANNER_PLACEMENTS[device].pick(rng), False, base)
