"""Stage 5 (first half): one user key and one household key per request, pure.

Frequency caps and profiles need a stable key for "this person" and "this home".
The request may carry several identifiers; the most durable one we control wins:

    1. ``user.buyeruid``  our own id, cookie-synced by the exchange     ``b:<id>``
    2. ``device.ifa``     the device's advertising id (not all zeros)    ``i:<ifa>``
    3. ``user.eids``      the first uid of the first eid source          ``e:<source>:<id>``
    4. ``user.id``        the exchange's own id, so scoped by the SSP    ``x:<ssp>:<id>``

No identifier means no user key: per-user caps cannot be checked for that request
(the cap policy decides what that means). The household key is the CTV/set-top
box's ifa when the device is one (it *is* the household screen), else the IP
address: the IPv4 address as given, or the /64 prefix of an IPv6 address (one
home network). Keys are capped at ``MAX_KEY_CHARS`` so a hostile id cannot blow
up Valkey key sizes; they are opaque strings to every consumer.

Fallback keys (``fallback_key``) stand in for the user key of a campaign whose
``cap_policy.fallback`` asks for one, when the request has no user key (or the
identity graph is not confident in it): ``household`` is the household key above;
``ip`` is the network, the IPv4 /24 or the IPv6 /64 (``n:4:<a.b.c.0>``,
``n:6:<prefix>``), which binds more people than one home, so it is the coarser one.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from bidder.openrtb.view import BidRequest

MAX_KEY_CHARS = 96
_CTV_DEVICE_TYPES = frozenset({3, 7})  # OpenRTB: connected TV, set-top box
_ZERO_IFA = "00000000-0000-0000-0000-000000000000"


class Identity(NamedTuple):
    user_key: str | None
    household_key: str | None


def identify(request: BidRequest, ssp: str) -> Identity:
    return Identity(_user_key(request, ssp), _household_key(request))


def _user_key(request: BidRequest, ssp: str) -> str | None:
    if request.buyeruid:
        return _cap("b:" + request.buyeruid)
    ifa = _usable_ifa(request.ifa)
    if ifa:
        return _cap("i:" + ifa)
    eid = _first_eid(request)
    if eid:
        return _cap(eid)
    if request.user_id:
        return _cap(f"x:{ssp}:{request.user_id}")
    return None


def _household_key(request: BidRequest) -> str | None:
    ifa = _usable_ifa(request.ifa)
    if ifa and request.devicetype in _CTV_DEVICE_TYPES:
        return _cap("h:i:" + ifa)
    if not request.ip:
        return None
    try:
        address = ipaddress.ip_address(request.ip)
    except ValueError:
        return None
    if address.version == 6:
        network = ipaddress.ip_network(f"{address}/64", strict=False)
        return "h:6:" + str(network.network_address)
    return "h:4:" + str(address)


def fallback_key(request: BidRequest, kind: str, household_key: str | None) -> str | None:
    """The key per-user caps count under for fallback ``kind`` ('household' or 'ip'):
    None when the request has no address to derive it from (or ``kind`` is 'none')."""
    if kind == "household":
        return household_key
    if kind == "ip" and request.ip:
        return network_key(request.ip)
    return None


def network_key(ip: str) -> str | None:
    """``n:4:<a.b.c.0>`` for an IPv4 address's /24, ``n:6:<prefix>`` for an IPv6
    address's /64; None for text that is not an IP address."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            network = ipaddress.IPv6Network((address, 64), strict=False)
            return "n:6:" + str(network.network_address)
        address = address.ipv4_mapped  # ::ffff:a.b.c.d is an IPv4 client
    return "n:4:" + str(ipaddress.IPv4Network((address, 24), strict=False).network_address)


def _usable_ifa(ifa: str | None) -> str | None:
    if not ifa or ifa == _ZERO_IFA:
        return None
    return ifa.lower()


def _first_eid(request: BidRequest) -> str | None:
    for eid in request.eids:
        source, uids = eid.get("source"), eid.get("uids")
        if not isinstance(source, str) or not isinstance(uids, list):
            continue
        for uid in uids:
            value = uid.get("id") if isinstance(uid, dict) else None
            if isinstance(value, str) and value:
                return f"e:{source}:{value}"
    return None


def _cap(key: str) -> str:
    return key[:MAX_KEY_CHARS]
