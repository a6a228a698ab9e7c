"""The wire shape of the BidRequest fields bidsim reads, as msgspec Structs.

msgspec decodes a body straight into these types and checks every field in C: a
field that is present and not null must have its declared type wherever it appears,
even where another field makes its value moot (``device.ipv6`` beside an ``ip``,
``user.geo`` beside ``device.geo``), as a typed decoder such as prebid-server's does.
Fields not declared here are skipped, whatever they hold.

Extensions are the exception: their content is exchange-specific, so the values bidsim
takes from an ``ext`` (2.5's locations of what 2.6 promoted) stay undecoded
(``Extension``) until the 2.6 location turns out empty; only then are they decoded and
their types checked. ``regs.ext`` and ``user.ext`` themselves must be objects;
``source.ext`` is read only for a missing ``schain``, and the request's own ``ext`` only
for a legacy tid, leniently.

Declared types are strict: a JSON ``true`` is no integer, ``300.0`` is no integer, an
array must hold its element type only. Arrays the view keeps as sets or tuples are
decoded as such. Every field may be absent or ``null`` (both
decode to ``None``); which ones a request needs is ``bidder.openrtb.request``'s business.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Raw, Struct

Int = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer within 64 bits: no encoder an exchange runs means a larger one, and
msgspec bounds only what fits an int64."""

Gdpr = Literal[0, 1]
Floor = Annotated[float, Meta(ge=0, le=1e9)]
"""A CPM: a price of a billion per mille is a unit mistake, not a floor."""
Tmax = Annotated[int, Meta(gt=0, le=2**63 - 1)]
Object = dict[str, Any]

Extension = Raw
"""A value inside an ``ext``, undecoded; an empty Raw when absent."""


class _Wire(Struct, gc=False):
    """Base of the wire types: never in a reference cycle, so not tracked by the GC."""


class Format(_Wire):
    w: Int | None = None
    h: Int | None = None


class Banner(_Wire):
    w: Int | None = None
    h: Int | None = None
    format: list[Format] | None = None
    wmin: Int | None = None
    wmax: Int | None = None
    hmin: Int | None = None
    hmax: Int | None = None
    battr: frozenset[Int] | None = None


class Video(_Wire):
    mimes: frozenset[str] | None = None
    minduration: Int | None = None
    maxduration: Int | None = None
    w: Int | None = None
    h: Int | None = None
    battr: frozenset[Int] | None = None


class Native(_Wire):
    # The spec says a string; several exchanges send the object itself.
    request: str | Object | None = None
    battr: frozenset[Int] | None = None


class Audio(_Wire):
    mimes: frozenset[str] | None = None
    battr: frozenset[Int] | None = None


class Deal(_Wire):
    id: str | None = None


class Pmp(_Wire):
    private_auction: Int | None = None
    deals: list[Deal] | None = None


class Imp(_Wire):
    id: str | None = None
    banner: Banner | None = None
    video: Video | None = None
    native: Native | None = None
    audio: Audio | None = None
    bidfloor: Floor | None = None
    bidfloorcur: str | None = None
    instl: Int | None = None
    pmp: Pmp | None = None
    tagid: str | None = None


class Publisher(_Wire):
    id: str | None = None


class Site(_Wire):
    domain: str | None = None
    page: str | None = None
    publisher: Publisher | None = None


class App(_Wire):
    bundle: str | None = None
    publisher: Publisher | None = None


class Dooh(_Wire):
    """Only its presence is read: the request's channel."""


class Geo(_Wire):
    country: str | None = None


class Device(_Wire):
    geo: Geo | None = None
    devicetype: Int | None = None
    ip: str | None = None
    ipv6: str | None = None
    ua: str | None = None
    ifa: str | None = None


class UserExt(_Wire):
    """2.5's locations of what 2.6 moved into ``user``; see ``Extension``."""

    consent: Extension = Raw()
    eids: Extension = Raw()


class User(_Wire):
    id: str | None = None
    buyeruid: str | None = None
    consent: str | None = None
    geo: Geo | None = None
    eids: tuple[Object, ...] | None = None
    ext: UserExt | None = None


class RegsExt(_Wire):
    """2.5's locations of what 2.6 moved into ``regs``; see ``Extension``."""

    gdpr: Extension = Raw()
    us_privacy: Extension = Raw()
    gpp: Extension = Raw()


class Regs(_Wire):
    gdpr: Gdpr | None = None
    coppa: Int | None = None
    us_privacy: str | None = None
    gpp: str | None = None
    ext: RegsExt | None = None


class SourceExt(_Wire):
    """2.5's location of the supply chain."""

    schain: Object | None = None


class Source(_Wire):
    tid: str | None = None
    schain: Object | None = None
    ext: Extension = Raw()
    """A ``SourceExt``, decoded only when ``schain`` is empty."""


class Request(_Wire):
    id: str | None = None
    imp: list[Imp] | None = None
    at: Int | None = None
    tmax: Tmax | None = None
    cur: tuple[str, ...] | None = None
    test: Int | None = None
    site: Site | None = None
    app: App | None = None
    dooh: Dooh | None = None
    device: Device | None = None
    user: User | None = None
    bcat: frozenset[str] | None = None
    badv: list[str] | None = None
    bapp: frozenset[str] | None = None
    regs: Regs | None = None
    source: Source | None = None
    ext: Raw = Raw()
    """Kept undecoded: only the pre-2.5 ``ext.source.tid`` is read from it, and leniently
    (``LegacyExt``), so this extension never makes a request invalid."""


class AuctionSource(_Wire):
    """The two fields that name an auction and its path, without the rest."""

    source: Source | None = None
    ext: Raw = Raw()


class LegacySource(_Wire):
    tid: str | None = None


class LegacyExt(_Wire):
    """Pre-2.5 ``ext.source``; decoding fails, and the tid is unknown, on any other shape."""

    source: LegacySource | None = None
