"""bidder.openrtb.body.gunzip_capped: gzip decoding that stays within the body cap."""

from __future__ import annotations

import contextlib
import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.openrtb.body import gunzip_capped
from bidder.openrtb.request import InvalidRequest

CAP = 4096
PAYLOAD = b'{"id": "r1", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]}'


def test_gzip_round_trips() -> None:
    assert gunzip_capped(gzip.compress(PAYLOAD), CAP) == PAYLOAD


def test_empty_payload_round_trips() -> None:
    assert gunzip_capped(gzip.compress(b""), CAP) == b""


def test_payload_of_exactly_the_cap_is_accepted() -> None:
    payload = b"x" * CAP
    assert gunzip_capped(gzip.compress(payload), CAP) == payload


def test_payload_one_byte_over_the_cap_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="cap"):
        gunzip_capped(gzip.compress(b"x" * (CAP + 1)), CAP)


def test_gzip_bomb_is_invalid() -> None:
    bomb = gzip.compress(b"\0" * (CAP * 1000))
    with pytest.raises(InvalidRequest, match="cap"):
        gunzip_capped(bomb, CAP)


def test_truncated_gzip_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="truncated"):
        gunzip_capped(gzip.compress(PAYLOAD)[:-4], CAP)


def test_empty_body_is_invalid() -> None:
    with pytest.raises(InvalidRequest):
        gunzip_capped(b"", CAP)


def test_garbage_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="not valid gzip"):
        gunzip_capped(b"this is not gzip at all", CAP)


def test_corrupt_deflate_data_is_invalid() -> None:
    data = bytearray(gzip.compress(PAYLOAD))
    data[12] ^= 0xFF  # inside the deflate stream, after the 10-byte header
    with pytest.raises(InvalidRequest):
        gunzip_capped(bytes(data), CAP)


def test_every_member_of_a_multi_member_gzip_is_decoded() -> None:
    # RFC 1952 section 2.2: a gzip file is a series of members; the body is all of them.
    body = gzip.compress(PAYLOAD[:20]) + gzip.compress(PAYLOAD[20:])
    assert gunzip_capped(body, CAP) == PAYLOAD


def test_members_over_the_cap_together_are_invalid() -> None:
    half = b"x" * (CAP // 2 + 1)
    with pytest.raises(InvalidRequest, match="cap"):
        gunzip_capped(gzip.compress(half) + gzip.compress(half), CAP)


def test_trailing_garbage_after_the_gzip_stream_is_invalid() -> None:
    with pytest.raises(InvalidRequest):
        gunzip_capped(gzip.compress(PAYLOAD) + b"junk", CAP)


@given(payload=st.binary(max_size=CAP))
def test_any_payload_within_the_cap_round_trips(payload: bytes) -> None:
    assert gunzip_capped(gzip.compress(payload), CAP) == payload


@given(payload=st.binary(max_size=512), data=st.data())
def test_any_strict_prefix_of_a_gzip_stream_is_invalid(payload: bytes, data: st.DataObject) -> None:
    compressed = gzip.compress(payload)
    cut = data.draw(st.integers(0, len(compressed) - 1))
    with pytest.raises(InvalidRequest):
        gunzip_capped(compressed[:cut], CAP)


@given(body=st.binary(max_size=512))
def test_random_bytes_raise_only_invalid_request(body: bytes) -> None:
    with contextlib.suppress(InvalidRequest):
        gunzip_capped(body, CAP)


@given(tail=st.binary(max_size=64))
def test_random_bytes_after_a_gzip_header_raise_only_invalid_request(tail: bytes) -> None:
    # Random bytes almost never start like gzip; these get past the header check.
    with contextlib.suppress(InvalidRequest):
        gunzip_capped(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + tail, CAP)
