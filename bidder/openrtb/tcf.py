"""IAB TCF v2 consent strings: the core segment's bit layout, one encoder, one decoder.

A TC string is one or more segments joined by '.'; the first is the core segment. Each
segment is a bit field written most-significant bit first, padded with zero bits to a
whole byte and encoded as base64url without padding. The core segment holds, in spec
order: Version(6)=2, Created(36) and LastUpdated(36) in deciseconds since the epoch,
CmpId(12), CmpVersion(12), ConsentScreen(6), ConsentLanguage(12, two letters of 6 bits,
A=0), VendorListVersion(12), TcfPolicyVersion(6), IsServiceSpecific(1),
UseNonStandardTexts(1), SpecialFeatureOptIns(12), PurposesConsent(24),
PurposesLITransparency(24), PurposeOneTreatment(1), PublisherCC(12), then the vendor
consent section and the vendor legitimate-interest section, then NumPubRestrictions(12)
and that many publisher restrictions.

A vendor section is MaxVendorId(16) and IsRangeEncoding(1), then either one bit per
vendor id 1..MaxVendorId (bit n of the field is vendor n), or NumEntries(12) entries of
IsARange(1), StartOrOnlyVendorId(16) and, for a range, EndVendorId(16). A publisher
restriction is PurposeId(6), RestrictionType(2: 0 not allowed, 1 require consent, 2
require legitimate interest) and a range list of the vendors it applies to.

The encoder (``bidder.openrtb.tcf_encode``) and the decoder share ``LAYOUT`` so they
cannot drift apart. The decoder is
on the bid path for EU traffic: it turns the string into one big integer and reads
fields by shifting; a vendor bit field stays an integer (membership is one shift), so a
decode costs a few microseconds whatever the number of vendors.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import NamedTuple

TCF_VERSION = 2
SPECIAL_FEATURES = 12
PURPOSES = 24
MAX_VENDOR_ID = 0xFFFF

LAYOUT: tuple[tuple[str, int], ...] = (
    ("version", 6),
    ("created_ds", 36),
    ("last_updated_ds", 36),
    ("cmp_id", 12),
    ("cmp_version", 12),
    ("consent_screen", 6),
    ("consent_language", 12),
    ("vendor_list_version", 12),
    ("tcf_policy_version", 6),
    ("is_service_specific", 1),
    ("use_non_standard_texts", 1),
    ("special_feature_optins", SPECIAL_FEATURES),
    ("purposes_consent", PURPOSES),
    ("purposes_li", PURPOSES),
    ("purpose_one_treatment", 1),
    ("publisher_cc", 12),
)
"""The fixed-width head of the core segment, in spec order: (field, bits)."""
_HEAD_BITS = sum(width for _, width in LAYOUT)


class TcfError(ValueError):
    """The text is not a TCF v2 string this decoder can read; the message says why."""


@dataclass(frozen=True, slots=True)
class PubRestriction:
    purpose: int
    restriction_type: int
    """0 purpose flatly not allowed, 1 require consent, 2 require legitimate interest."""
    vendors: frozenset[int]


@dataclass(frozen=True, slots=True)
class TcfConsent:
    """The content of a core segment, with every id set spelled out."""

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
    pub_restrictions: tuple[PubRestriction, ...] = ()


# -- decoder -------------------------------------------------------------------------------


class VendorSet:
    """A decoded vendor section: a bit field kept as an integer, or a list of ranges."""

    __slots__ = ("_bits", "_max", "_ranges")

    def __init__(self, max_id: int, bits: int, ranges: tuple[tuple[int, int], ...]) -> None:
        self._max, self._bits, self._ranges = max_id, bits, ranges

    def __contains__(self, vendor_id: int) -> bool:
        if not 1 <= vendor_id <= self._max:
            return False
        if self._ranges:
            return any(start <= vendor_id <= end for start, end in self._ranges)
        return bool(self._bits >> (self._max - vendor_id) & 1)

    def ids(self) -> frozenset[int]:
        """Every id in the set (slow for big sets: for tests and tools, not the bid path)."""
        return frozenset(n for n in range(1, self._max + 1) if n in self)


class Restriction(NamedTuple):
    """A decoded publisher restriction; vendors stay ranges (one may span 65,535 ids)."""

    purpose: int
    restriction_type: int
    ranges: tuple[tuple[int, int], ...]

    def covers(self, vendor_id: int) -> bool:
        return any(start <= vendor_id <= end for start, end in self.ranges)


@dataclass(frozen=True, slots=True)
class Core:
    """A decoded core segment; purpose fields stay bit fields (bit n = purpose n)."""

    version: int
    created_ds: int
    last_updated_ds: int
    cmp_id: int
    cmp_version: int
    consent_screen: int
    consent_language: str
    vendor_list_version: int
    tcf_policy_version: int
    is_service_specific: bool
    use_non_standard_texts: bool
    special_feature_optins: int
    purposes_consent: int
    purposes_li: int
    purpose_one_treatment: bool
    publisher_cc: str
    vendor_consents: VendorSet
    vendor_li: VendorSet
    pub_restrictions: tuple[Restriction, ...]

    def purpose_consent(self, purpose: int) -> bool:
        return bool(self.purposes_consent >> (PURPOSES - purpose) & 1)

    def purpose_li(self, purpose: int) -> bool:
        return bool(self.purposes_li >> (PURPOSES - purpose) & 1)

    def to_consent(self) -> TcfConsent:
        """The same content as a ``TcfConsent`` (the encoder's input)."""
        return TcfConsent(
            created_ds=self.created_ds,
            last_updated_ds=self.last_updated_ds,
            cmp_id=self.cmp_id,
            cmp_version=self.cmp_version,
            consent_screen=self.consent_screen,
            consent_language=self.consent_language,
            vendor_list_version=self.vendor_list_version,
            tcf_policy_version=self.tcf_policy_version,
            is_service_specific=self.is_service_specific,
            use_non_standard_texts=self.use_non_standard_texts,
            special_feature_optins=_bit_ids(self.special_feature_optins, SPECIAL_FEATURES),
            purposes_consent=_bit_ids(self.purposes_consent, PURPOSES),
            purposes_li=_bit_ids(self.purposes_li, PURPOSES),
            purpose_one_treatment=self.purpose_one_treatment,
            publisher_cc=self.publisher_cc,
            vendor_consents=self.vendor_consents.ids(),
            vendor_li=self.vendor_li.ids(),
            pub_restrictions=tuple(
                PubRestriction(r.purpose, r.restriction_type, _range_ids(r.ranges))
                for r in self.pub_restrictions
            ),
        )


def _bit_ids(field: int, width: int) -> frozenset[int]:
    return frozenset(n for n in range(1, width + 1) if field >> (width - n) & 1)


class _BitReader:
    __slots__ = ("pos", "size", "value")

    def __init__(self, value: int, size: int) -> None:
        self.value, self.size, self.pos = value, size, 0

    def uint(self, width: int) -> int:
        end = self.pos + width
        if end > self.size:
            raise TcfError("TC string ends inside a field")
        self.pos = end
        return (self.value >> (self.size - end)) & ((1 << width) - 1)

    def ranges(self) -> tuple[tuple[int, int], ...]:
        out = []
        for _ in range(self.uint(12)):
            is_range = self.uint(1)
            start = self.uint(16)
            end = self.uint(16) if is_range else start
            if not 1 <= start <= end:
                raise TcfError(f"bad vendor range {start}-{end}")
            out.append((start, end))
        return tuple(out)

    def vendors(self) -> VendorSet:
        max_id = self.uint(16)
        if self.uint(1):
            ranges = self.ranges()
            if any(end > max_id for _, end in ranges):
                raise TcfError("vendor range beyond MaxVendorId")
            # An empty range list is an empty set: keep a sentinel the lookup never matches.
            return VendorSet(max_id, 0, ranges or ((0, -1),))
        return VendorSet(max_id, self.uint(max_id), ())


def decode_core(text: str) -> Core:
    """Decode the core segment of a TC string; raises TcfError."""
    bits = _BitReader(*_core_bits(text))
    head = {name: bits.uint(width) for name, width in LAYOUT}
    vendor_consents, vendor_li = bits.vendors(), bits.vendors()
    restrictions = tuple(
        Restriction(bits.uint(6), bits.uint(2), bits.ranges()) for _ in range(bits.uint(12))
    )
    return Core(
        version=head["version"],
        created_ds=head["created_ds"],
        last_updated_ds=head["last_updated_ds"],
        cmp_id=head["cmp_id"],
        cmp_version=head["cmp_version"],
        consent_screen=head["consent_screen"],
        consent_language=_letters(head["consent_language"]),
        vendor_list_version=head["vendor_list_version"],
        tcf_policy_version=head["tcf_policy_version"],
        is_service_specific=bool(head["is_service_specific"]),
        use_non_standard_texts=bool(head["use_non_standard_texts"]),
        special_feature_optins=head["special_feature_optins"],
        purposes_consent=head["purposes_consent"],
        purposes_li=head["purposes_li"],
        purpose_one_treatment=bool(head["purpose_one_treatment"]),
        publisher_cc=_letters(head["publisher_cc"]),
        vendor_consents=vendor_consents,
        vendor_li=vendor_li,
        pub_restrictions=restrictions,
    )


def _core_bits(text: str) -> tuple[int, int]:
    """The core segment as (integer, bit count), its version and length checked."""
    segment = text.split(".", 1)[0]
    try:
        data = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise TcfError("not base64url") from None
    if not data:
        raise TcfError("empty TC string")
    if data[0] >> 2 != TCF_VERSION:
        raise TcfError(f"TCF version {data[0] >> 2}, not 2")
    if len(data) * 8 < _HEAD_BITS:
        raise TcfError("TC string too short")
    return int.from_bytes(data, "big"), len(data) * 8


def _range_ids(ranges: tuple[tuple[int, int], ...]) -> frozenset[int]:
    return frozenset(n for start, end in ranges for n in range(start, end + 1))


def _letters(field: int) -> str:
    first, second = field >> 6, field & 63
    if first > 25 or second > 25:
        raise TcfError("a two-letter code is outside A-Z")
    return chr(65 + first) + chr(65 + second)


# -- the bid path's view ---------------------------------------------------------------------


class VendorView(NamedTuple):
    """What one vendor needs from a TC string to decide whether it may bid."""

    purposes_consent: int
    """Bit field: purpose n is bit (24 - n)."""
    purposes_li: int
    vendor_consent: bool
    vendor_li: bool
    restrictions: tuple[tuple[int, int], ...]
    """(purpose, restriction type) of each publisher restriction covering the vendor."""


_P_CONSENT = sum(w for _, w in LAYOUT[: [n for n, _ in LAYOUT].index("purposes_consent")])


def vendor_view(text: str, vendor_id: int) -> VendorView:
    """Decode only what ``vendor_id`` needs from the core segment; raises TcfError.

    Reads the same layout as ``decode_core`` and checks the same things (version,
    lengths, ranges), without building the whole segment.
    """
    value, size = _core_bits(text)
    purposes = (value >> (size - _P_CONSENT - 2 * PURPOSES)) & ((1 << 2 * PURPOSES) - 1)
    bits = _BitReader(value, size)
    bits.pos = _HEAD_BITS
    consent, li = bits.vendors(), bits.vendors()
    restrictions = []
    for _ in range(bits.uint(12)):
        purpose, kind, ranges = bits.uint(6), bits.uint(2), bits.ranges()
        if any(start <= vendor_id <= end for start, end in ranges):
            restrictions.append((purpose, kind))
    return VendorView(
        purposes_consent=purposes >> PURPOSES,
        purposes_li=purposes & ((1 << PURPOSES) - 1),
        vendor_consent=vendor_id in consent,
        vendor_li=vendor_id in li,
        restrictions=tuple(restrictions),
    )
