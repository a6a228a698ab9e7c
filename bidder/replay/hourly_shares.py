"""Shares per simulated hour, and the hours in which two replays' shares differ most.

A live day and its ``--supply-from`` replay are compared hour by hour on a share (of
requests their caps refused, of requests shed for load); the report names the few hours
where one side's share is furthest above the other's.
"""

from __future__ import annotations

from collections.abc import Sequence

WIDEST_HOURS = 3


def hourly_shares(
    parts: Sequence[int], totals: Sequence[int], min_total: int
) -> list[float | None]:
    """``part / total`` per hour to 4 decimals; None where ``total`` is under ``min_total``
    (a share of a handful is noise)."""
    return [
        round(part / total, 4) if total >= min_total else None
        for part, total in zip(parts, totals, strict=True)
    ]


def widest_hours(
    above: Sequence[float | None], below: Sequence[float | None], gap: float
) -> list[tuple[int, float, float]]:
    """``(hour, above, below)`` for at most ``WIDEST_HOURS`` hours in which ``above``
    exceeds ``below`` by more than ``gap``, widest first (the earlier hour on a tie)."""
    gaps = [
        (high - low, hour, high, low)
        for hour, (high, low) in enumerate(zip(above, below, strict=True))
        if high is not None and low is not None and high - low > gap
    ]
    gaps.sort(key=lambda found: (-found[0], found[1]))
    return [(hour, high, low) for _, hour, high, low in gaps[:WIDEST_HOURS]]


__all__ = ["WIDEST_HOURS", "hourly_shares", "widest_hours"]
