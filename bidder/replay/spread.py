"""Spreading one stream across regions: which region's bidder each request goes to. Pure.

A real DSP is reached by each SSP in the region nearest that SSP's servers, so a
person's requests land in several regions when they come through several SSPs:
``by_ssp`` sends every SSP to one region (SSPs in name order, dealt out round robin).
``by_share`` sends each request to a region drawn by its shares, from a hash of the
request's position and timestamp (the same stream always splits the same way).

Each part keeps its records' ``t_ms``, so replaying the parts at the same speed at the
same time keeps the stream's own timeline across the regions.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate

from bidder.bidstream.stream import StreamRecord


def by_ssp(
    records: Iterable[StreamRecord], regions: Sequence[str]
) -> dict[str, list[StreamRecord]]:
    if not regions:
        raise ValueError("no regions to spread over")
    records = list(records)
    ssps = sorted({record.ssp for record in records})
    region_of = {ssp: regions[n % len(regions)] for n, ssp in enumerate(ssps)}
    parts: dict[str, list[StreamRecord]] = {region: [] for region in regions}
    for record in records:
        parts[region_of[record.ssp]].append(record)
    return parts


def by_share(
    records: Iterable[StreamRecord], shares: Mapping[str, float]
) -> dict[str, list[StreamRecord]]:
    """``shares``: region -> weight (positive; normalized here)."""
    if not shares or any(weight <= 0 for weight in shares.values()):
        raise ValueError("shares must name at least one region, each with a weight above 0")
    regions = sorted(shares)
    total = sum(shares.values())
    edges = list(accumulate(shares[region] / total for region in regions))
    parts: dict[str, list[StreamRecord]] = {region: [] for region in regions}
    for n, record in enumerate(records):
        digest = hashlib.blake2b(f"{n}:{record.ts}".encode(), digest_size=8).digest()
        draw = int.from_bytes(digest, "big") / 2**64
        parts[regions[min(bisect_right(edges, draw), len(regions) - 1)]].append(record)
    return parts


def parse_shares(text: str) -> dict[str, float]:
    """``eu=0.6,us=0.4`` -> {"eu": 0.6, "us": 0.4}; ValueError naming a bad item."""
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, weight = item.partition("=")
        try:
            out[name.strip()] = float(weight) if sep else float("nan")
        except ValueError:
            out[name.strip()] = float("nan")
        if not out[name.strip()] > 0:
            raise ValueError(f"region share must be NAME=WEIGHT with WEIGHT above 0, got {item!r}")
    return out
