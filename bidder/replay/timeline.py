"""Requests and answers per second over a replay, warm-up included.

A request counts in the second of its intended send (what the exchange offered), an
answer or a timeout in the second it arrived or was abandoned (what came back), both
counted from the replay's first intended send. Counting is an index and an addition
per request, so it stays on the replay's hot path; plotting happens after the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SERIES = ("sent", "bids", "no_bids", "timeouts", "errors")
"""``errors``: transport errors and answers other than 200 and 204."""


@dataclass(slots=True)
class Timeline:
    counts: dict[str, list[int]] = field(default_factory=lambda: {name: [] for name in SERIES})

    def add(self, series: str, offset_ns: int) -> None:
        """One event of ``series`` at ``offset_ns`` after the first intended send."""
        counts = self.counts[series]
        second = max(offset_ns, 0) // 1_000_000_000
        if second >= len(counts):
            counts.extend([0] * (second + 1 - len(counts)))
        counts[second] += 1

    def add_answer(self, status: int, offset_ns: int) -> None:
        series = "bids" if status == 200 else "no_bids" if status == 204 else "errors"
        self.add(series, offset_ns)


def timeline_json(timeline: Timeline, warmup_s: float) -> dict[str, Any]:
    """Equal-length series, one value per second, and where the warm-up ends."""
    seconds = max(len(counts) for counts in timeline.counts.values())
    padded = {
        name: counts + [0] * (seconds - len(counts)) for name, counts in timeline.counts.items()
    }
    return {"seconds": seconds, "warmup_s": warmup_s, **padded}
