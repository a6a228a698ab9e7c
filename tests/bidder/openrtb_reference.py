"""A reference judgement of BidRequests, written plainly over the decoded JSON.

The oracle of the differential property tests of ``bidder.openrtb.request``: the schema below
says which fields bidsim reads and their types, ``reference_view`` says whether a
request must be accepted and, if so, the view the parser must build, as nested dicts.
It shares no code with the parser and cares nothing for speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_IMPS = 32
INT64 = range(-(2**63), 2**63)

STR, INT, FLOOR, TMAX, GDPR, OBJECT, STR_OR_OBJECT = (
    "str", "int", "floor", "tmax", "gdpr", "object", "str or object"
)  # fmt: skip
LENIENT = "anything"
"""The request's own ``ext``: read for a legacy tid, never a reason to refuse."""


@dataclass(frozen=True)
class Ext:
    """A value inside an ``ext``: typed only when read (its 2.6 location is empty)."""

    kind: Any


Schema = dict[str, Any]

FORMAT: Schema = {"w": INT, "h": INT}
BANNER: Schema = {
    "w": INT, "h": INT, "format": [FORMAT], "wmin": INT, "wmax": INT, "hmin": INT,
    "hmax": INT, "battr": [INT],
}  # fmt: skip
VIDEO: Schema = {
    "mimes": [STR], "minduration": INT, "maxduration": INT, "w": INT, "h": INT,
    "battr": [INT],
}  # fmt: skip
NATIVE: Schema = {"request": STR_OR_OBJECT, "battr": [INT]}
AUDIO: Schema = {"mimes": [STR], "battr": [INT]}
PMP: Schema = {"private_auction": INT, "deals": [{"id": STR}]}
IMP: Schema = {
    "id": STR, "banner": BANNER, "video": VIDEO, "native": NATIVE, "audio": AUDIO,
    "bidfloor": FLOOR, "bidfloorcur": STR, "instl": INT, "pmp": PMP, "tagid": STR,
}  # fmt: skip
PUBLISHER: Schema = {"id": STR}
GEO: Schema = {"country": STR}
DEVICE: Schema = {
    "geo": GEO, "devicetype": INT, "ip": STR, "ipv6": STR, "ua": STR, "ifa": STR,
}  # fmt: skip
USER: Schema = {
    "id": STR, "buyeruid": STR, "consent": STR, "geo": GEO, "eids": [OBJECT],
    "ext": {"consent": Ext(STR), "eids": Ext([OBJECT])},
}  # fmt: skip
REGS: Schema = {
    "gdpr": GDPR, "coppa": INT, "us_privacy": STR, "gpp": STR,
    "ext": {"gdpr": Ext(GDPR), "us_privacy": Ext(STR), "gpp": Ext(STR)},
}  # fmt: skip
SOURCE: Schema = {"tid": STR, "schain": OBJECT, "ext": Ext({"schain": OBJECT})}
REQUEST: Schema = {
    "id": STR, "imp": [IMP], "at": INT, "tmax": TMAX, "cur": [STR], "test": INT,
    "site": {"domain": STR, "page": STR, "publisher": PUBLISHER},
    "app": {"bundle": STR, "publisher": PUBLISHER},
    "dooh": {}, "device": DEVICE, "user": USER,
    "bcat": [STR], "badv": [STR], "bapp": [STR],
    "regs": REGS, "source": SOURCE, "ext": LENIENT,
}  # fmt: skip


def typed(value: Any, kind: Any) -> bool:
    """Whether ``value`` (present or null) has the type ``kind`` says; an ``Ext`` or
    lenient value always passes here, it is checked where it is read."""
    if value is None or isinstance(kind, Ext) or kind == LENIENT:
        return True
    if isinstance(kind, dict):
        return type(value) is dict and all(typed(value.get(k), kind[k]) for k in kind)
    if isinstance(kind, list):
        return type(value) is list and all(v is not None and typed(v, kind[0]) for v in value)
    return _SCALAR[kind](value)


_SCALAR = {
    STR: lambda v: type(v) is str,
    INT: lambda v: type(v) is int and v in INT64,
    FLOOR: lambda v: type(v) in (int, float) and 0 <= v <= 1e9,
    TMAX: lambda v: type(v) is int and 0 < v < 2**63,
    GDPR: lambda v: type(v) is int and v in (0, 1),
    OBJECT: lambda v: type(v) is dict,
    STR_OR_OBJECT: lambda v: type(v) in (str, dict),
}


class _Refused(Exception):
    pass


def reference_view(doc: Any) -> dict[str, Any] | None:
    """The view the parser must build from ``doc``, or None where it must refuse it."""
    if type(doc) is not dict or not typed(doc, REQUEST):
        return None
    try:
        return _view(doc)
    except _Refused:
        return None


def _require(condition: bool) -> None:
    if not condition:
        raise _Refused


def _read(parent: dict[str, Any], key: str, kind: Any) -> Any:
    """An extension's value, typed now that it is read."""
    value = parent.get(key)
    _require(typed(value, kind))
    return value


def _view(doc: dict[str, Any]) -> dict[str, Any]:
    _require(bool(doc.get("id")))
    imps = doc.get("imp") or []
    _require(0 < len(imps) <= MAX_IMPS)
    imp_views = [_imp(imp) for imp in imps]
    _require(len({imp["id"] for imp in imp_views}) == len(imp_views))
    site, app = doc.get("site"), doc.get("app")
    _require(site is None or app is None)
    device, user = doc.get("device") or {}, doc.get("user") or {}
    regs, source = doc.get("regs"), doc.get("source")
    user_ext = user.get("ext") or {}
    at = doc.get("at")
    return {
        "id": doc["id"],
        "imps": tuple(imp_views),
        "at": 2 if at is None else at,
        "tmax_ms": doc.get("tmax"),
        "cur": tuple(doc.get("cur") or ()),
        "test": bool(doc.get("test")),
        "channel": next((c for c in ("site", "app", "dooh") if doc.get(c) is not None), "none"),
        "domain": _domain(site) if site is not None else None,
        "bundle": _lower(app.get("bundle")) if app is not None else None,
        "publisher_id": _publisher_id(site if site is not None else app),
        "country": _country(device, user),
        "devicetype": device.get("devicetype"),
        "ip": device.get("ip") or device.get("ipv6"),
        "ua": device.get("ua"),
        "ifa": device.get("ifa") or None,
        "user_id": user.get("id") or None,
        "buyeruid": user.get("buyeruid") or None,
        "eids": tuple(user.get("eids") or _read(user_ext, "eids", [OBJECT]) or ()),
        "bcat": frozenset(doc.get("bcat") or ()),
        "badv": frozenset(d.lower() for d in doc.get("badv") or ()),
        "bapp": frozenset(doc.get("bapp") or ()),
        "consent": user.get("consent") or _read(user_ext, "consent", STR),
        **_regs(regs),
        "schain": _schain(source) if source is not None else None,
        "tid": _tid(source, doc.get("ext")),
    }


def _domain(site: dict[str, Any]) -> str | None:
    domain = site.get("domain")
    if not domain:
        page = site.get("page") or ""
        if "://" in page:
            page = page[page.index("://") + 3 :]
        for end in "/?#":
            page = page.split(end)[0]
        domain = page.split("@")[-1].split(":")[0]
    return _lower(domain)


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None


def _publisher_id(parent: dict[str, Any] | None) -> str | None:
    publisher = (parent or {}).get("publisher") or {}
    return publisher.get("id")


def _country(device: dict[str, Any], user: dict[str, Any]) -> str | None:
    for parent in (device, user):
        country = (parent.get("geo") or {}).get("country")
        if country:
            return country.upper()
    return None


def _regs(regs: dict[str, Any] | None) -> dict[str, Any]:
    regs = regs or {}
    ext = regs.get("ext") or {}
    gdpr = regs.get("gdpr")
    if gdpr is None:
        gdpr = _read(ext, "gdpr", GDPR)
    return {
        "gdpr": None if gdpr is None else gdpr == 1,
        "coppa": bool(regs.get("coppa")),
        "us_privacy": regs.get("us_privacy") or _read(ext, "us_privacy", STR),
        "gpp": regs.get("gpp") or _read(ext, "gpp", STR),
    }


def _schain(source: dict[str, Any]) -> dict[str, Any] | None:
    if source.get("schain"):
        return source["schain"]
    ext = _read(source, "ext", SOURCE["ext"].kind)
    return (ext or {}).get("schain")


def _tid(source: dict[str, Any] | None, ext: Any) -> str | None:
    tid = (source or {}).get("tid")
    if tid is None and type(ext) is dict:
        legacy = ext.get("source")
        if type(legacy) is dict and type(legacy.get("tid")) is str:
            tid = legacy["tid"]
    return tid or None


def _imp(imp: dict[str, Any]) -> dict[str, Any]:
    _require(bool(imp.get("id")))
    instl = bool(imp.get("instl"))
    banner = _banner(imp["banner"], instl) if imp.get("banner") is not None else None
    video, native, audio = imp.get("video"), imp.get("native"), imp.get("audio")
    _require(banner is not None or video is not None or native is not None or audio is not None)
    _require(native is None or native.get("request") is not None)
    pmp = imp.get("pmp") or {}
    deals = pmp.get("deals") or []
    _require(all(deal.get("id") for deal in deals))
    return {
        "id": imp["id"],
        "banner": banner,
        "video": None if video is None else _video(video),
        "native": None if native is None else {"battr": frozenset(native.get("battr") or ())},
        "audio": None if audio is None else _audio(audio),
        "bidfloor_micros": round(float(imp.get("bidfloor") or 0) * 1_000_000),
        "bidfloorcur": (imp.get("bidfloorcur") or "USD").upper(),
        "instl": instl,
        "private_auction": bool(pmp.get("private_auction")),
        "deal_ids": tuple(deal["id"] for deal in deals),
        "tagid": imp.get("tagid"),
    }


def _banner(banner: dict[str, Any], instl: bool) -> dict[str, Any] | None:
    _require(banner.get("format") != [])
    listed = [(banner.get("w"), banner.get("h"))]
    listed += [(f.get("w"), f.get("h")) for f in banner.get("format") or ()]
    sizes = tuple(dict.fromkeys((w, h) for w, h in listed if w and h))
    size_range = None
    if banner.get("wmax") and banner.get("hmax"):
        size_range = (
            banner.get("wmin") or 0,
            banner["wmax"],
            banner.get("hmin") or 0,
            banner["hmax"],
        )
    if not sizes and size_range is None and not instl:
        return None
    return {"sizes": sizes, "size_range": size_range, "battr": frozenset(banner.get("battr") or ())}


def _video(video: dict[str, Any]) -> dict[str, Any]:
    return {
        "mimes": frozenset(video.get("mimes") or ()),
        **{key: video.get(key) for key in ("minduration", "maxduration", "w", "h")},
        "battr": frozenset(video.get("battr") or ()),
    }


def _audio(audio: dict[str, Any]) -> dict[str, Any]:
    return {
        "mimes": frozenset(audio.get("mimes") or ()),
        "battr": frozenset(audio.get("battr") or ()),
    }
