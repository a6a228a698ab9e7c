"""Fallback keys: the household and network keys per-user caps fall back to."""

from __future__ import annotations

import ipaddress
from typing import Any

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bidder.decide.identity import fallback_key, identify, network_key
from bidder.openrtb.request import parse_bid_request
from bidder.openrtb.view import BidRequest

_V4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
_V6 = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address).filter(lambda a: not a.ipv4_mapped)


def _request(device: dict[str, Any]) -> BidRequest:
    doc = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}], "device": device}
    return parse_bid_request(orjson.dumps(doc))


@given(_V4, st.integers(0, 255))
def test_every_ipv4_address_of_a_slash_24_has_one_network_key(
    address: ipaddress.IPv4Address, last: int
) -> None:
    neighbour = ipaddress.IPv4Address((int(address) & ~0xFF) | last)
    assert network_key(str(address)) == network_key(str(neighbour))


@given(_V4, _V4)
def test_ipv4_addresses_of_different_slash_24s_have_different_keys(
    a: ipaddress.IPv4Address, b: ipaddress.IPv4Address
) -> None:
    same = int(a) >> 8 == int(b) >> 8
    assert (network_key(str(a)) == network_key(str(b))) is same


@given(_V4)
def test_the_ipv4_key_names_its_network(address: ipaddress.IPv4Address) -> None:
    key = network_key(str(address))
    assert key is not None and key.startswith("n:4:")
    assert address in ipaddress.ip_network(key[4:] + "/24")


@given(_V6, st.integers(0, 2**64 - 1))
def test_every_ipv6_address_of_a_slash_64_has_one_network_key(
    address: ipaddress.IPv6Address, host: int
) -> None:
    neighbour = ipaddress.IPv6Address((int(address) >> 64 << 64) | host)
    assume(neighbour.ipv4_mapped is None)  # ::/64 holds ::ffff:0:0/96, IPv4 clients
    assert network_key(str(address)) == network_key(neighbour.exploded)


@given(_V6, _V6)
def test_ipv6_addresses_of_different_slash_64s_have_different_keys(
    a: ipaddress.IPv6Address, b: ipaddress.IPv6Address
) -> None:
    same = int(a) >> 64 == int(b) >> 64
    assert (network_key(str(a)) == network_key(str(b))) is same


@given(_V4)
def test_an_ipv4_mapped_ipv6_address_is_its_ipv4_network(address: ipaddress.IPv4Address) -> None:
    assert network_key(f"::ffff:{address}") == network_key(str(address))


@given(st.text(max_size=40))
def test_text_that_is_no_address_has_no_network_key(text: str) -> None:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        assert network_key(text) is None


@pytest.mark.parametrize(
    ("device", "kind", "key"),
    [
        ({"ip": "192.0.2.77"}, "household", "h:4:192.0.2.77"),
        ({"ip": "192.0.2.77"}, "ip", "n:4:192.0.2.0"),
        ({"ipv6": "2001:db8:5:6:7::1"}, "household", "h:6:2001:db8:5:6::"),
        ({"ipv6": "2001:db8:5:6:7::1"}, "ip", "n:6:2001:db8:5:6::"),
        ({"ip": "192.0.2.77"}, "none", None),
        ({}, "household", None),
        ({}, "ip", None),
    ],
)
def test_fallback_key_by_kind(device: dict[str, Any], kind: str, key: str | None) -> None:
    request = _request(device)
    assert fallback_key(request, kind, identify(request, "ssp-a").household_key) == key
