"""Campaign documents both ways: the validating reader and the normal-form writer.

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
from pathlib import Path
from typing import Any, TypeVar

import orjson

from bidder.core._campaign_parts import ID, cap_policy, creatives, domain, frequency_caps
from bidder.core.campaigns import (
    CHANNELS,
    DEVICE_TYPES,
    FILE_VERSION,
    MAX_BID_CPM_MICROS,
    MAX_CLICK_VALUE_MICROS,
    MAX_DAILY_BUDGET_MICROS,
    STATUSES,
    SUPPLY_POLICIES,
    Campaign,
    CampaignError,
    Creative,
    FrequencyCap,
    Targeting,
)
from bidder.core.validation import Obj, Problems, check_pattern, check_str

_CURVE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_COUNTRY = re.compile(r"[A-Z]{3}")


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


# ------------------------------------------------------------------------- campaigns

_CAMPAIGN_FIELDS = (
    "id", "advertiser", "status", "daily_budget_micros", "currency", "base_bid_cpm_micros",
    "max_bid_cpm_micros", "targeting", "creatives", "frequency_caps", "cap_policy",
    "pacing_curve", "deals", "supply_policy", "click_value_micros",
)  # fmt: skip


def _campaign(doc: Any, p: Problems) -> Campaign:
    o = Obj(doc, "", p, _CAMPAIGN_FIELDS)
    cid = check_pattern(o.string("id"), ID, "id", p, "a valid id (letters, digits, . _ -)")
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
        creatives=creatives(o),
        frequency_caps=frequency_caps(o),
        cap_policy=cap_policy(o),
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
    return frozenset(domain(v, path, o.p) for path, v in o.array(key) or ())


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
            "class": c.cap_policy.cap_class,
            "count_on": c.cap_policy.count_on,
            "on_store_error": c.cap_policy.on_store_error,
            "impressions": c.cap_policy.impressions,
            "fallback": c.cap_policy.fallback,
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
