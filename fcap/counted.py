"""Who has been counted today: a bitmap that lets a loose cap skip reading a person
the bidder has never counted. Pure.

Every counted impression sets one bit per key it counts under (user and household,
``FcapStore.mark_counted``) in the bitmap of the UTC day of the impression (keyed in
``fcap.keys.counted``): bit ``blake2b(key) mod BITS``. A bit that is 0 in a copy of the
bitmap means no impression of that day was counted under any key hashing to it when
the copy was read, so every hour or day bucket of that key was 0 then. Each worker
reads the bitmap every few seconds (``FrequencyCapper.refresh_counted``); a subject of
a class that tolerates stale counts whose caps are all hour or day buckets
(``Subject.zero_room``) then passes a person whose bits are 0 without a read, as if a
read at the copy's instant had found nothing counted: the room is its smallest limit
and the pass stands until the copy is as old as the class allows. A bit that is 1 (the
person was counted, or another key shares the bit) means: read as usual. So a false
positive costs a read, never a wrong pass; a count after the copy is missed for at most
the class's staleness, like the count cache's.

2^20 bits (128 KiB): about 1% of keys share a bit with another when ~10,000 keys have
been counted that day (``1 - exp(-n / BITS)``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

BITS = 1 << 20
DAY_MS = 86_400_000


def day_of(t_ms: int) -> int:
    return t_ms // DAY_MS


def bit_of(key: str) -> int:
    """The bit of ``key`` (Valkey's SETBIT offset: bit 0 is the top bit of byte 0)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"fcap-counted").digest()
    return int.from_bytes(digest, "big") % BITS


@dataclass(frozen=True, slots=True)
class CountedCopy:
    """A worker's copy of one day's bitmap, read at ``read_ms`` (caller's clock)."""

    day: int
    bits: bytes
    read_ms: int

    def never_counted(self, key: str, now_ms: int) -> bool:
        """``key`` had nothing counted today when the copy was read (bit 0); False when
        the copy is of another day than ``now_ms``'s."""
        if day_of(now_ms) != self.day:
            return False
        bit = bit_of(key)
        byte = bit >> 3
        return byte >= len(self.bits) or not self.bits[byte] & (0x80 >> (bit & 7))
