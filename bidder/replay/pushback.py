"""What the exchange's response-rate rule did in a replay (``throttle``): the figures.

Requests withheld were due in the schedule but never sent. The spend they would have
brought is estimated at the run's own average: the measured spend per measured request
sent, times the measured requests withheld. It assumes withheld requests were like the
sent ones, which holds because the rule withholds evenly spread requests, not chosen ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bidder.replay.throttle import Throttle


@dataclass(slots=True)
class Pushback:
    enabled: bool = False
    withheld: int = 0
    """Measured requests withheld (warm-up ones are left out, as everywhere)."""
    withheld_warmup: int = 0
    changes: list[tuple[float, float]] = field(default_factory=list)
    """(seconds from the start, share of requests sent) at each change."""
    final_share: float = 1.0

    def note(self, throttle: Throttle) -> None:
        self.changes, self.final_share = list(throttle.changes), throttle.share

    def spend_lost_micros(self, sent: int, spend_micros: int) -> int:
        return round(self.withheld * spend_micros / sent) if sent else 0

    @property
    def min_share(self) -> float:
        return min((share for _, share in self.changes), default=1.0)


def pushback_json(p: Pushback, sent: int, spend_micros: int) -> dict[str, Any]:
    """The ``pushback`` object of the replay report's JSON."""
    return {
        "enabled": p.enabled,
        "requests_withheld": p.withheld,
        "requests_withheld_warmup": p.withheld_warmup,
        "estimated_spend_lost_micros": p.spend_lost_micros(sent, spend_micros),
        "spend_lost_estimate": "measured spend per measured request sent x requests withheld",
        "min_share_sent": p.min_share,
        "final_share_sent": p.final_share,
        "share_changes": [[at, share] for at, share in p.changes],
    }


def render_pushback(p: Pushback, sent: int, spend_micros: int) -> str:
    if not p.enabled:
        return "exchange pushback  off (--no-throttle): every scheduled request was sent"
    lost = p.spend_lost_micros(sent, spend_micros)
    due = sent + p.withheld
    share = f"{100 * p.withheld / due:.2f}%" if due else "-"
    return "\n".join(
        [
            f"exchange pushback  withheld {p.withheld:,} requests ({share} of those due)",
            f"  share sent    lowest {100 * p.min_share:.0f}%"
            f"  at the end {100 * p.final_share:.0f}%  ({len(p.changes)} changes)",
            f"  spend lost    ~${lost / 1_000_000:,.6f} ({lost:,} micros; the run's spend per"
            " request sent x withheld)",
        ]
    )
