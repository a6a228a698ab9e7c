"""Campaigns: the typed model and its validating loader.

A campaign file is JSON (no comments) ``{"version": 1, "campaigns": [...]}``. The
DynamoDB store keeps each campaign object verbatim as one document, so the file and
the store go through the same validator (``campaigns_from_docs``). Validation never
stops at the first problem: every problem is collected, each named by campaign and
field path, and raised together as one ``CampaignError``, so a file is fixed in one
pass. Unknown fields are problems too: a typo must not silently drop a restriction.

Values are normalized on the way in (country codes upper case, domains lower case
without a leading ``www.``, device type names to OpenRTB codes, curve numbers to
floats) and ``campaign_to_doc`` writes that normal form, so doc -> campaign -> doc
is stable. The format is documented for users in ``docs/campaigns.md``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from bidder.core.validation import Obj, Problems, check_int, check_pattern, check_str

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
MAX_CLICK_VALUE_MICROS = 10_000_000_000
"""USD 10,000 per click."""
"""USD 10 million a day: same reason."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CURVE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_COUNTRY = re.compile(r"[A-Z]{3}")
_DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")
_IAB_CAT = re.compile(r"IAB[0-9]{1,2}(-[0-9]{1,3})?")
_ROLLING = re.compile(r"rolling:([0-9]{1,4})h")


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
class CapPolicy:
    count_on: str = "win"
    """'win' (count delivered wins) or 'bid' (reserve a slot when bidding; strict)."""
    on_store_error: str = "open"
    """'open' (bid when the counters cannot be read) or 'closed' (do not)."""
    impressions: str = "delivered"
    """'delivered' or 'viewable': which impressions count against the caps."""


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


# ---------------------------------------------------------------------------- loading


def load_campaign_file(path: str | os.PathLike[str]) -> list[Campaign]:
    """Read and validate a campaign file; raises CampaignError naming the path."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CampaignError(["file not found"], source) from None
    except OSError as exc:
        raise CampaignError([f"cannot read the file: {exc.strerror or exc}"], source) from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CampaignError([_json_problem(exc)], source) from None
    if not isinstance(doc, dict):
        raise CampaignError(['must be a JSON object {"version": 1, "campaigns": [...]}'], source)
    problems: list[str] = []
    top = Obj(doc, "", Problems("", problems), ("version", "campaigns"))
    version = top.integer("version")
    if version and version != FILE_VERSION:
        top.p.add("version", f"unsupported version {version} (this bidsim reads {FILE_VERSION})")
    items = top.array("campaigns")
    if items is None:
        top.p.add("campaigns", "is required")
    campaigns = _campaigns([value for _, value in items or ()], problems)
    if problems:
        raise CampaignError(problems, source)
    return campaigns


def campaigns_from_docs(docs: Sequence[Any]) -> list[Campaign]:
    """Validate campaign documents (the objects of a file's ``campaigns`` array)."""
    problems: list[str] = []
    campaigns = _campaigns(docs, problems)
    if problems:
        raise CampaignError(problems)
    return campaigns


def _json_problem(exc: orjson.JSONDecodeError) -> str:
    text = exc.doc if isinstance(exc.doc, str) else ""
    near = text[exc.pos : exc.pos + 1] if 0 <= exc.pos < len(text) else ""
    hint = " (comments are not allowed in campaign files)" if near in ("/", "#") else ""
    return f"line {exc.lineno} column {exc.colno}: not valid JSON: {exc.msg}{hint}"


def _campaigns(docs: Sequence[Any], problems: list[str]) -> list[Campaign]:
    campaigns: list[Campaign] = []
    seen: dict[str, int] = {}
    for n, doc in enumerate(docs):
        cid = doc.get("id") if isinstance(doc, dict) else None
        cid = cid if isinstance(cid, str) and cid else None
        p = Problems(f"campaigns[{n}]" + (f" (id {cid!r})" if cid else ""), problems)
        before = len(problems)
        campaign = _campaign(doc, p)
        if cid is not None and cid in seen:
            p.add("id", f"duplicate campaign id (also campaigns[{seen[cid]}])")
        elif cid is not None:
            seen[cid] = n
        if len(problems) == before:
            campaigns.append(campaign)
    return campaigns


def normalize_domain(value: str) -> str:
    """Lower case, without one leading 'www.': how both campaigns and requests compare."""
    value = value.lower()
    return value[4:] if value.startswith("www.") else value


# ------------------------------------------------------------------------- campaigns

_CAMPAIGN_FIELDS = (
    "id", "advertiser", "status", "daily_budget_micros", "currency", "base_bid_cpm_micros",
    "max_bid_cpm_micros", "targeting", "creatives", "frequency_caps", "cap_policy",
    "pacing_curve", "deals", "supply_policy", "click_value_micros",
)  # fmt: skip


def _campaign(doc: Any, p: Problems) -> Campaign:
    o = Obj(doc, "", p, _CAMPAIGN_FIELDS)
    cid = check_pattern(o.string("id"), _ID, "id", p, "a valid id (letters, digits, . _ -)")
    base = o.integer("base_bid_cpm_micros", 1, MAX_BID_CPM_MICROS)
    top = o.integer("max_bid_cpm_micros", 1, MAX_BID_CPM_MICROS)
    if base and top and base > top:
        p.add("base_bid_cpm_micros", f"{base:_} is above max_bid_cpm_micros {top:_}")
    return Campaign(
        id=cid,
        advertiser=o.string("advertiser"),
        status=o.string("status", "active", STATUSES),
        daily_budget_micros=o.integer("daily_budget_micros", 1, MAX_DAILY_BUDGET_MICROS),
        currency=_currency(o),
        base_bid_cpm_micros=base,
        max_bid_cpm_micros=top,
        targeting=_targeting(o),
        creatives=_creatives(o),
        frequency_caps=_frequency_caps(o),
        cap_policy=_cap_policy(o),
        pacing_curve=_pacing_curve(o),
        deals=_unique(o, "deals", "deal id"),
        supply_policy=o.string("supply_policy", "lenient", SUPPLY_POLICIES),
        click_value_micros=o.opt_integer("click_value_micros", 1, MAX_CLICK_VALUE_MICROS),
    )


def _currency(o: Obj) -> str:
    value = o.string("currency", "USD")
    if value and value != "USD":
        o.p.add("currency", f"{value!r} is not supported: only 'USD' (no currency conversion yet)")
    return value


def _unique(o: Obj, key: str, what: str) -> tuple[str, ...]:
    seen: list[str] = []
    for path, value in o.array(key) or ():
        text = check_str(value, path, o.p)
        if text in seen:
            o.p.add(path, f"duplicate {what} {text!r}")
        seen.append(text)
    return tuple(seen)


def _pacing_curve(o: Obj) -> str | tuple[float, ...]:
    value, path = o.doc.get("pacing_curve"), o.at("pacing_curve")
    if value is None:
        return "default"
    if isinstance(value, str):
        return check_pattern(value, _CURVE_NAME, path, o.p, "a curve name ([a-z0-9_-])")
    numbers = value if isinstance(value, list) else []
    if len(numbers) != 24 or not all(_is_weight(v) for v in numbers):
        o.p.add(path, "must be a curve name or an array of 24 non-negative numbers")
        return "default"
    if sum(numbers) <= 0:
        o.p.add(path, "the 24 hourly weights must not all be zero")
    return tuple(float(v) for v in numbers)


def _is_weight(value: Any) -> bool:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return is_number and math.isfinite(value) and value >= 0


# ------------------------------------------------------------------------- targeting

_T = TypeVar("_T")
_Item = Callable[[Any, str, Problems], _T]
"""Validates one array item at a path, recording problems; returns the normal form."""

_TARGETING_FIELDS = (
    "countries", "device_types", "channels", "allow_domains", "block_domains",
    "allow_bundles", "block_bundles",
)  # fmt: skip


def _targeting(parent: Obj) -> Targeting:
    if not parent.has("targeting"):
        return Targeting()
    o = Obj(parent.doc["targeting"], parent.at("targeting"), parent.p, _TARGETING_FIELDS)
    return Targeting(
        countries=_restriction(o, "countries", _country),
        device_types=_restriction(o, "device_types", _device_type),
        channels=_restriction(o, "channels", _channel),
        allow_domains=_domains(o, "allow_domains"),
        block_domains=_domains(o, "block_domains"),
        allow_bundles=frozenset(v.lower() for v in o.strings("allow_bundles")),
        block_bundles=frozenset(v.lower() for v in o.strings("block_bundles")),
    )


def _restriction(o: Obj, key: str, item: _Item[_T]) -> frozenset[_T] | None:
    """An 'any unless listed' set: absent is None; an empty list is a mistake."""
    items = o.array(key)
    if items is None:
        return None
    if not items and isinstance(o.doc[key], list):
        o.p.add(o.at(key), "must not be empty (leave the field out to allow any)")
    return frozenset(item(value, path, o.p) for path, value in items)


def _country(value: Any, path: str, p: Problems) -> str:
    text = check_str(value, path, p).upper()
    return check_pattern(text, _COUNTRY, path, p, "an ISO 3166-1 alpha-3 country code")


def _device_type(value: Any, path: str, p: Problems) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value in DEVICE_TYPES.values():
        return value
    if isinstance(value, str) and value in DEVICE_TYPES:
        return DEVICE_TYPES[value]
    p.add(path, f"unknown device type {value!r} (names: {', '.join(DEVICE_TYPES)}; or 1-8)")
    return 0


def _channel(value: Any, path: str, p: Problems) -> str:
    return check_str(value, path, p, CHANNELS)


def _domains(o: Obj, key: str) -> frozenset[str]:
    return frozenset(_domain(v, path, o.p) for path, v in o.array(key) or ())


def _domain(value: Any, path: str, p: Problems) -> str:
    text = normalize_domain(check_str(value, path, p))
    return check_pattern(text, _DOMAIN, path, p, "a domain name (no scheme, port or path)")


# ------------------------------------------------------------------------- creatives

_CREATIVE_FIELDS = (
    "id", "format", "w", "h", "adomain", "cat", "attr", "serve", "markup", "mime",
    "duration_s",
)  # fmt: skip
_ALLOWED_BY_FORMAT = {
    "banner": {"w", "h"},
    "video": {"w", "h", "mime", "duration_s"},
    "audio": {"mime", "duration_s"},
    "native": set(),
}
_REQUIRED_BY_FORMAT = {
    "banner": ("w", "h"),
    "video": ("mime", "duration_s"),
    "audio": ("mime", "duration_s"),
    "native": (),
}


def _creatives(parent: Obj) -> tuple[Creative, ...]:
    items = parent.array("creatives")
    if not items:
        parent.missing("creatives", "must list at least one creative")
    creatives = tuple(_creative(value, path, parent.p) for path, value in items or ())
    seen: dict[str, int] = {}
    for n, creative in enumerate(creatives):
        if creative.id and creative.id in seen:
            also = f"creatives[{seen[creative.id]}]"
            parent.p.add(f"creatives[{n}].id", f"duplicate creative id (also {also})")
        seen.setdefault(creative.id, n)
    return creatives


def _creative(doc: Any, path: str, p: Problems) -> Creative:
    o = Obj(doc, path, p, _CREATIVE_FIELDS)
    fmt = o.string("format", choices=FORMATS)
    creative = Creative(
        id=check_pattern(o.string("id"), _ID, o.at("id"), p, "a valid id"),
        format=fmt,
        markup=o.string("markup"),
        adomain=_adomain(o),
        w=o.opt_integer("w", 1, 10_000),
        h=o.opt_integer("h", 1, 10_000),
        cat=tuple(_category(v, at, p) for at, v in o.array("cat") or ()),
        attr=frozenset(check_int(v, at, p, 1, 17) for at, v in o.array("attr") or ()),
        serve=o.string("serve", "adm", SERVE_MODES),
        mime=_mime(o, fmt),
        duration_s=o.opt_integer("duration_s", 1, 3_600),
    )
    if fmt in FORMATS:
        _check_format_fields(o, fmt)
        _check_markup(o, fmt, creative.markup)
    return creative


def _adomain(o: Obj) -> tuple[str, ...]:
    items = o.array("adomain")
    if not items:
        o.missing("adomain", "must list at least one advertiser domain")
    return tuple(_domain(v, path, o.p) for path, v in items or ())


def _category(value: Any, path: str, p: Problems) -> str:
    text = check_str(value, path, p).upper()
    return check_pattern(text, _IAB_CAT, path, p, "an IAB category like 'IAB7' or 'IAB7-39'")


def _mime(o: Obj, fmt: str) -> str | None:
    mime = o.opt_string("mime")
    if mime and fmt in ("video", "audio") and not mime.startswith(f"{fmt}/"):
        o.p.add(o.at("mime"), f"{mime!r} is not a {fmt} MIME type")
    return mime


def _check_format_fields(o: Obj, fmt: str) -> None:
    for key in ("w", "h", "mime", "duration_s"):
        if o.has(key) and key not in _ALLOWED_BY_FORMAT[fmt]:
            o.p.add(o.at(key), f"not used by {fmt} creatives")
    for key in _REQUIRED_BY_FORMAT[fmt]:
        if not o.has(key):
            o.p.add(o.at(key), f"is required for {fmt} creatives")
    if fmt == "video" and o.has("w") != o.has("h"):
        o.p.add(o.at("w" if o.has("h") else "h"), "video w and h go together")


def _check_markup(o: Obj, fmt: str, markup: str) -> None:
    if not markup:
        return
    if fmt in ("video", "audio") and "<VAST" not in markup:
        o.p.add(o.at("markup"), f"{fmt} markup must be a VAST document")
    elif fmt == "native" and not _is_json_object(markup):
        o.p.add(o.at("markup"), "native markup must be a native response JSON object string")


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


# -------------------------------------------------------------- caps and cap policy

_CAP_FIELDS = ("scope", "window", "limit", "min_gap_s")
_POLICY_FIELDS = ("count_on", "on_store_error", "impressions")


def _frequency_caps(parent: Obj) -> tuple[FrequencyCap, ...]:
    caps: list[FrequencyCap] = []
    for path, value in parent.array("frequency_caps") or ():
        cap = _frequency_cap(value, path, parent.p)
        same = (cap.scope, cap.window_kind, cap.window_s)
        if cap.scope and any((c.scope, c.window_kind, c.window_s) == same for c in caps):
            parent.p.add(path, "duplicate cap: same scope and window as an earlier one")
        caps.append(cap)
    return tuple(caps)


def _frequency_cap(doc: Any, path: str, p: Problems) -> FrequencyCap:
    o = Obj(doc, path, p, _CAP_FIELDS)
    scope = o.string("scope", choices=CAP_SCOPES)
    kind, seconds = _window(o)
    if kind == "recency":
        if o.has("limit"):
            p.add(o.at("limit"), "not used by a recency cap (it allows one per min_gap_s)")
        gap = o.integer("min_gap_s", 1, FIXED_WINDOWS["month"])
        return FrequencyCap(scope=scope, window_kind=kind, window_s=gap, limit=None)
    if o.has("min_gap_s"):
        p.add(o.at("min_gap_s"), "only used by window 'recency'")
    return FrequencyCap(scope=scope, window_kind=kind, window_s=seconds, limit=o.integer("limit"))


def _window(o: Obj) -> tuple[str, int]:
    window = o.string("window")
    if window in FIXED_WINDOWS:
        return "fixed", FIXED_WINDOWS[window]
    if window == "recency":
        return "recency", 0
    rolling = _ROLLING.fullmatch(window)
    if rolling and 1 <= int(rolling[1]) <= MAX_ROLLING_HOURS:
        return "rolling", int(rolling[1]) * 3_600
    if window:
        o.p.add(
            o.at("window"),
            f"unknown window {window!r} (hour, day, week, month, "
            f"rolling:<N>h with N 1-{MAX_ROLLING_HOURS}, or recency)",
        )
    return "fixed", FIXED_WINDOWS["day"]


def _cap_policy(parent: Obj) -> CapPolicy:
    if not parent.has("cap_policy"):
        return CapPolicy()
    o = Obj(parent.doc["cap_policy"], parent.at("cap_policy"), parent.p, _POLICY_FIELDS)
    return CapPolicy(
        count_on=o.string("count_on", "win", ("win", "bid")),
        on_store_error=o.string("on_store_error", "open", ("open", "closed")),
        impressions=o.string("impressions", "delivered", ("delivered", "viewable")),
    )


# -------------------------------------------------------------------------- to doc

_DEVICE_NAMES = {code: name for name, code in DEVICE_TYPES.items()}


def campaign_to_doc(c: Campaign) -> dict[str, Any]:
    """The campaign as a document; ``campaigns_from_docs([campaign_to_doc(c)]) == [c]``."""
    doc: dict[str, Any] = {
        "id": c.id,
        "advertiser": c.advertiser,
        "status": c.status,
        "currency": c.currency,
        "daily_budget_micros": c.daily_budget_micros,
        "base_bid_cpm_micros": c.base_bid_cpm_micros,
        "max_bid_cpm_micros": c.max_bid_cpm_micros,
        "targeting": _targeting_doc(c.targeting),
        "creatives": [_creative_doc(creative) for creative in c.creatives],
        "frequency_caps": [_cap_doc(cap) for cap in c.frequency_caps],
        "cap_policy": {
            "count_on": c.cap_policy.count_on,
            "on_store_error": c.cap_policy.on_store_error,
            "impressions": c.cap_policy.impressions,
        },
        "pacing_curve": c.pacing_curve if isinstance(c.pacing_curve, str) else [*c.pacing_curve],
        "deals": list(c.deals),
        "supply_policy": c.supply_policy,
    }
    if c.click_value_micros is not None:
        doc["click_value_micros"] = c.click_value_micros
    return doc


def _targeting_doc(t: Targeting) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if t.countries is not None:
        doc["countries"] = sorted(t.countries)
    if t.device_types is not None:
        doc["device_types"] = [_DEVICE_NAMES[code] for code in sorted(t.device_types)]
    if t.channels is not None:
        doc["channels"] = sorted(t.channels)
    for key in ("allow_domains", "block_domains", "allow_bundles", "block_bundles"):
        values: frozenset[str] = getattr(t, key)
        if values:
            doc[key] = sorted(values)
    return doc


def _creative_doc(c: Creative) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": c.id, "format": c.format}
    optional = {"w": c.w, "h": c.h, "mime": c.mime, "duration_s": c.duration_s}
    doc.update((key, value) for key, value in optional.items() if value is not None)
    doc.update(adomain=list(c.adomain), cat=list(c.cat), attr=sorted(c.attr))
    doc.update(serve=c.serve, markup=c.markup)
    return doc


def _cap_doc(cap: FrequencyCap) -> dict[str, Any]:
    doc: dict[str, Any] = {"scope": cap.scope, "window": cap.window}
    if cap.window_kind == "recency":
        doc["min_gap_s"] = cap.window_s
    else:
        doc["limit"] = cap.limit
    return doc
