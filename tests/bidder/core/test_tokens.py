"""bidder.core.tokens: sign, verify, rotate, and refuse anything we did not sign."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.tokens import (
    CAPS_UNCHECKED,
    VERSION,
    NoticeClaims,
    TokenError,
    TokenSigner,
    generate_key,
    pack_texts,
    read_flags,
)

pytestmark = pytest.mark.pure

KEY_1, KEY_2 = b"1" * 32, b"2" * 32
CLAIMS = NoticeClaims(
    bid_id=560_000_000_123_456_789,
    imp_id="1",
    campaign_id="harbor-bank-leaderboard",
    advertiser="harbor-bank",
    creative_id="hb-728x90-savings",
    user_key="b:6f1e2d3c",
    household_key="h:4:203.0.113.7",
    max_price_cpm_micros=2_500_000,
    issued_ms=1_767_225_600_000,
)
SIGNER = TokenSigner({"k1": KEY_1}, "k1")

texts = st.text(max_size=200)
claims = st.builds(
    NoticeClaims,
    bid_id=st.integers(0, (1 << 64) - 1),
    imp_id=texts,
    campaign_id=texts,
    advertiser=texts,
    creative_id=texts,
    user_key=st.none() | st.text(min_size=1, max_size=400),
    household_key=st.none() | st.text(min_size=1, max_size=60),
    max_price_cpm_micros=st.integers(0, (1 << 64) - 1),
    issued_ms=st.integers(0, (1 << 64) - 1),
    caps_unchecked=st.booleans(),
)


def _blob(token: str) -> bytearray:
    blob = token.split(".", 1)[1]
    return bytearray(base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4)))


def _token(kid: str, raw: bytes) -> str:
    return kid + "." + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@given(claims=claims)
def test_a_signed_token_verifies_to_its_claims(claims: NoticeClaims) -> None:
    assert SIGNER.verify(SIGNER.sign(claims)) == claims


@given(claims=claims)
def test_signing_prepacked_strings_gives_the_same_token(claims: NoticeClaims) -> None:
    c = claims
    head = pack_texts(c.imp_id)
    creative = pack_texts(c.campaign_id, c.advertiser, c.creative_id)
    user = pack_texts(c.user_key or "", c.household_key or "")
    flags = CAPS_UNCHECKED if c.caps_unchecked else 0
    token = SIGNER.sign_packed(
        c.bid_id, c.max_price_cpm_micros, c.issued_ms, head + creative + user, flags
    )
    assert token.decode() == SIGNER.sign(claims)


def test_the_tag_is_keyed_blake2b_128_of_kid_and_body() -> None:
    raw = _blob(SIGNER.sign(CLAIMS))
    body, tag = bytes(raw[:-16]), bytes(raw[-16:])
    assert body[0] == VERSION == 3
    assert tag == hashlib.blake2b(b"k1." + body, key=KEY_1, digest_size=16).digest()


def test_a_token_of_another_version_is_refused_as_such() -> None:
    raw = _blob(SIGNER.sign(CLAIMS))
    body = b"\x01" + bytes(raw[1:-16])
    tag = hashlib.blake2b(b"k1." + body, key=KEY_1, digest_size=16).digest()
    with pytest.raises(TokenError, match="version 1 is not supported"):
        SIGNER.verify(_token("k1", body + tag))


def test_keys_longer_than_blake2b_takes_still_sign_apart() -> None:
    long_1, long_2 = b"L" * 100, b"L" * 99 + b"M"  # equal in their first 64 bytes
    signer_1, signer_2 = TokenSigner({"k1": long_1}, "k1"), TokenSigner({"k1": long_2}, "k1")
    token = signer_1.sign(CLAIMS)
    assert signer_1.verify(token) == CLAIMS
    with pytest.raises(TokenError, match="bad signature"):
        signer_2.verify(token)


@pytest.mark.parametrize("field", ["bid_id", "max_price_cpm_micros", "issued_ms"])
@pytest.mark.parametrize("value", [-1, 1 << 64])
def test_integers_outside_unsigned_64_bits_are_not_signed(field: str, value: int) -> None:
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        SIGNER.sign(dataclasses.replace(CLAIMS, **{field: value}))


def test_token_is_url_safe_and_compact() -> None:
    token = SIGNER.sign(CLAIMS)
    assert token.startswith("k1.")
    assert all(c.isalnum() or c in "-_." for c in token)
    assert len(token) <= 200


@given(position=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_any_flipped_bit_is_refused(position: int, bit: int) -> None:
    raw = _blob(SIGNER.sign(CLAIMS))
    raw[position % len(raw)] ^= 1 << bit
    with pytest.raises(TokenError):
        SIGNER.verify(_token("k1", bytes(raw)))


def test_a_token_signed_with_another_key_is_refused() -> None:
    forger = TokenSigner({"k1": b"f" * 32}, "k1")
    with pytest.raises(TokenError, match="bad signature"):
        SIGNER.verify(forger.sign(CLAIMS))


def test_a_changed_claim_with_the_old_tag_is_refused() -> None:
    good = _blob(SIGNER.sign(CLAIMS))
    richer = _blob(SIGNER.sign(dataclasses.replace(CLAIMS, max_price_cpm_micros=9_999_999)))
    forged = richer[:-16] + good[-16:]
    with pytest.raises(TokenError, match="bad signature"):
        SIGNER.verify(_token("k1", bytes(forged)))


def test_an_unknown_key_id_is_refused() -> None:
    token = TokenSigner({"k9": KEY_1}, "k9").sign(CLAIMS)
    with pytest.raises(TokenError, match="unknown key id"):
        SIGNER.verify(token)


def test_the_tag_is_bound_to_the_key_id() -> None:
    both = TokenSigner({"k1": KEY_1, "k2": KEY_1}, "k1")
    relabelled = "k2" + both.sign(CLAIMS)[2:]
    with pytest.raises(TokenError, match="bad signature"):
        both.verify(relabelled)


def test_after_rotation_old_tokens_still_verify() -> None:
    old = TokenSigner({"k1": KEY_1}, "k1").sign(CLAIMS)
    rotated = TokenSigner({"k1": KEY_1, "k2": KEY_2}, "k2")
    assert rotated.verify(old) == CLAIMS


def test_after_rotation_new_tokens_use_the_new_key_id() -> None:
    rotated = TokenSigner({"k1": KEY_1, "k2": KEY_2}, "k2")
    assert rotated.sign(CLAIMS).startswith("k2.")


@pytest.mark.parametrize(
    "token", ["", "k1", "k1.", "k1.***", "k1.AAAA", "k1." + "A" * 3000, "k1.é", "." * 5]
)
def test_malformed_tokens_are_refused(token: str) -> None:
    with pytest.raises(TokenError):
        SIGNER.verify(token)


@given(token=st.text(max_size=300))
def test_any_text_raises_only_token_error(token: str) -> None:
    with contextlib.suppress(TokenError):
        SIGNER.verify(token)


def test_absent_user_and_household_keys_stay_absent() -> None:
    anonymous = dataclasses.replace(CLAIMS, user_key=None, household_key=None)
    assert SIGNER.verify(SIGNER.sign(anonymous)) == anonymous


@pytest.mark.parametrize(
    ("keys", "active", "message"),
    [
        ({"k1": b"short"}, "k1", "at least 32 bytes"),
        ({"bad kid!": KEY_1}, "bad kid!", "must be 1-16"),
        ({"k1": KEY_1}, "k2", "not among the keys"),
    ],
)
def test_signer_refuses_bad_keys(keys: dict[str, bytes], active: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenSigner(keys, active)


def test_generated_keys_are_long_and_distinct() -> None:
    first, second = generate_key(), generate_key()
    assert first != second and len(first.encode()) >= 32


# ---------------------------------------------------------------------- the unchecked mark


def test_a_bid_made_without_a_cap_check_carries_the_mark() -> None:
    token = SIGNER.sign(dataclasses.replace(CLAIMS, caps_unchecked=True))
    assert SIGNER.verify(token).caps_unchecked
    assert read_flags(token) == CAPS_UNCHECKED


def test_a_checked_bid_carries_no_mark() -> None:
    token = SIGNER.sign(CLAIMS)
    assert not SIGNER.verify(token).caps_unchecked and read_flags(token) == 0


def test_the_mark_is_signed() -> None:
    raw = _blob(SIGNER.sign(CLAIMS))
    raw[1] ^= CAPS_UNCHECKED
    with pytest.raises(TokenError, match="bad signature"):
        SIGNER.verify(_token("k1", bytes(raw)))


@given(st.text(max_size=60))
def test_reading_flags_of_anything_never_raises(text: str) -> None:
    assert 0 <= read_flags(text) <= 255
