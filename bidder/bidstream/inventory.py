"""The generator's vocabulary: who sends traffic, from where, on what, in which sizes.

Campaign fixtures are written against these names, so they are the contract between
the bidstream generator and the bundled campaigns; docs/bidstream.md lists the shares.
Weights are relative (they need not sum to 100). Everything here is data: the draws
happen in ``_draw`` and ``_render``.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from bidder.decide.consent import BID_PURPOSES, DEFAULT_VENDOR_ID, PROFILE_PURPOSES

T = TypeVar("T")

DSP_VENDOR_ID = DEFAULT_VENDOR_ID
"""Our IAB TCF vendor id: the bidder's default (``bidder.decide.consent``)."""
DSP_PURPOSES = BID_PURPOSES | PROFILE_PURPOSES
"""The TCF purposes we need consent for: store/access, basic ads, measure (to bid) and
profiles 3, 4 (to use them); ``bidder.decide.consent`` has the rules."""


class Weighted(Generic[T]):
    """A fixed discrete distribution; ``pick`` costs one random() and one bisect."""

    __slots__ = ("_cum", "_total", "values")

    def __init__(self, pairs: Sequence[tuple[T, float]]) -> None:
        self.values: tuple[T, ...] = tuple(value for value, _ in pairs)
        self._cum = list(itertools.accumulate(weight for _, weight in pairs))
        self._total = self._cum[-1]

    def pick(self, rng: random.Random) -> T:
        return self.values[bisect.bisect_right(self._cum, rng.random() * self._total)]

    def shares(self) -> tuple[float, ...]:
        """Each value's probability, in ``values`` order."""
        prev = [0.0, *self._cum[:-1]]
        return tuple((c - p) / self._total for c, p in zip(self._cum, prev, strict=True))


# -- geography --------------------------------------------------------------------------

# A user's country. A request carries it except 3% without geo and 2.5% with a junk geo,
# so a country's share of requests is its weight / 96.5 x 94.5% (USA ~49%, GBR ~9.3%).
COUNTRIES: Weighted[str] = Weighted(
    [
        ("USA", 50.0),
        ("GBR", 9.5),
        ("CAN", 7.5),
        ("DEU", 7.5),
        ("FRA", 5.5),
        ("BRA", 4.5),
        ("IND", 4.5),
        ("JPN", 3.5),
        ("AUS", 1.0),
        ("MEX", 1.0),
        ("ESP", 1.0),
        ("ITA", 1.0),
    ]
)
EU_COUNTRIES = frozenset({"GBR", "DEU", "FRA", "ESP", "ITA"})
"""Where GDPR applies in the generated traffic (the UK keeps GDPR as UK GDPR)."""
JUNK_COUNTRIES = ("ZZZ", "NGA", "IDN", "PHL", "VNM", "PAK", "EGY", "ARG")
"""Unknown or uncommon geos nobody targets: 'ZZZ' is a failed geo lookup."""
ALPHA2 = {
    "USA": "US", "GBR": "GB", "CAN": "CA", "DEU": "DE", "FRA": "FR", "BRA": "BR",
    "IND": "IN", "JPN": "JP", "AUS": "AU", "MEX": "MX", "ESP": "ES", "ITA": "IT",
}  # fmt: skip
LANGUAGE = {
    "USA": "en", "GBR": "en", "CAN": "en", "DEU": "de", "FRA": "fr", "BRA": "pt",
    "IND": "en", "JPN": "ja", "AUS": "en", "MEX": "es", "ESP": "es", "ITA": "it",
}  # fmt: skip
IP_FIRST_OCTETS = {
    "USA": (24, 50, 66, 68, 71, 73, 98, 173), "GBR": (81, 86, 90), "CAN": (70, 142),
    "DEU": (79, 84, 91), "FRA": (82, 86, 90), "BRA": (177, 187, 189), "IND": (49, 117),
    "JPN": (126, 153), "AUS": (101, 110), "MEX": (187, 189), "ESP": (83, 88),
    "ITA": (79, 93),
}  # fmt: skip

# -- supply partners ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ssp:
    name: str
    short: str
    """Prefix of the seller ids this SSP gives its publishers."""
    ortb: str
    """'2.6' or '2.5': where schain, gdpr, consent, us_privacy and eids go."""
    first_price: float
    """Share of its auctions with at=1."""
    tmax: tuple[int, ...]
    id_style: str
    """'uuid', 'digits', 'base62' or 'stamp' (see _render.request_id)."""
    banner_format: bool
    """Sends single-size banners as format[] (else as w/h)."""
    no_schain: float
    """Share of its requests without a supply chain."""

    @property
    def domain(self) -> str:
        return f"{self.name}.example"


SSPS: tuple[Ssp, ...] = (
    Ssp("ssp-alpha", "alpha", "2.6", 1.0, (100, 120, 150), "uuid", True, 0.02),
    Ssp("ssp-beta", "beta", "2.5", 0.4, (200, 250, 300), "digits", False, 0.05),
    Ssp("ssp-gamma", "gamma", "2.6", 0.95, (80, 90, 100), "base62", True, 0.03),
    Ssp("ssp-delta", "delta", "2.5", 0.0, (150, 200, 250), "stamp", False, 0.15),
)
SSP_SHARE: Weighted[Ssp] = Weighted(list(zip(SSPS, (40.0, 30.0, 20.0, 10.0), strict=True)))
MALFORMED_SSP_SHARE: Weighted[Ssp] = Weighted(
    list(zip(SSPS, (25.0, 25.0, 15.0, 35.0), strict=True))
)
RESELLERS = 12
"""Reseller exchanges 'reseller-1.example' .. 'reseller-12.example' appear in schains."""
SPOOFED_SELLER = 0.02
"""Share of schains whose last node names a seller id its SSP's sellers.json lacks."""
UNAUTHORIZED_SELLER = 0.02
"""Share of schains sold through another publisher's direct account (domain spoofing):
every node is a known seller, but the publisher's ads.txt does not list the last one."""
NO_ADS_TXT = 0.05
"""Share of publishers (stable per publisher) with no ads.txt / app-ads.txt file."""

# -- devices --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceModel:
    make: str
    model: str
    os: str
    osv: str
    ua: str


DEVICE_CLASSES: Weighted[str] = Weighted(
    [("desktop", 25.0), ("phone", 48.0), ("tablet", 17.0), ("ctv", 10.0)]
)
SITE_SHARE_ON_MOBILE = 30.0 / 65.0
"""Phones and tablets split between mobile web and apps so that site ~55%, app ~35%."""
DEVICETYPE = {"desktop": 2, "phone": 4, "tablet": 5}
_CHROME = "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0"
_SAFARI = "AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148"
# fmt: off
DEVICE_MODELS: dict[str, tuple[DeviceModel, ...]] = {
    "desktop": (
        DeviceModel("", "", "Windows", "10",
                    f"Mozilla/5.0 (Windows NT 10.0; Win64; x64) {_CHROME} Safari/537.36"),
        DeviceModel("Apple", "", "macOS", "14.6",
                    f"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) {_CHROME} Safari/537.36"),
    ),
    "phone": (
        DeviceModel("Apple", "iPhone", "iOS", "18.1",
                    f"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) {_SAFARI}"),
        DeviceModel("Samsung", "SM-S918B", "Android", "14",
                    f"Mozilla/5.0 (Linux; Android 14; SM-S918B) {_CHROME} Mobile Safari/537.36"),
        DeviceModel("Google", "Pixel 8", "Android", "15",
                    f"Mozilla/5.0 (Linux; Android 15; Pixel 8) {_CHROME} Mobile Safari/537.36"),
    ),
    "tablet": (
        DeviceModel("Apple", "iPad", "iOS", "17.6",
                    f"Mozilla/5.0 (iPad; CPU OS 17_6 like Mac OS X) {_SAFARI}"),
        DeviceModel("Samsung", "SM-X710", "Android", "14",
                    f"Mozilla/5.0 (Linux; Android 14; SM-X710) {_CHROME} Safari/537.36"),
    ),
    "ctv": (
        DeviceModel("Roku", "4850X", "Roku", "13.0", "Roku/DVP-13.0 (13.0.0.4193-46)"),
        DeviceModel("Samsung", "QN65", "Tizen", "7.0",
                    "Mozilla/5.0 (SMART-TV; LINUX; Tizen 7.0) AppleWebKit/537.36 "
                    "(KHTML, like Gecko) 94.0.4606.31/7.0 TV Safari/537.36"),
        DeviceModel("Amazon", "AFTMM", "FireOS", "7.6",
                    "Mozilla/5.0 (Linux; Android 9; AFTMM Build/PS7633) AppleWebKit/537.36 "
                    "(KHTML, like Gecko) Silk/120.3.1 like Chrome/120.0.6099.283 Safari/537.36"),
    ),
}
# fmt: on

# -- properties ------------------------------------------------------------------------------

SITE_KINDS = (("news", 120, "IAB12"), ("sports", 80, "IAB17"), ("recipes", 60, "IAB8"))
"""(kind, count, IAB category): domains 'news-1.example' .. 'news-120.example' etc."""
APP_KINDS = (("game", 150, "IAB9-30"), ("news", 50, "IAB12"))
"""Bundles 'com.example.game1' .. 'com.example.game150', 'com.example.news1' ..."""
CTV_CHANNELS = 40
"""Bundles 'tv.example.channel1' .. 'tv.example.channel40'."""
PAGES_PER_SITE = 400

# -- formats -----------------------------------------------------------------------------------

Size = tuple[int, int]
Placement = tuple[Size, ...]
"""One banner slot: one size (w/h) or several (format[])."""

BANNER_PLACEMENTS: dict[str, Weighted[Placement]] = {
    "desktop": Weighted(
        [
            (((300, 250),), 34.0),
            (((728, 90),), 22.0),
            (((300, 600),), 8.0),
            (((160, 600),), 6.0),
            (((970, 250),), 6.0),
            (((300, 250), (300, 600)), 12.0),
            (((728, 90), (970, 250)), 8.0),
            (((160, 600), (300, 600), (300, 250)), 4.0),
        ]
    ),
    "phone": Weighted(
        [
            (((300, 250),), 42.0),
            (((320, 50),), 30.0),
            (((320, 100),), 14.0),
            (((320, 50), (320, 100)), 14.0),
        ]
    ),
    "tablet": Weighted(
        [(((300, 250),), 50.0), (((728, 90),), 30.0), (((300, 250), (728, 90)), 20.0)]
    ),
}
INTERSTITIAL_SIZES = {"phone": (320, 480), "tablet": (768, 1024)}
JUNK_SIZES: tuple[Size, ...] = ((468, 60), (120, 600))
MULTI_IMP_SLOTS: tuple[Placement, ...] = (((728, 90),), ((300, 250),), ((160, 600),))
"""Desktop pages that auction several slots at once take them from here."""

MEDIA = {
    "site": Weighted([("banner", 84.0), ("video", 8.0), ("native", 8.0)]),
    "app": Weighted([("banner", 70.0), ("video", 15.0), ("native", 15.0)]),
    "ctv": Weighted([("video", 1.0)]),
}
VIDEO_SIZES = {
    "site": Weighted([((640, 480), 60.0), ((1280, 720), 40.0)]),
    "app": Weighted([((1280, 720), 70.0), ((640, 480), 30.0)]),
    "ctv": Weighted([((1920, 1080), 60.0), ((1280, 720), 40.0)]),
}
VIDEO_MIMES = ["video/mp4", "video/webm"]
VIDEO_PROTOCOLS = [2, 3, 5, 6, 7, 8]
NATIVE_VER = "1.2"

# -- floors and blocks --------------------------------------------------------------------------

FLOOR_ZERO = 0.10
FLOOR_HIGH = 0.03
"""Share of imps with a floor above 10 USD (10-25): premium or mistaken floors."""
FLOOR_MEDIAN = 0.55
FLOOR_SIGMA = 0.9
FLOOR_RANGE = (0.05, 3.00)

BCAT = ("IAB25", "IAB26", "IAB7-39", "IAB8-18", "IAB8-5", "IAB9-9", "IAB3-7", "IAB11-4")
RIVAL_ADVERTISERS = 20
"""badv entries are 'rival-1.example' .. 'rival-20.example'."""
BLOCKING_PUBLISHERS = 0.20
"""Share of publishers that send bcat/badv (their lists are stable)."""
