"""The normalized, typed view of an OpenRTB BidRequest that the stages read.

``bidder.openrtb.request`` builds it from the wire types; nothing else does. Money is
in integer micros of the stated currency, 2.5 ``ext`` fields promoted by 2.6 appear in
their 2.6 place, and strings the bidder compares are normalized (lower case domains,
upper case countries).

The view is made of frozen msgspec Structs, untracked by the garbage collector (the
parser builds them from decoded JSON, so they hold no cycle).
"""

from __future__ import annotations

from typing import Any

import msgspec

Size = tuple[int, int]


class Banner(msgspec.Struct, frozen=True, gc=False):
    sizes: tuple[Size, ...]
    """w/h first (when given), then format[] entries; may be empty for interstitials."""
    size_range: tuple[int, int, int, int] | None
    """(wmin, wmax, hmin, hmax) when the banner gives a flexible size instead."""
    battr: frozenset[int]


class Video(msgspec.Struct, frozen=True, gc=False):
    mimes: frozenset[str]
    minduration: int | None
    maxduration: int | None
    w: int | None
    h: int | None
    battr: frozenset[int]


class Native(msgspec.Struct, frozen=True, gc=False):
    battr: frozenset[int]


class Audio(msgspec.Struct, frozen=True, gc=False):
    mimes: frozenset[str]
    battr: frozenset[int]


class Imp(msgspec.Struct, frozen=True, gc=False):
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


class BidRequest(msgspec.Struct, frozen=True, gc=False):
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
    tid: str | None
    """The auction's transaction id (``source.tid``), shared by its copies through other
    SSPs; None when absent or empty. ``bidder.supply.path`` dedups on it."""
