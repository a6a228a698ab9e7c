"""Campaigns: the typed model.

A campaign is what a bidder may spend on and how: budget, bid bounds, targeting,
creatives, frequency caps and their policy, pacing curve, deals. Campaign documents
(files and the store) are read and written by ``bidder.core.campaign_docs``; the
format is documented for users in ``docs/campaigns.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FORMATS = ("banner", "video", "native", "audio")
SERVE_MODES = ("adm", "nurl")
STATUSES = ("active", "paused")
CHANNELS = ("site", "app", "dooh")
SUPPLY_POLICIES = ("lenient", "strict")
CAP_SCOPES = ("creative", "line_item", "campaign", "advertiser", "household")
DEVICE_TYPES = {
    "mobile_tablet": 1,
    "pc": 2,
    "ctv": 3,
    "phone": 4,
    "tablet": 5,
    "connected_device": 6,
    "set_top_box": 7,
    "ooh": 8,
}
"""OpenRTB 2.x device type names accepted in files; raw codes 1-8 are accepted too."""
FIXED_WINDOWS = {"hour": 3_600, "day": 86_400, "week": 604_800, "month": 2_592_000}
"""Fixed cap buckets in seconds; a 'month' is 30 days (buckets are floor(ts / window))."""
FILE_VERSION = 1
MAX_ROLLING_HOURS = 720
MAX_BID_CPM_MICROS = 1_000_000_000
"""USD 1,000 CPM: a higher bid is almost certainly a units mistake."""
MAX_DAILY_BUDGET_MICROS = 10_000_000_000_000
"""USD 10 million a day: same reason."""
MAX_CLICK_VALUE_MICROS = 10_000_000_000
"""USD 10,000 per click."""


class CampaignError(ValueError):
    """Campaign input is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems = tuple(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = head + self.problems[0]
        else:
            text = f"{head}{len(self.problems)} problems:\n  " + "\n  ".join(self.problems)
        super().__init__(text)


@dataclass(frozen=True, slots=True)
class Creative:
    id: str
    format: str
    """'banner', 'video', 'native' or 'audio'."""
    markup: str
    """The adm: HTML (banner), VAST XML (video, audio), native response JSON (native)."""
    adomain: tuple[str, ...]
    w: int | None = None
    h: int | None = None
    cat: tuple[str, ...] = ()
    attr: frozenset[int] = frozenset()
    serve: str = "adm"
    """'adm': markup inline in the bid; 'nurl': markup returned by the win notice."""
    mime: str | None = None
    duration_s: int | None = None


@dataclass(frozen=True, slots=True)
class FrequencyCap:
    scope: str
    window_kind: str
    """'fixed' (calendar-free buckets), 'rolling' (last N hours) or 'recency'."""
    window_s: int
    """Bucket or rolling length; for a recency cap, the minimum gap."""
    limit: int | None
    """Impressions allowed per window; None for a recency cap."""

    @property
    def min_gap_s(self) -> int | None:
        return self.window_s if self.window_kind == "recency" else None

    @property
    def window(self) -> str:
        """The window as spelled in a campaign file."""
        if self.window_kind == "rolling":
            return f"rolling:{self.window_s // 3_600}h"
        if self.window_kind == "recency":
            return "recency"
        return next(name for name, s in FIXED_WINDOWS.items() if s == self.window_s)


@dataclass(frozen=True, slots=True)
class CapClass:
    """What a cap class sets together (docs/fcap.md, "Cap classes")."""

    max_stale_s: int
    """How old a count the bidder may act on: a worker that read a campaign under its
    caps for a person does not read them again for that long (0: every request reads)."""
    on_store_error: str
    count_on: str


CAP_CLASSES = {
    "loose": CapClass(max_stale_s=30, on_store_error="open", count_on="win"),
    "standard": CapClass(max_stale_s=0, on_store_error="open", count_on="win"),
    "tight": CapClass(max_stale_s=0, on_store_error="closed", count_on="win"),
    "strict": CapClass(max_stale_s=0, on_store_error="closed", count_on="bid"),
}
"""Named cap classes, loosest first."""
CAP_FALLBACKS = ("none", "household", "ip")
"""What per-user caps count under when the request has no user key, or the identity
graph's confidence in it is below its threshold (docs/fcap.md, "Fallback keys")."""


def class_of_flags(count_on: str, on_store_error: str) -> str:
    """The class the old flags map onto: reserve-at-bid is strict, fail-closed tight."""
    if count_on == "bid":
        return "strict"
    return "tight" if on_store_error == "closed" else "standard"


@dataclass(frozen=True, slots=True)
class CapPolicy:
    count_on: str = "win"
    """'win' (count delivered wins) or 'bid' (reserve a slot when bidding; strict)."""
    on_store_error: str = "open"
    """'open' (bid when the counters cannot be read) or 'closed' (do not)."""
    impressions: str = "delivered"
    """'delivered' or 'viewable': which impressions count against the caps."""
    cap_class: str = "standard"
    """The named class the policy starts from; ``count_on`` and ``on_store_error`` given
    in the file override its parts."""
    max_stale_s: int = 0
    """From the class: how stale a count the bidder may act on."""
    fallback: str = "none"
    """One of ``CAP_FALLBACKS``: 'household' or 'ip' caps a request without a usable user
    key under that coarser key; 'none' leaves it to ``on_store_error``."""

    @classmethod
    def of_class(
        cls, name: str, impressions: str = "delivered", fallback: str = "none"
    ) -> CapPolicy:
        parts = CAP_CLASSES[name]
        return cls(
            count_on=parts.count_on,
            on_store_error=parts.on_store_error,
            impressions=impressions,
            cap_class=name,
            max_stale_s=parts.max_stale_s,
            fallback=fallback,
        )


@dataclass(frozen=True, slots=True)
class Targeting:
    countries: frozenset[str] | None = None
    """ISO alpha-3; None is any country, including unknown."""
    device_types: frozenset[int] | None = None
    channels: frozenset[str] | None = None
    allow_domains: frozenset[str] = frozenset()
    block_domains: frozenset[str] = frozenset()
    allow_bundles: frozenset[str] = frozenset()
    block_bundles: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Campaign:
    id: str
    advertiser: str
    daily_budget_micros: int
    base_bid_cpm_micros: int
    max_bid_cpm_micros: int
    creatives: tuple[Creative, ...]
    status: str = "active"
    currency: str = "USD"
    targeting: Targeting = Targeting()
    frequency_caps: tuple[FrequencyCap, ...] = ()
    cap_policy: CapPolicy = CapPolicy()
    pacing_curve: str | tuple[float, ...] = "default"
    """'default', a curve name, or 24 hourly weights (not normalized)."""
    deals: tuple[str, ...] = ()
    """Deal ids this campaign may bid on in private auctions."""
    supply_policy: str = "lenient"
    """'lenient' or 'strict': how hard stage 4 checks the supply chain (docs/supply.md)."""
    click_value_micros: int | None = None
    """What a click is worth to the advertiser; with a model, the bid is
    click value x P(click) x 1000 (a CPM). None: the base bid, unscored."""

    @property
    def active(self) -> bool:
        return self.status == "active"


def normalize_domain(value: str) -> str:
    """Lower case, without one leading 'www.': how both campaigns and requests compare."""
    value = value.lower()
    return value[4:] if value.startswith("www.") else value
