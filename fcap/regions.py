"""Several regions, one cap: per-region counter slots merged as grow-only counters. Pure.

Theory of operation. With regions on (``bidsim serve --region NAME``), the bidders of a
region count an impression only into their region's *slot* of each counter field: the
field name (``fcap.keys``, docs/fcap.md) followed by ``@<region>``. A slot has one
writer, its region, and only grows: a bucket count only goes up, a recency instant
only moves later (regional mode never releases a reservation). So any copy of a slot
is an earlier value of the same slot, and two copies merge by taking the larger:
commutative, idempotent and monotone, whatever the order, delay or repetition of the
replicated changes (a grow-only counter, one per field). A read sums a bucket's slots
over the regions (a recency field takes the latest instant).

What a region can not see is what the other regions counted less than the replication
delay ago. A person shown ads at ``rate`` per second across the regions is then over a
cap by at most about ``rate x delay`` impressions per window (``over_cap_bound``), on
top of the bids in flight that count-on-win allows in one region already.

The scripts (``fcap/lua/region_*.lua``) do the same merge on the server; this module is
its reference, used by the replicator's convergence audit and the tests.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence

SLOT_SEP = "@"
RECENCY_MARK = "!"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,15}")


def name_problem(name: str) -> str | None:
    """Why ``name`` can't be a region name (None when it can): 1-16 characters of
    a-z, 0-9 and '-', starting with a letter or digit."""
    if _NAME.fullmatch(name):
        return None
    return f"region name {name!r} must be 1-16 of a-z, 0-9 and '-' (not starting with '-')"


def slot(field: str, region: str) -> str:
    """The name of ``region``'s slot of a counter field."""
    return f"{field}{SLOT_SEP}{region}"


def split_slot(name: str) -> tuple[str, str] | None:
    """(field, region) of a slot name; None for a field with no region."""
    field, sep, region = name.rpartition(SLOT_SEP)
    return (field, region) if sep else None


def is_recency(field: str) -> bool:
    return field.endswith(RECENCY_MARK)


def merge(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Two copies of a counter hash's slots, merged: each slot's larger value."""
    out = dict(a)
    for name, value in b.items():
        if value > out.get(name, value - 1):
            out[name] = value
    return out


def read(slots: Mapping[str, int], field: str, regions: Iterable[str]) -> int:
    """What a check reads for ``field``: the sum of its regions' slots (a recency
    field: the latest of them)."""
    values = [slots.get(slot(field, region), 0) for region in regions]
    if is_recency(field):
        return max(values, default=0)
    return sum(values)


def home_region(subject_key: str, regions: Sequence[str]) -> str:
    """The region whose store holds a user's (or household's) counters when cap reads
    are routed home: a stable hash of the key over the sorted region names, so every
    region picks the same home without asking anyone."""
    if not regions:
        raise ValueError("no regions to choose a home from")
    ordered = sorted(regions)
    digest = hashlib.blake2b(subject_key.encode(), digest_size=8).digest()
    return ordered[int.from_bytes(digest, "big") % len(ordered)]


def over_cap_bound(rate_per_s: float, delay_s: float) -> int:
    """The impressions a person can get above a cap through replication delay alone:
    those shown in other regions within one delay, at most ``ceil(rate x delay)``."""
    if rate_per_s < 0 or delay_s < 0:
        raise ValueError("rate and delay must be 0 or more")
    return math.ceil(rate_per_s * delay_s)
