"""IAB TCF v2 consent strings: an encoder for the core segment.

A TC string is a bit field written most-significant bit first, padded with zero bits to
a whole byte and encoded as base64url without padding. The core segment holds, in spec
order: Version(6)=2, Created(36) and LastUpdated(36) in deciseconds since the epoch,
CmpId(12), CmpVersion(12), ConsentScreen(6), ConsentLanguage(12, two letters of 6 bits,
A=0), VendorListVersion(12), TcfPolicyVersion(6), IsServiceSpecific(1),
UseNonStandardTexts(1), SpecialFeatureOptIns(12), PurposesConsent(24),
PurposesLITransparency(24), PurposeOneTreatment(1), PublisherCC(12), then the vendor
consent section and the vendor legitimate-interest section (each MaxVendorId(16),
IsRangeEncoding(1), then one bit per vendor id 1..MaxVendorId), then
NumPubRestrictions(12).

Only what the generator needs is implemented: bit-field vendor sections (never range
encoding), no publisher restrictions, no disclosed-vendors or publisher-TC segments.
Bit n of a set field (1-based id n) is the n-th bit of that field.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

TCF_VERSION = 2
SPECIAL_FEATURES = 12
PURPOSES = 24
MAX_VENDOR_ID = 0xFFFF


@dataclass(frozen=True, slots=True)
class TcfConsent:
    """The decoded content of a core segment (the fields the encoder writes)."""

    created_ds: int
    last_updated_ds: int
    cmp_id: int
    cmp_version: int
    consent_screen: int
    consent_language: str
    """Two letters A-Z, e.g. 'EN'."""
    vendor_list_version: int
    tcf_policy_version: int
    is_service_specific: bool
    use_non_standard_texts: bool
    special_feature_optins: frozenset[int]
    purposes_consent: frozenset[int]
    purposes_li: frozenset[int]
    purpose_one_treatment: bool
    publisher_cc: str
    """Two letters A-Z, e.g. 'GB'."""
    vendor_consents: frozenset[int]
    vendor_li: frozenset[int]


class _BitWriter:
    """Accumulates fixed-width unsigned fields, most significant bit first."""

    def __init__(self) -> None:
        self._value = 0
        self._bits = 0

    def uint(self, value: int, width: int) -> None:
        if not 0 <= value < (1 << width):
            raise ValueError(f"{value} does not fit in {width} bits")
        self._value = (self._value << width) | value
        self._bits += width

    def flag(self, value: bool) -> None:
        self.uint(int(value), 1)

    def letters(self, text: str) -> None:
        if len(text) != 2 or not text.isascii() or not text.isupper():
            raise ValueError(f"{text!r} is not two letters A-Z")
        for char in text:
            self.uint(ord(char) - ord("A"), 6)

    def id_set(self, ids: frozenset[int], width: int) -> None:
        """Ids 1..width as a bit field: id n sets the n-th bit."""
        field = 0
        for n in ids:
            if not 1 <= n <= width:
                raise ValueError(f"id {n} is outside 1..{width}")
            field |= 1 << (width - n)
        self.uint(field, width)

    def to_base64url(self) -> str:
        pad = -self._bits % 8
        data = (self._value << pad).to_bytes((self._bits + pad) // 8, "big")
        return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def encode_tc_string(consent: TcfConsent) -> str:
    """The core segment of ``consent`` as a TC string (base64url, no padding)."""
    out = _BitWriter()
    out.uint(TCF_VERSION, 6)
    out.uint(consent.created_ds, 36)
    out.uint(consent.last_updated_ds, 36)
    out.uint(consent.cmp_id, 12)
    out.uint(consent.cmp_version, 12)
    out.uint(consent.consent_screen, 6)
    out.letters(consent.consent_language)
    out.uint(consent.vendor_list_version, 12)
    out.uint(consent.tcf_policy_version, 6)
    out.flag(consent.is_service_specific)
    out.flag(consent.use_non_standard_texts)
    out.id_set(consent.special_feature_optins, SPECIAL_FEATURES)
    out.id_set(consent.purposes_consent, PURPOSES)
    out.id_set(consent.purposes_li, PURPOSES)
    out.flag(consent.purpose_one_treatment)
    out.letters(consent.publisher_cc)
    _vendor_section(out, consent.vendor_consents)
    _vendor_section(out, consent.vendor_li)
    out.uint(0, 12)  # NumPubRestrictions
    return out.to_base64url()


def _vendor_section(out: _BitWriter, vendors: frozenset[int]) -> None:
    max_id = max(vendors, default=0)
    if max_id > MAX_VENDOR_ID:
        raise ValueError(f"vendor id {max_id} does not fit in 16 bits")
    out.uint(max_id, 16)
    out.flag(False)  # IsRangeEncoding: always a bit field here
    out.id_set(vendors, max_id)
