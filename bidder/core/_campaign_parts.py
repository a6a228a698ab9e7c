"""Validation of a campaign document's parts: creatives, frequency caps, cap policy.

Each function reads one part from the campaign's ``Obj``, records every problem under
the part's path and returns the normal form (``bidder.core.campaign_docs`` assembles
the campaign). ``ID`` and ``domain`` are shared with the campaign-level checks.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import orjson

from bidder.core.campaigns import (
    CAP_CLASSES,
    CAP_FALLBACKS,
    CAP_SCOPES,
    FIXED_WINDOWS,
    FORMATS,
    MAX_ROLLING_HOURS,
    SERVE_MODES,
    CapPolicy,
    Creative,
    FrequencyCap,
    class_of_flags,
    normalize_domain,
)
from bidder.core.validation import Obj, Problems, check_int, check_pattern, check_str

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")
_IAB_CAT = re.compile(r"IAB[0-9]{1,2}(-[0-9]{1,3})?")
_ROLLING = re.compile(r"rolling:([0-9]{1,4})h")


def domain(value: Any, path: str, p: Problems) -> str:
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


def creatives(parent: Obj) -> tuple[Creative, ...]:
    items = parent.array("creatives")
    if not items:
        parent.missing("creatives", "must list at least one creative")
    found = tuple(_creative(value, path, parent.p) for path, value in items or ())
    seen: dict[str, int] = {}
    for n, creative in enumerate(found):
        if creative.id and creative.id in seen:
            also = f"creatives[{seen[creative.id]}]"
            parent.p.add(f"creatives[{n}].id", f"duplicate creative id (also {also})")
        seen.setdefault(creative.id, n)
    return found


def _creative(doc: Any, path: str, p: Problems) -> Creative:
    o = Obj(doc, path, p, _CREATIVE_FIELDS)
    fmt = o.string("format", choices=FORMATS)
    creative = Creative(
        id=check_pattern(o.string("id"), ID, o.at("id"), p, "a valid id"),
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
    return tuple(domain(v, path, o.p) for path, v in items or ())


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
_POLICY_FIELDS = ("class", "count_on", "on_store_error", "impressions", "fallback")


def frequency_caps(parent: Obj) -> tuple[FrequencyCap, ...]:
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


def cap_policy(parent: Obj) -> CapPolicy:
    """The named class, with the old flags (``count_on``, ``on_store_error``) overriding
    its parts; flags alone map onto the class they match (``class_of_flags``)."""
    if not parent.has("cap_policy"):
        return CapPolicy()
    o = Obj(parent.doc["cap_policy"], parent.at("cap_policy"), parent.p, _POLICY_FIELDS)
    count_on = o.string("count_on", "", ("win", "bid"))
    on_error = o.string("on_store_error", "", ("open", "closed"))
    impressions = o.string("impressions", "delivered", ("delivered", "viewable"))
    fallback = o.string("fallback", "none", CAP_FALLBACKS)
    if o.has("class"):
        name = o.string("class", "standard", tuple(CAP_CLASSES))
    else:  # the old flags, with their old defaults
        count_on, on_error = count_on or "win", on_error or "open"
        name = class_of_flags(count_on, on_error)
    fallback = fallback if fallback in CAP_FALLBACKS else "none"
    base = CapPolicy.of_class(name if name in CAP_CLASSES else "standard", impressions, fallback)
    return replace(
        base,
        count_on=count_on or base.count_on,
        on_store_error=on_error or base.on_store_error,
    )
