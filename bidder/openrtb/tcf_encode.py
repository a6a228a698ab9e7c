"""The TCF v2 encoder: a ``TcfConsent`` as a core-segment TC string.

The bit layout is ``bidder.openrtb.tcf.LAYOUT``, shared with the decoder so the two
cannot drift apart. The bidder only decodes; the bidstream generator and the tests
encode.
"""

from __future__ import annotations

import base64

from bidder.openrtb.tcf import LAYOUT, MAX_VENDOR_ID, TCF_VERSION, TcfConsent


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

    def letters(self, text: str) -> None:
        if len(text) != 2 or not text.isascii() or not text.isupper() or not text.isalpha():
            raise ValueError(f"{text!r} is not two letters A-Z")
        self.uint((ord(text[0]) - 65) << 6 | (ord(text[1]) - 65), 12)

    def id_set(self, ids: frozenset[int], width: int) -> None:
        """Ids 1..width as a bit field: id n sets the n-th bit."""
        field = 0
        for n in ids:
            if not 1 <= n <= width:
                raise ValueError(f"id {n} is outside 1..{width}")
            field |= 1 << (width - n)
        self.uint(field, width)

    def ranges(self, ids: frozenset[int]) -> None:
        """NumEntries(12) then each run of consecutive ids as one entry."""
        runs = _runs(sorted(ids))
        self.uint(len(runs), 12)
        for start, end in runs:
            self.uint(int(start != end), 1)
            self.uint(start, 16)
            if start != end:
                self.uint(end, 16)

    def to_base64url(self) -> str:
        pad = -self._bits % 8
        data = (self._value << pad).to_bytes((self._bits + pad) // 8, "big")
        return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in ids:
        if runs and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def encode_tc_string(consent: TcfConsent, *, range_encoding: bool = False) -> str:
    """The core segment of ``consent`` as a TC string (base64url, no padding).

    Vendor sections are bit fields unless ``range_encoding`` (both forms are valid TCF;
    the decoder reads either).
    """
    out = _BitWriter()
    values = {f.name: getattr(consent, f.name) for f in _FIELDS}
    values["version"] = TCF_VERSION
    for name, width in LAYOUT:
        value = values[name]
        if name in ("consent_language", "publisher_cc"):
            out.letters(value)
        elif isinstance(value, frozenset):
            out.id_set(value, width)
        else:
            out.uint(int(value), width)
    _vendor_section(out, consent.vendor_consents, range_encoding)
    _vendor_section(out, consent.vendor_li, range_encoding)
    out.uint(len(consent.pub_restrictions), 12)
    for restriction in consent.pub_restrictions:
        out.uint(restriction.purpose, 6)
        out.uint(restriction.restriction_type, 2)
        out.ranges(restriction.vendors)
    return out.to_base64url()


_FIELDS = TcfConsent.__dataclass_fields__.values()


def _vendor_section(out: _BitWriter, vendors: frozenset[int], range_encoding: bool) -> None:
    max_id = max(vendors, default=0)
    if max_id > MAX_VENDOR_ID:
        raise ValueError(f"vendor id {max_id} does not fit in 16 bits")
    out.uint(max_id, 16)
    out.uint(int(range_encoding), 1)
    if range_encoding:
        out.ranges(vendors)
    else:
        out.id_set(vendors, max_id)
