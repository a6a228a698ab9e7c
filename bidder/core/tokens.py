"""Signed notice tokens: what a win/billing notice proves about its bid. Pure.

Every bid's nurl and burl carry ``t=<token>``; the notice handler trusts nothing in a
notice but the token and the clearing price. The token is::

    <kid> "." base64url(body || tag)                      (no padding)
    body = version(1) | flags(1) | bid_id(8) | max_price_cpm_micros(8) | issued_ms(8)
           | imp_id | campaign_id | advertiser | creative_id | user_key | household_key
    tag  = BLAKE2b(key = key[kid], digest_size = 16)(kid "." body)

Integers are big-endian unsigned; each string is UTF-8 with a length prefix of one
byte (< 128) or two (high bit set, 15 bits). An absent user or household key is the
empty string. ``flags`` bit 0 (``CAPS_UNCHECKED``) marks a bid made without a
frequency-cap check (the store could not be read and the campaign's cap class fails
open): its impression is over-cap risk, carried to the ledger entry; the bit is signed
like the rest, and ``read_flags`` lets a party without the key count marked bids.
``kid`` (1-16 of ``[A-Za-z0-9_-]``) names the signing key, so keys
rotate: sign with the new key, keep verifying with the old one until every token it
signed has passed the notice window, then drop it. The tag is bound to the kid. A key
longer than BLAKE2b's 64-byte limit is first hashed to 64 bytes (as HMAC hashes a key
longer than its block).

Why binary and a 128-bit tag: the token is in every bid's two URLs on the hot path;
JSON would double it. BLAKE2b's keyed mode is a MAC by design (RFC 7693), with the
output length a parameter of the function rather than a truncation; forging a 128-bit
tag is a 2^-128 guess per try. With its keyed state prepared once per key and copied
per token, it costs about half an HMAC-SHA256 over the same body. The version byte names
the layout and the MAC: a token of another version is refused as such, before its tag
is checked.

The bid path signs with strings it has packed ahead (``pack_texts``: a creative's ids
when the campaigns are loaded, the user's keys once per request) through
``sign_packed``; ``sign`` packs ``NoticeClaims`` and signs them the same way.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import re
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass

VERSION = 3
CAPS_UNCHECKED = 0x01
TAG_BYTES = 16
MAX_TOKEN_CHARS = 2048
MIN_KEY_BYTES = 32
_KID = re.compile(r"[A-Za-z0-9_-]{1,16}")
_HEAD = struct.Struct(">BBQQQ")
_TEXTS = 6
_SHORT_PREFIX = [bytes((size,)) for size in range(0x80)]
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


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
    caps_unchecked: bool = False
    """The bid was made without a frequency-cap check (fail-open, counters unread)."""


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
        # Each key's MAC state is keyed and fed the "<kid>." prefix once; a copy per
        # token skips the key block.
        self._macs = {k: _keyed_mac(key, k) for k, key in keys.items()}
        self._active_mac = self._macs[active_kid]
        self._active_prefix = active_kid.encode() + b"."

    def sign(self, claims: NoticeClaims) -> str:
        c = claims
        texts = pack_texts(
            c.imp_id, c.campaign_id, c.advertiser, c.creative_id,
            c.user_key or "", c.household_key or "",
        )  # fmt: skip
        flags = CAPS_UNCHECKED if c.caps_unchecked else 0
        token = self.sign_packed(c.bid_id, c.max_price_cpm_micros, c.issued_ms, texts, flags)
        return token.decode()

    def sign_packed(
        self, bid_id: int, max_price_cpm_micros: int, issued_ms: int, texts: bytes, flags: int = 0
    ) -> bytes:
        """The token, as ASCII bytes, of claims whose six strings ``texts`` packs in
        layout order (``pack_texts``). Raises ValueError for an integer out of range."""
        try:
            body = _HEAD.pack(VERSION, flags, bid_id, max_price_cpm_micros, issued_ms) + texts
        except struct.error:
            raise ValueError("token integers must be unsigned 64-bit") from None
        mac = self._active_mac.copy()
        mac.update(body)
        blob = binascii.b2a_base64(body + mac.digest(), newline=False).translate(_URLSAFE)
        return self._active_prefix + blob.rstrip(b"=")

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
        if raw[0] != VERSION:
            raise TokenError(f"token version {raw[0]} is not supported (this bidder: {VERSION})")
        body, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
        mac = base.copy()
        mac.update(body)
        if not hmac.compare_digest(tag, mac.digest()):
            raise TokenError("bad signature")
        return _unpack(body)


def _keyed_mac(key: bytes, kid: str) -> hashlib.blake2b:
    if len(key) > hashlib.blake2b.MAX_KEY_SIZE:
        key = hashlib.blake2b(key).digest()
    mac = hashlib.blake2b(key=key, digest_size=TAG_BYTES)
    mac.update(kid.encode() + b".")
    return mac


def pack_texts(*texts: str) -> bytes:
    """Token strings in the body's encoding: UTF-8, each after its length prefix.

    Raises ValueError for a string over 32 KiB (or not encodable as UTF-8).
    """
    parts: list[bytes] = []
    for text in texts:
        data = text.encode()
        size = len(data)
        if size < 0x80:
            parts += (_SHORT_PREFIX[size], data)
        elif size < 0x8000:
            parts += ((size | 0x8000).to_bytes(2, "big"), data)
        else:
            raise ValueError("a token string field is over 32 KiB")
    return b"".join(parts)


def _b64decode(blob: str) -> bytes:
    try:
        padded = blob.encode("ascii") + b"=" * (-len(blob) % 4)
        return binascii.a2b_base64(padded.translate(_FROM_URLSAFE), strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        raise TokenError("token is not base64url") from None


def _unpack(body: bytes) -> NoticeClaims:
    # Only bodies with a valid tag get here, so a failure is our own bug or a key leak.
    _, flags, bid_id, max_price, issued_ms = _HEAD.unpack_from(body)
    texts: list[str] = []
    pos = _HEAD.size
    try:
        for _ in range(_TEXTS):
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
        max_price, issued_ms, bool(flags & CAPS_UNCHECKED),
    )  # fmt: skip


def read_claims(token: str) -> NoticeClaims | None:
    """The claims of a token of this version, unverified (None when it does not parse).

    For reports on a bidder's own answers, like ``read_flags``; the notice path trusts
    only ``TokenSigner.verify``.
    """
    _, dot, blob = token.partition(".")
    try:
        raw = _b64decode(blob) if dot and len(token) <= MAX_TOKEN_CHARS else b""
        if len(raw) < _HEAD.size + TAG_BYTES or raw[0] != VERSION:
            return None
        return _unpack(raw[:-TAG_BYTES])
    except TokenError:
        return None


def read_flags(token: str) -> int:
    """The flags byte of a token of this version, unverified (0 for anything else).

    For reports that count marked bids without the signing key; the notice path
    trusts only ``TokenSigner.verify``.
    """
    _, dot, blob = token.partition(".")
    try:
        raw = _b64decode(blob[:4]) if dot and len(blob) >= 4 else b""
    except TokenError:
        return 0
    return raw[1] if len(raw) >= 2 and raw[0] == VERSION else 0
