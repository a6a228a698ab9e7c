"""OpenRTB 2.5 / 2.6 BidRequest: shape check and one normalized, typed view.

Stage 1 of the hot path. The parser reads only the fields bidsim decides on,
checks their types strictly (a wrong type is an ``invalid`` no-bid, never a
crash later in the pipeline), and ignores everything else, because real
exchanges send plenty of extensions and legacy fields.

2.5 carried several objects under ``ext`` that 2.6 promoted (schain, gdpr,
consent, us_privacy, eids); both places are read and the 2.6 one wins, so the
rest of the bidder sees one shape. Money is kept in integer micros of the
stated currency: ``bidfloor`` 0.03 becomes ``bidfloor_micros`` 30_000.

The view is made of NamedTuples: immutable like frozen dataclasses, but built
about four times faster, which matters on a path that runs for every request.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

Size = tuple[int, int]


class InvalidRequest(ValueError):
    """The body is not a usable OpenRTB BidRequest; the message says why."""


class Banner(NamedTuple):
    sizes: tuple[Size, ...]
    """w/h first (when given), then format[] entries; may be empty for interstitials."""
    size_range: tuple[int, int, int, int] | None
    """(wmin, wmax, hmin, hmax) when the banner gives a flexible size instead."""
    battr: frozenset[int]


class Video(NamedTuple):
    mimes: frozenset[str]
    minduration: int | None
    maxduration: int | None
    w: int | None
    h: int | None
    battr: frozenset[int]


class Native(NamedTuple):
    battr: frozenset[int]


class Audio(NamedTuple):
    mimes: frozenset[str]
    battr: frozenset[int]


class Imp(NamedTuple):
    id: str
    banner: Banner | None
    video: Video | None
    native: Native | None
    audio: Audio | None
    bidfloor_micros: int
    bidfloorcur: str
    instl: bool
    private_auction: bool
    deal_ids: tuple[str, ...]
    tagid: str | None


class BidRequest(NamedTuple):
    id: str
    imps: tuple[Imp, ...]
    at: int
    """Auction type: 1 first price, 2 second price (the default)."""
    tmax_ms: int | None
    cur: tuple[str, ...]
    """Allowed bid currencies; empty means the exchange's default (USD)."""
    test: bool
    channel: str
    """'site', 'app', 'dooh' or 'none'."""
    domain: str | None
    """site.domain (or the page's host), lower case."""
    bundle: str | None
    publisher_id: str | None
    country: str | None
    """ISO-3166-1 alpha-3, upper case, from device.geo then user.geo."""
    devicetype: int | None
    ip: str | None
    ua: str | None
    ifa: str | None
    user_id: str | None
    buyeruid: str | None
    eids: tuple[dict[str, Any], ...]
    bcat: frozenset[str]
    badv: frozenset[str]
    bapp: frozenset[str]
    gdpr: bool | None
    consent: str | None
    coppa: bool
    us_privacy: str | None
    gpp: str | None
    schain: dict[str, Any] | None
    tid: str | None = None
    """The auction's transaction id (``source.tid``), shared by its copies through other
    SSPs; None when absent or empty. ``bidder.supply_path`` dedups on it."""


MAX_IMPS = 32


def parse_bid_request(body: bytes) -> BidRequest:
    """Decode and shape-check a request body; raises InvalidRequest."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequest("body is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidRequest("body is not a JSON object")
    return _request(doc)


def _request(doc: dict[str, Any]) -> BidRequest:
    get = doc.get
    req_id = _req_str(doc, "id", "request")
    imps = _imps(get("imp"))
    site, app, dooh = get("site"), get("app"), get("dooh")
    device, user, regs, source = get("device"), get("user"), get("regs"), get("source")
    # Checked inline, without a call per field: this runs for every request.
    if not (
        type(site) in _OBJECT and type(app) in _OBJECT and type(dooh) in _OBJECT
        and type(device) in _OBJECT and type(user) in _OBJECT
        and type(regs) in _OBJECT and type(source) in _OBJECT
    ):  # fmt: skip
        _reject_non_objects(doc)
    if site is not None and app is not None:
        raise InvalidRequest("request has both site and app")
    tmax, at = _int(doc, "tmax"), _int(doc, "at")
    if tmax is not None and tmax <= 0:
        raise InvalidRequest("tmax must be positive")
    user = user or _EMPTY
    country, devicetype, ip, ua, ifa, user_id, buyeruid, eids = _device(device or _EMPTY, user)
    bcat, badv, bapp = _blocklists(doc)
    gdpr, consent, coppa, us_privacy, gpp = _privacy(regs or _EMPTY, user)
    return BidRequest(
        id=req_id,
        imps=imps,
        at=2 if at is None else at,
        tmax_ms=tmax,
        cur=tuple(_str_list(doc, "cur")),
        test=_flag(doc, "test"),
        channel=_channel(site, app, dooh),
        domain=_domain(site),
        bundle=_lower(_str(app, "bundle")) if app is not None else None,
        publisher_id=_publisher_id(site if site is not None else app),
        country=country,
        devicetype=devicetype,
        ip=ip,
        ua=ua,
        ifa=ifa,
        user_id=user_id,
        buyeruid=buyeruid,
        eids=eids,
        bcat=bcat,
        badv=badv,
        bapp=bapp,
        gdpr=gdpr,
        consent=consent,
        coppa=coppa,
        us_privacy=us_privacy,
        gpp=gpp,
        schain=_schain(source) if source else None,
        tid=_tid(source, get("ext")),
    )


_SECTIONS = ("site", "app", "dooh", "device", "user", "regs", "source")


def _reject_non_objects(doc: dict[str, Any]) -> None:
    """The slow path of the inline check: raise naming the first section that isn't one."""
    for key in _SECTIONS:
        _obj(doc, key)


def _device(device: dict[str, Any], user: dict[str, Any]) -> tuple[Any, ...]:
    """country, devicetype, ip, ua, ifa, user_id, buyeruid, eids."""
    if not device and not user:
        return _NO_DEVICE
    user_ext = _obj(user, "ext") or _EMPTY
    return (
        _country(device, user),
        _int(device, "devicetype"),
        _str(device, "ip") or _str(device, "ipv6"),
        _str(device, "ua"),
        _str(device, "ifa") or None,
        _str(user, "id") or None,
        _str(user, "buyeruid") or None,
        tuple(_obj_list(user, "eids") or _obj_list(user_ext, "eids")),
    )


_NO_DEVICE = (None, None, None, None, None, None, None, ())


def _blocklists(doc: dict[str, Any]) -> tuple[frozenset[str], ...]:
    """bcat, badv (lower case), bapp."""
    if "bcat" not in doc and "badv" not in doc and "bapp" not in doc:
        return _NO_BLOCKLISTS
    return (
        frozenset(_str_list(doc, "bcat")),
        frozenset(d.lower() for d in _str_list(doc, "badv")),
        frozenset(_str_list(doc, "bapp")),
    )


_NO_BLOCKLISTS: tuple[frozenset[str], ...] = (frozenset(), frozenset(), frozenset())


def _privacy(regs: dict[str, Any], user: dict[str, Any]) -> tuple[Any, ...]:
    """gdpr, consent, coppa, us_privacy, gpp; the 2.6 location wins over 2.5's ext."""
    if not regs and "consent" not in user and "ext" not in user:
        return _NO_PRIVACY
    regs_ext, user_ext = _obj(regs, "ext") or _EMPTY, _obj(user, "ext") or _EMPTY
    gdpr = regs.get("gdpr")
    return (
        _gdpr(gdpr if gdpr is not None else regs_ext.get("gdpr")),
        _str(user, "consent") or _str(user_ext, "consent"),
        _flag(regs, "coppa"),
        _str(regs, "us_privacy") or _str(regs_ext, "us_privacy"),
        _str(regs, "gpp") or _str(regs_ext, "gpp"),
    )


_NO_PRIVACY = (None, None, False, None, None)


def _schain(source: dict[str, Any]) -> dict[str, Any] | None:
    return _obj(source, "schain") or _obj(_obj(source, "ext") or _EMPTY, "schain")


def _tid(source: dict[str, Any] | None, ext: Any) -> str | None:
    """``source.tid`` (2.5 and 2.6); else the pre-2.5 ``ext.source.tid``, read leniently:
    an extension's shape is nobody's contract, and the tid only serves dedup."""
    tid = _str(source, "tid") if source else None
    if tid is None and type(ext) is dict:
        legacy = ext.get("source")
        if type(legacy) is dict and type(legacy.get("tid")) is str:
            tid = legacy["tid"]
    return tid or None


def auction_source(doc: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(tid, schain) of a decoded request, read as the parser reads them but without the
    full parse (about 4x cheaper: the replay report reads every request); (None, None)
    where the parser would refuse the request's source."""
    source = doc.get("source") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(source, dict | None):
        return None, None
    try:
        return _tid(source, doc.get("ext")), _schain(source) if source else None
    except InvalidRequest:
        return None, None


def _imps(value: Any) -> tuple[Imp, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("imp must be a non-empty array")
    if len(value) > MAX_IMPS:
        raise InvalidRequest(f"more than {MAX_IMPS} imps")
    imps = tuple([_imp(item, n) for n, item in enumerate(value)])
    if len({imp.id for imp in imps}) != len(imps):
        raise InvalidRequest("imp ids are not unique")
    return imps


def _imp(doc: Any, n: int) -> Imp:
    if not isinstance(doc, dict):
        raise InvalidRequest(f"imp[{n}] is not an object")
    where = f"imp[{n}]"
    instl = _flag(doc, "instl")
    banner, video = _obj(doc, "banner"), _obj(doc, "video")
    native, audio = _obj(doc, "native"), _obj(doc, "audio")
    if banner is None and video is None and native is None and audio is None:
        raise InvalidRequest(f"{where} has no banner, video, native or audio")
    parsed_banner = _banner(banner, instl) if banner is not None else None
    if (
        parsed_banner is None
        and banner is not None
        and video is None
        and native is None
        and audio is None
    ):
        raise InvalidRequest(f"{where}.banner has no size")
    floor = _num(doc, "bidfloor") or 0.0
    if floor < 0:
        raise InvalidRequest(f"{where}.bidfloor is negative")
    pmp = _obj(doc, "pmp") or {}
    return Imp(
        id=_req_str(doc, "id", where),
        banner=parsed_banner,
        video=_video(video) if video is not None else None,
        native=_native(native, where) if native is not None else None,
        audio=Audio(frozenset(_str_list(audio, "mimes")), _battr(audio))
        if audio is not None
        else None,
        bidfloor_micros=round(floor * 1_000_000),
        bidfloorcur=(_str(doc, "bidfloorcur") or "USD").upper(),
        instl=instl,
        private_auction=_flag(pmp, "private_auction"),
        deal_ids=tuple(_req_str(d, "id", f"{where}.pmp.deals[]") for d in _obj_list(pmp, "deals")),
        tagid=_str(doc, "tagid"),
    )


def _banner(doc: dict[str, Any], instl: bool) -> Banner | None:
    """The banner, or None when it states no size and the imp is not an interstitial."""
    sizes: list[Size] = []
    w, h = _int(doc, "w"), _int(doc, "h")
    if w and h:
        sizes.append((w, h))
    for fmt in _obj_list(doc, "format"):
        fw, fh = _int(fmt, "w"), _int(fmt, "h")
        if fw and fh and (fw, fh) not in sizes:
            sizes.append((fw, fh))
    if doc.get("format") == []:  # null is absent, like every other field
        raise InvalidRequest("banner.format is empty")
    size_range = _size_range(doc)
    # An interstitial may leave the size to the device; any other banner must say.
    if not sizes and size_range is None and not instl:
        return None
    return Banner(sizes=tuple(sizes), size_range=size_range, battr=_battr(doc))


def _size_range(doc: dict[str, Any]) -> tuple[int, int, int, int] | None:
    wmax, hmax = _int(doc, "wmax"), _int(doc, "hmax")
    if not wmax or not hmax:
        return None
    return (_int(doc, "wmin") or 0, wmax, _int(doc, "hmin") or 0, hmax)


def _video(doc: dict[str, Any]) -> Video:
    return Video(
        mimes=frozenset(_str_list(doc, "mimes")),
        minduration=_int(doc, "minduration"),
        maxduration=_int(doc, "maxduration"),
        w=_int(doc, "w"),
        h=_int(doc, "h"),
        battr=_battr(doc),
    )


def _audio(doc: dict[str, Any]) -> Audio:
    return Audio(mimes=frozenset(_str_list(doc, "mimes")), battr=_battr(doc))


def _native(doc: dict[str, Any], where: str) -> Native:
    # The spec says a string; several exchanges send the object itself. Both are
    # accepted; the assets inside are not needed until native creatives are assembled.
    if not isinstance(doc.get("request"), str | dict):
        raise InvalidRequest(f"{where}.native.request must be a string")
    return Native(battr=_battr(doc))


def _channel(site: Any, app: Any, dooh: Any) -> str:
    if site is not None:
        return "site"
    if app is not None:
        return "app"
    return "dooh" if dooh is not None else "none"


def _domain(site: dict[str, Any] | None) -> str | None:
    if site is None:
        return None
    domain = _str(site, "domain") or _page_host(_str(site, "page") or "")
    return _lower(domain)


def _page_host(page: str) -> str | None:
    """The host of scheme://user@host:port/path?query#fragment (every part optional)."""
    rest = page.split("://", 1)[-1]
    for end in "/?#":
        rest = rest.split(end, 1)[0]
    return rest.rsplit("@", 1)[-1].split(":", 1)[0] or None


def _publisher_id(parent: dict[str, Any] | None) -> str | None:
    publisher = _obj(parent, "publisher") if parent is not None else None
    return _str(publisher, "id") if publisher is not None else None


def _country(device: dict[str, Any], user: dict[str, Any]) -> str | None:
    for parent in (device, user):
        geo = _obj(parent, "geo")
        country = _str(geo, "country") if geo is not None else None
        if country:
            return country.upper()
    return None


def _gdpr(value: Any) -> bool | None:
    if value is None:
        return None
    if value in (0, 1) and not isinstance(value, bool | float):
        return value == 1
    raise InvalidRequest("regs.gdpr must be 0 or 1")


def _battr(doc: dict[str, Any]) -> frozenset[int]:
    values = _int_list(doc, "battr")
    return frozenset(values) if values else _NO_ATTRS


_NO_ATTRS: frozenset[int] = frozenset()


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None


# Typed field readers: absent (or JSON null) is None; a present value of the wrong type
# is an InvalidRequest naming the field.

_EMPTY: dict[str, Any] = {}
_OBJECT = frozenset({dict, type(None)})


def _obj(doc: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = doc.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise InvalidRequest(f"{key} must be an object")


def _str(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is None or isinstance(value, str):
        return value
    raise InvalidRequest(f"{key} must be a string")


def _req_str(doc: Any, key: str, where: str) -> str:
    value = doc.get(key) if isinstance(doc, dict) else None
    if isinstance(value, str) and value:
        return value
    raise InvalidRequest(f"{where}.{key} must be a non-empty string")


def _int(doc: dict[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InvalidRequest(f"{key} must be an integer")


def _num(doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        if abs(value) > 1e9:
            raise InvalidRequest(f"{key} is out of range")
        return float(value)
    raise InvalidRequest(f"{key} must be a number")


def _flag(doc: dict[str, Any], key: str) -> bool:
    value = _int(doc, key)
    return bool(value)


def _str_list(doc: dict[str, Any], key: str) -> list[str]:
    return _list_of(doc, key, str)


def _int_list(doc: dict[str, Any], key: str) -> list[int]:
    return _list_of(doc, key, int)


def _obj_list(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return _list_of(doc, key, dict)


def _list_of(doc: dict[str, Any], key: str, kind: type) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    # type() rather than isinstance(): a JSON true must not pass as the integer 1.
    if type(value) is list and all(type(v) is kind for v in value):
        return value
    raise InvalidRequest(f"{key} must be an array of {_PLURALS[kind]}")


_PLURALS = {str: "strings", int: "integers", dict: "objects"}
