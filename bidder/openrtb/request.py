"""OpenRTB 2.5 / 2.6 BidRequest: shape check and one normalized, typed view.

Stage 1 of the hot path. msgspec decodes the body straight into Structs of the fields
bidsim decides on (``bidder.openrtb.wire``), checking their types in C and skipping
everything else, because real exchanges send plenty of extensions and legacy fields.
A field bidsim reads must have its type wherever it appears (integers within 64 bits,
no ``true`` for 1 and no ``300.0`` for 300); JSON ``null`` is the same as absent; the
body must be UTF-8 throughout. This module then checks what types cannot say (a
non-empty id, 1 to ``MAX_IMPS`` imps with unique ids, a medium per imp, a size for a
lone banner, site or app but not both) and builds the view. Every refusal is an
``InvalidRequest`` whose message starts with the field's path (``imp[0].banner.w:
expected `int | null`, got `str```); the handler turns it into the ``invalid`` no-bid.
``docs/openrtb.md`` states these rules for the people who send requests.

2.5 carried several objects under ``ext`` that 2.6 promoted (schain, gdpr, consent,
us_privacy, eids, gpp); both places are read and the 2.6 one wins when it is non-empty,
so the rest of the bidder sees one shape. The 2.5 value is decoded, and its type
checked, only when it is needed. Money is kept in integer micros of the stated
currency: ``bidfloor`` 0.03 becomes ``bidfloor_micros`` 30_000.

The view (``bidder.openrtb.view``) is made of frozen msgspec Structs; the two large
ones, ``BidRequest`` and ``Imp``, are built with positional arguments, each commented
with its field: a keyword call of 28 arguments costs more than the Struct itself.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bidder.openrtb import wire
from bidder.openrtb.view import Audio, Banner, BidRequest, Imp, Native, Size, Video


class InvalidRequest(ValueError):
    """The body is not a usable OpenRTB BidRequest; the message says why."""


MAX_IMPS = 32

_DECODER = msgspec.json.Decoder(wire.Request)


def parse_bid_request(body: bytes) -> BidRequest:
    """Decode and shape-check a request body; raises InvalidRequest."""
    # msgspec checks the UTF-8 of the strings it decodes, not of those it skips.
    if not body.isascii():
        _check_utf8(body)
    try:
        doc = _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(_field_message(exc, "")) from None
    except (msgspec.DecodeError, RecursionError):  # too deep a nesting is no request
        raise InvalidRequest("body is not JSON") from None
    return _request(doc)


def _check_utf8(body: bytes) -> None:
    try:
        body.decode()
    except UnicodeDecodeError:
        raise InvalidRequest("body is not UTF-8") from None


def _field_message(exc: msgspec.ValidationError, prefix: str) -> str:
    """``imp[0].banner.w: expected `int | null`, got `str```, from msgspec's
    ``Expected `int | null`, got `str` - at `$.imp[0].banner.w```; ``prefix`` is the
    path of the decoded value in the request."""
    problem, _, path = str(exc).partition(" - at `$")
    where = (prefix + path.rstrip("`")).lstrip(".") or "request"
    return f"{where}: {problem[:1].lower()}{problem[1:]}"


def _request(doc: wire.Request) -> BidRequest:
    if not doc.id:
        raise InvalidRequest("id must be a non-empty string")
    imps = _imps(doc.imp)
    site, app, device, user, regs, source = (
        doc.site, doc.app, doc.device, doc.user, doc.regs, doc.source
    )  # fmt: skip
    if site is not None and app is not None:
        raise InvalidRequest("site and app are both present")
    country, devicetype, ip, ua, ifa = _device(device, user) if device or user else _NO_DEVICE
    gdpr, consent, coppa, us_privacy, gpp = _privacy(regs, user) if regs or user else _NO_PRIVACY
    at, badv = doc.at, doc.badv
    return BidRequest(
        doc.id,  # id
        imps,  # imps
        2 if at is None else at,  # at
        doc.tmax,  # tmax_ms
        doc.cur or (),  # cur
        bool(doc.test),  # test
        _channel(site, app, doc.dooh),  # channel
        _domain(site) if site is not None else None,  # domain
        _lower(app.bundle) if app is not None else None,  # bundle
        _publisher_id(site if site is not None else app),  # publisher_id
        country,  # country
        devicetype,  # devicetype
        ip,  # ip
        ua,  # ua
        ifa,  # ifa
        (user.id or None) if user is not None else None,  # user_id
        (user.buyeruid or None) if user is not None else None,  # buyeruid
        _eids(user) if user is not None else (),  # eids
        doc.bcat or _NO_STRINGS,  # bcat
        frozenset([d.lower() for d in badv]) if badv else _NO_STRINGS,  # badv
        doc.bapp or _NO_STRINGS,  # bapp
        gdpr,  # gdpr
        consent,  # consent
        coppa,  # coppa
        us_privacy,  # us_privacy
        gpp,  # gpp
        _schain(source) if source is not None else None,  # schain
        _tid(source, doc.ext),  # tid
    )


_NO_STRINGS: frozenset[str] = frozenset()


def _device(device: wire.Device | None, user: wire.User | None) -> tuple[Any, ...]:
    """country, devicetype, ip, ua, ifa."""
    if device is None:
        return (_country(None, user), None, None, None, None)
    return (
        _country(device.geo, user),
        device.devicetype,
        device.ip or device.ipv6,
        device.ua,
        device.ifa or None,
    )


_NO_DEVICE = (None, None, None, None, None)


def _country(device_geo: wire.Geo | None, user: wire.User | None) -> str | None:
    """device.geo's country, else user.geo's, upper case."""
    country = device_geo.country if device_geo is not None else None
    if not country and user is not None and user.geo is not None:
        country = user.geo.country
    return country.upper() if country else None


def _eids(user: wire.User) -> tuple[dict[str, Any], ...]:
    ext = user.ext or _NO_USER_EXT
    return user.eids or _extension(_OBJECTS, ext.eids, "user.ext.eids") or ()


def _privacy(regs: wire.Regs | None, user: wire.User | None) -> tuple[Any, ...]:
    """gdpr, consent, coppa, us_privacy, gpp; the 2.6 location wins over 2.5's ext."""
    consent = _consent(user) if user is not None else None
    if regs is None:
        return (None, consent, False, None, None)
    ext = regs.ext or _NO_REGS_EXT
    gdpr = regs.gdpr
    if gdpr is None:
        gdpr = _extension(_GDPR, ext.gdpr, "regs.ext.gdpr")
    return (
        None if gdpr is None else gdpr == 1,
        consent,
        bool(regs.coppa),
        regs.us_privacy or _extension(_STRING, ext.us_privacy, "regs.ext.us_privacy"),
        regs.gpp or _extension(_STRING, ext.gpp, "regs.ext.gpp"),
    )


_NO_PRIVACY = (None, None, False, None, None)


def _consent(user: wire.User) -> str | None:
    ext = user.ext or _NO_USER_EXT
    return user.consent or _extension(_STRING, ext.consent, "user.ext.consent")


_NO_USER_EXT, _NO_REGS_EXT = wire.UserExt(), wire.RegsExt()


def _schain(source: wire.Source) -> dict[str, Any] | None:
    if source.schain or not source.ext:
        return source.schain or None
    ext = _extension(_SOURCE_EXT, source.ext, "source.ext")
    return ext.schain if ext is not None else None


_GDPR = msgspec.json.Decoder(wire.Gdpr | None)
_STRING = msgspec.json.Decoder(str | None)
_OBJECTS = msgspec.json.Decoder(tuple[wire.Object, ...] | None)
_SOURCE_EXT = msgspec.json.Decoder(wire.SourceExt | None)


def _extension(decoder: msgspec.json.Decoder[Any], value: msgspec.Raw, where: str) -> Any:
    """A value from an ``ext``, decoded now that it is needed; None when absent."""
    if not value:
        return None
    try:
        return decoder.decode(value)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(_field_message(exc, where)) from None


def _tid(source: wire.Source | None, ext: msgspec.Raw) -> str | None:
    """``source.tid`` (2.5 and 2.6); else the pre-2.5 ``ext.source.tid``, read leniently:
    an extension's shape is nobody's contract, and the tid only serves dedup."""
    tid = source.tid if source is not None else None
    if tid is None and ext:
        tid = _legacy_tid(ext)
    return tid or None


_LEGACY_EXT = msgspec.json.Decoder(wire.LegacyExt)


def _legacy_tid(ext: msgspec.Raw) -> str | None:
    try:
        legacy = _LEGACY_EXT.decode(ext)
    except msgspec.ValidationError:
        return None
    return legacy.source.tid if legacy.source is not None else None


_AUCTION_SOURCE = msgspec.json.Decoder(wire.AuctionSource)


def auction_source(body: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """(tid, schain) of a request body, read as the parser reads them but decoding
    nothing else (the replay report reads every request); (None, None) where the parser
    would refuse the request's source, or the body is no JSON object."""
    try:
        doc = _AUCTION_SOURCE.decode(body)
        source = doc.source
        return _tid(source, doc.ext), _schain(source) if source is not None else None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, InvalidRequest):
        return None, None


def _imps(imps: list[wire.Imp] | None) -> tuple[Imp, ...]:
    if not imps:
        raise InvalidRequest("imp must be a non-empty array")
    if len(imps) > MAX_IMPS:
        raise InvalidRequest(f"imp has more than {MAX_IMPS} entries")
    parsed = tuple([_imp(imp, n) for n, imp in enumerate(imps)])
    if len(parsed) > 1 and len({imp.id for imp in parsed}) != len(parsed):
        raise InvalidRequest("imp[].id values are not unique")
    return parsed


def _imp(imp: wire.Imp, n: int) -> Imp:
    if not imp.id:
        raise InvalidRequest(f"imp[{n}].id must be a non-empty string")
    banner, video, native, audio = imp.banner, imp.video, imp.native, imp.audio
    instl = bool(imp.instl)
    parsed_banner = _banner(banner, instl, n) if banner is not None else None
    if parsed_banner is None and video is None and native is None and audio is None:
        if banner is not None:
            raise InvalidRequest(f"imp[{n}].banner has no size")
        raise InvalidRequest(f"imp[{n}] has no banner, video, native or audio")
    floor, pmp = imp.bidfloor, imp.pmp
    return Imp(
        imp.id,  # id
        parsed_banner,  # banner
        _video(video) if video is not None else None,  # video
        _native(native, n) if native is not None else None,  # native
        Audio(_strings(audio.mimes), _battr(audio.battr)) if audio is not None else None,  # audio
        round(floor * 1_000_000) if floor else 0,  # bidfloor_micros
        imp.bidfloorcur.upper() if imp.bidfloorcur else "USD",  # bidfloorcur
        instl,  # instl
        bool(pmp.private_auction) if pmp is not None else False,  # private_auction
        _deal_ids(pmp.deals, n) if pmp is not None and pmp.deals else (),  # deal_ids
        imp.tagid,  # tagid
    )


def _deal_ids(deals: list[wire.Deal], n: int) -> tuple[str, ...]:
    ids = tuple([deal.id for deal in deals if deal.id])
    if len(ids) != len(deals):
        raise InvalidRequest(f"imp[{n}].pmp.deals[].id must be a non-empty string")
    return ids


def _banner(banner: wire.Banner, instl: bool, n: int) -> Banner | None:
    """The banner, or None when it states no size and the imp is not an interstitial."""
    sizes: list[Size] = []
    w, h, formats = banner.w, banner.h, banner.format
    if w and h:
        sizes.append((w, h))
    if formats is not None:
        if not formats:  # null is absent, like every other field; [] says nothing
            raise InvalidRequest(f"imp[{n}].banner.format is empty")
        for fmt in formats:
            if fmt.w and fmt.h and (fmt.w, fmt.h) not in sizes:
                sizes.append((fmt.w, fmt.h))
    size_range = _size_range(banner)
    # An interstitial may leave the size to the device; any other banner must say.
    if not sizes and size_range is None and not instl:
        return None
    return Banner(sizes=tuple(sizes), size_range=size_range, battr=_battr(banner.battr))


def _size_range(banner: wire.Banner) -> tuple[int, int, int, int] | None:
    wmax, hmax = banner.wmax, banner.hmax
    if not wmax or not hmax:
        return None
    return (banner.wmin or 0, wmax, banner.hmin or 0, hmax)


def _video(video: wire.Video) -> Video:
    return Video(
        mimes=_strings(video.mimes),
        minduration=video.minduration,
        maxduration=video.maxduration,
        w=video.w,
        h=video.h,
        battr=_battr(video.battr),
    )


def _native(native: wire.Native, n: int) -> Native:
    # The assets inside are not needed until native creatives are assembled.
    if native.request is None:
        raise InvalidRequest(f"imp[{n}].native.request must be a string")
    return Native(battr=_battr(native.battr))


def _channel(site: Any, app: Any, dooh: Any) -> str:
    if site is not None:
        return "site"
    if app is not None:
        return "app"
    return "dooh" if dooh is not None else "none"


def _domain(site: wire.Site) -> str | None:
    return _lower(site.domain or _page_host(site.page or ""))


def _page_host(page: str) -> str | None:
    """The host of scheme://user@host:port/path?query#fragment (every part optional)."""
    rest = page.split("://", 1)[-1]
    for end in "/?#":
        rest = rest.split(end, 1)[0]
    return rest.rsplit("@", 1)[-1].split(":", 1)[0] or None


def _publisher_id(parent: wire.Site | wire.App | None) -> str | None:
    publisher = parent.publisher if parent is not None else None
    return publisher.id if publisher is not None else None


def _strings(values: frozenset[str] | None) -> frozenset[str]:
    return values or _NO_STRINGS


def _battr(values: frozenset[int] | None) -> frozenset[int]:
    return values or _NO_ATTRS


_NO_ATTRS: frozenset[int] = frozenset()


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None
