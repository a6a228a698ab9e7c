from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.decide.identity import MAX_KEY_CHARS, identify
from bidder.openrtb.request import parse_bid_request
from bidder.openrtb.view import BidRequest

_IFA = "6D92078A-8246-4BA4-AE5B-76104861E7DC"


def _request(
    device: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> BidRequest:
    doc: dict[str, Any] = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]}
    if device is not None:
        doc["device"] = device
    if user is not None:
        doc["user"] = user
    return parse_bid_request(orjson.dumps(doc))


_EIDS = [{"source": "id5-sync.com", "uids": [{"id": "ID5*abc"}]}]


@pytest.mark.parametrize(
    ("device", "user", "key"),
    [
        ({"ifa": _IFA}, {"id": "u1", "buyeruid": "ours", "eids": _EIDS}, "b:ours"),
        ({"ifa": _IFA}, {"id": "u1", "eids": _EIDS}, "i:" + _IFA.lower()),
        ({}, {"id": "u1", "eids": _EIDS}, "e:id5-sync.com:ID5*abc"),
        ({}, {"id": "u1"}, "x:ssp-a:u1"),
        ({"ifa": "00000000-0000-0000-0000-000000000000"}, {"id": "u1"}, "x:ssp-a:u1"),
        ({}, {}, None),
    ],
    ids=["buyeruid", "ifa", "eid", "exchange-id", "zero-ifa-ignored", "anonymous"],
)
def test_user_key_prefers_the_most_durable_identifier(
    device: dict[str, Any], user: dict[str, Any], key: str | None
) -> None:
    assert identify(_request(device, user), "ssp-a").user_key == key


def test_exchange_user_ids_are_scoped_by_the_ssp() -> None:
    request = _request(user={"id": "u1"})
    assert identify(request, "ssp-a").user_key != identify(request, "ssp-b").user_key


def test_eids_without_a_usable_uid_are_skipped() -> None:
    eids = [{"source": "a.com", "uids": [{"atype": 1}]}, {"source": "b.com", "uids": [{"id": "x"}]}]
    assert identify(_request(user={"eids": eids}), "s").user_key == "e:b.com:x"


@pytest.mark.parametrize(
    ("device", "household"),
    [
        ({"ip": "203.0.113.7"}, "h:4:203.0.113.7"),
        ({"ipv6": "2001:db8:1:2:aaaa::1"}, "h:6:2001:db8:1:2::"),
        ({"ip": "203.0.113.7", "ifa": _IFA, "devicetype": 3}, "h:i:" + _IFA.lower()),
        ({"ip": "203.0.113.7", "ifa": _IFA, "devicetype": 4}, "h:4:203.0.113.7"),
        ({"ip": "not an address"}, None),
        ({}, None),
    ],
    ids=["ipv4", "ipv6-slash-64", "ctv-ifa", "phone-uses-ip", "bad-ip", "none"],
)
def test_household_key(device: dict[str, Any], household: str | None) -> None:
    assert identify(_request(device), "s").household_key == household


def test_two_ipv6_addresses_of_one_home_network_share_a_household() -> None:
    first = identify(_request({"ipv6": "2001:db8:1:2::1"}), "s").household_key
    second = identify(_request({"ipv6": "2001:db8:1:2:ffff::9"}), "s").household_key
    assert first == second


@given(st.text(min_size=1, max_size=500))
def test_keys_are_bounded_whatever_the_ids(value: str) -> None:
    identity = identify(_request({"ifa": value}, {"buyeruid": value, "id": value}), "s")
    assert identity.user_key is not None
    assert len(identity.user_key) <= MAX_KEY_CHARS
