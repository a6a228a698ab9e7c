"""Signed notice tokens: what a win/billing notice proves about its bid. Pure.

Every bid's nurl and burl carry ``t=<token>``; the notice handler trusts nothing in a
notice but the token and the clearing price. The token is::

    <kid> "." base64url(body || tag)                      (no padding)
    body = version(1) | bid_id(8) | max_price_cpm_micros(8) | issued_ms(8)
           | imp_id | campaign_id | advertiser | creative_id | user_key | household_key
    tag  = HMAC-SHA256(key[kid], kid "." body), first 16 bytes

Integers are big-endian unsigned; each string is UTF-8 with a length prefix of one
byte (< 128) or two (high bit set, 15 bits). An absent user or household key is the
empty string. ``kid`` (1-16 of ``[A-Za-z0-9_-]``) names the signing key, so keys
rotate: sign with the new key, keep verifying with the old one until every token it
signed has passed the notice window, then drop it. The tag is bound to the kid.

Why binary and a 128-bit tag: the token is in every bid's two URLs on the hot path;
JSON would double it. A truncated HMAC-SHA256 of 128 bits is the usual size
(RFC 2104 section 5 allows truncation to half the output) and forging one is a
2^128 guess per try. The version byte lets a later layout coexist with this one.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass

VERSION = 1
TAG_BYTES = 16
MAX_TOKEN_CHARS = 2048
MIN_KEY_BYTES = 32
_KID = re.compile(r"[A-Za-z0-9_-]{1,16}")
_HEAD = struct.Struct(">BQQQ")
_U64 = (1 << 64) - 1


class TokenError(ValueError):
    """The token is not one we signed (forged, tampered, unknown key, malformed)."""


@dataclass(frozen=True, slots=True)
class NoticeClaims:
    """What the bidder asserted when it bid; everything the notice path may rely on."""

    bid_id: int
    """The bid's Snowflake id: fleet-unique, so it identifies the impression."""
    imp_id: str
    campaign_id: str
    advertiser: str
    creative_id: str
    user_key: str | None
    household_key: str | None
    max_price_cpm_micros: int
    """The bid price: the exchange may never charge more."""
    issued_ms: int
    """Epoch milliseconds when the bid was made."""


def generate_key() -> str:
    """A fresh random signing secret (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def check_kid(kid: str) -> bool:
    return _KID.fullmatch(kid) is not None


class TokenSigner:
    """Signs with ``active_kid``'s key; verifies with any key in ``keys``."""

    def __init__(self, keys: Mapping[str, bytes], active_kid: str) -> None:
        for kid, key in keys.items():
            if not check_kid(kid):
                raise ValueError(f"key id {kid!r} must be 1-16 of A-Z a-z 0-9 _ -")
            if len(key) < MIN_KEY_BYTES:
                raise ValueError(f"key {kid!r} must be at least {MIN_KEY_BYTES} bytes")
        if active_kid not in keys:
            raise ValueError(f"the active key id {active_kid!r} is not among the keys")
        # Each key's HMAC state is keyed and fed the "<kid>." prefix once; a copy per
        # token skips the key schedule (measured: 1.1 us vs 1.6 us for hmac.digest).
        self._macs = {k: hmac.new(key, k.encode() + b".", "sha256") for k, key in keys.items()}
        self._active = active_kid
        self._active_mac = self._macs[active_kid]

    def sign(self, claims: NoticeClaims) -> str:
        body = _pack(claims)
        mac = self._active_mac.copy()
        mac.update(body)
        tag = mac.digest()[:TAG_BYTES]
        return self._active + "." + base64.urlsafe_b64encode(body + tag).rstrip(b"=").decode()

    def verify(self, token: str) -> NoticeClaims:
        """The claims of a token we signed; TokenError otherwise."""
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenError("token too long")
        kid, dot, blob = token.partition(".")
        base = self._macs.get(kid) if dot else None
        if base is None:
            raise TokenError("unknown key id")
        raw = _b64decode(blob)
        if len(raw) < _HEAD.size + TAG_BYTES:
            raise TokenError("token too short")
        body, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
        mac = base.copy()
        mac.update(body)
        if not hmac.compare_digest(tag, mac.digest()[:TAG_BYTES]):
            raise TokenError("bad signature")
        return _unpack(body)


def _b64decode(blob: str) -> bytes:
    try:
        padded = blob.encode("ascii") + b"=" * (-len(blob) % 4)
        return base64.b64decode(padded, altchars=b"-_", validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise TokenError("token is not base64url") from None


def _pack(c: NoticeClaims) -> bytes:
    if not (0 <= c.bid_id <= _U64 and 0 <= c.max_price_cpm_micros <= _U64 and c.issued_ms >= 0):
        raise ValueError("token integers must be unsigned 64-bit")
    parts = [_HEAD.pack(VERSION, c.bid_id, c.max_price_cpm_micros, c.issued_ms)]
    texts = (c.imp_id, c.campaign_id, c.advertiser, c.creative_id)
    for text in (*texts, c.user_key or "", c.household_key or ""):
        data = text.encode()
        size = len(data)
        if size < 0x80:
            parts.append(bytes((size,)))
        elif size < 0x8000:
            parts.append((size | 0x8000).to_bytes(2, "big"))
        else:
            raise ValueError("a token string field is over 32 KiB")
        parts.append(data)
    return b"".join(parts)


def _unpack(body: bytes) -> NoticeClaims:
    # Only bodies with a valid tag get here, so a failure is our own bug or a key leak.
    version, bid_id, max_price, issued_ms = _HEAD.unpack_from(body)
    if version != VERSION:
        raise TokenError(f"token version {version} is not supported")
    texts: list[str] = []
    pos = _HEAD.size
    try:
        for _ in range(6):
            size = body[pos]
            if size & 0x80:
                size, pos = ((size & 0x7F) << 8) | body[pos + 1], pos + 2
            else:
                pos += 1
            texts.append(body[pos : pos + size].decode())
            pos += size
    except (IndexError, UnicodeDecodeError):
        raise TokenError("token body is malformed") from None
    if pos != len(body):
        raise TokenError("token body is malformed")
    imp, campaign, advertiser, creative, user, household = texts
    return NoticeClaims(
        bid_id, imp, campaign, advertiser, creative, user or None, household or None,
        max_price, issued_ms,
    )  # fmt: skip
