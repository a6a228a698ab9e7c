"""The options of a replay: pace, timeouts, the exchange's market and notice behaviour.

Validated when made (every problem in one ``ValueError``), so a bad option fails
before the replay starts, not in the middle of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bidder.bidstream.auction import Market
from bidder.replay.campaign_outcomes import Budget
from bidder.replay.schedule import Pacing
from bidder.replay.slowest import SLOWEST_KEPT
from bidder.replay.throttle import ThrottleRule
from bidder.replay.viewability import DEFAULT_RATES
from bidder.supply.path import DEFAULT_POLICY, PathPolicy
from fcap.rules import Subject

DEFAULT_CONNECTIONS = 128


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    speed: float = 1.0
    rate: float | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    timeout_ms: float = 100.0
    deadline_ms: float = 8.0
    max_connections: int = 512
    connections: int = DEFAULT_CONNECTIONS
    """Connections to the bidder kept open and used in turn (``HttpPool``'s ``spread``;
    at most ``max_connections``), as an exchange's servers keep theirs: the kernel places
    connections, not requests, on a bidder's workers (128 over two workers: 47-48% of
    the requests to the less busy one, measured; one connection reused while idle sent
    88% to one worker). 1 opens connections only as the requests in flight need them."""
    market: Market = field(default_factory=Market)
    notices: bool = True
    notice_timeout_ms: float = 1000.0
    notice_drain_s: float = 5.0
    notice_connections: int = 64
    duplicate_notices: float = 0.0
    """Share (0-1) of wins whose exchange sends one of their notices twice."""
    reorder_notices: bool = False
    """Bill before win for half the wins; each win's notices start at a random point
    inside ``notice_window_ms``, so notices of different wins interleave."""
    notice_window_ms: float = 250.0
    """The reordering window; late duplicates go 1-1.5 windows after their win's start."""
    path_policy: PathPolicy = DEFAULT_POLICY
    """The bidder's supply-path preferences: ranks copies in the duplicate-auctions report."""
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    """The campaigns' budgets and curves, by id: spend against budget and target."""
    throttle: ThrottleRule | None = None
    """The exchange's response-rate rule (``throttle``); None: every request is sent."""
    view_rates: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RATES))
    """Share of wins per format that become viewable (``viewability``)."""
    stage_times: float = 0.0
    """Share (0-1) of requests that ask the bidder for its stage times (``slowest``)."""
    slowest: int = SLOWEST_KEPT
    """How many of the slowest answers with stage times the report lists (JSON)."""
    campaign_trace: bool = False
    """Every request asks the bidder what it decided per campaign (``campaign_outcomes``)."""
    cap_subjects: Mapping[tuple[str, str], Subject] = field(default_factory=dict)
    """The campaign file's cap subjects: the won impressions are audited against them
    (``over_cap``); empty: no audit."""

    def __post_init__(self) -> None:
        positive = (
            "timeout_ms",
            "deadline_ms",
            "notice_timeout_ms",
            "max_connections",
            "connections",
            "notice_connections",
        )
        problems = [f"{name} must be positive" for name in positive if not getattr(self, name) > 0]
        problems += [
            f"{name} must not be negative"
            for name in ("warmup_s", "notice_drain_s", "notice_window_ms")
            if getattr(self, name) < 0
        ]
        if self.slowest < 0:
            problems.append(f"slowest must not be negative, got {self.slowest}")
        if not 0 <= self.stage_times <= 1:
            problems.append(f"stage_times must be 0-1, got {self.stage_times}")
        if not 0 <= self.duplicate_notices <= 1:
            problems.append(f"duplicate_notices must be 0-1, got {self.duplicate_notices}")
        problems += [
            f"view rate of {fmt} must be 0-1, got {rate}"
            for fmt, rate in self.view_rates.items()
            if not 0 <= rate <= 1
        ]
        if problems:
            raise ValueError("; ".join(problems))
        Pacing(self.speed, self.rate, self.duration_s)  # raises now for a bad pace, not mid-replay

    @property
    def pacing(self) -> Pacing:
        return Pacing(speed=self.speed, rate=self.rate, duration_s=self.duration_s)
