"""The circuit breaker: pause a campaign whose spend runs far ahead of its target.

Each reconciler tick reports the spend applied in the interval just ended and the
target spend of that interval (from the curve). The breaker trips ``window_s`` seconds
(by default 60) after a runaway began, if the spend has stayed above ``ratio`` x target
(3x) since. A tripped breaker stays open for the rest of the pacing day (or until
``reset``): a runaway is a bug to look at, not a blip to retry.

"Stayed above": every interval is over the ratio, with one tolerance. Spend reaches the
reconciler in lumps (a producer stalls, a batch lands just after a tick reads), so one
interval under the ratio does not end a runaway while the spend since it began is still
above ``ratio`` x the target since then; a second interval under it in a row does. So a
lone spike followed by normal spend is forgotten after two intervals, and spend that
alternates between 3.5x and 1x (2.25x overall) never trips.

When did it begin? Ticks do not line up with a runaway: one that starts late in an
interval may leave that interval under the ratio, so the first interval over it can
start up to one interval after the runaway did. The breaker therefore dates the
runaway from the start of the last interval that ended a streak (or of the first
interval over, when there was none before it): the earliest it can have begun, so the
pause comes within ``window_s`` of the real start whatever its phase against the
ticks. And it trips at the last tick before the pause would be late: when the next
tick, one interval like the last one away, would come after ``window_s``. The price:
the evidence can be up to two intervals shorter than ``window_s`` (50-55 s of the
default 60 at 5 s ticks; 58-59 s at the chaos suite's 1 s ticks). Counting from the
first over interval and tripping at the first tick past the window made a live
runaway pause up to 1.1 s late at 1 s ticks (reconciler ticks are not exactly 1 s).
"""

from __future__ import annotations


class Breaker:
    __slots__ = (
        "_calm_since",
        "_over_since",
        "_streak_spend",
        "_streak_target",
        "_under",
        "ratio",
        "tripped_at",
        "window_s",
    )

    def __init__(self, ratio: float = 3.0, window_s: float = 60.0) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self._over_since: float | None = None
        """When the current runaway began (dated as the module doc says); None: no streak."""
        self._calm_since: float | None = None
        """Start of the interval that last ended a streak: the earliest a runaway can begin."""
        self._streak_spend = 0
        self._streak_target = 0
        self._under = False
        """The streak's previous interval was under the ratio (its one tolerance used)."""
        self.tripped_at: float | None = None

    @property
    def open(self) -> bool:
        """True once tripped: the campaign must not spend."""
        return self.tripped_at is not None

    def observe(self, now_s: float, dt: float, spend: int, target: int) -> bool:
        """Record one interval (``now_s - dt``, ``now_s``]; True if this call trips it."""
        if self.open:
            return False
        target = max(target, 0)
        over = spend > self.ratio * target and spend > 0
        if self._over_since is None:
            if not over:
                self._calm_since = now_s - dt
                return False
            self._over_since = now_s - dt if self._calm_since is None else self._calm_since
            self._streak_spend = self._streak_target = 0
        self._streak_spend += spend
        self._streak_target += target
        if not over:
            still = self._streak_spend > self.ratio * self._streak_target
            if self._under or not still:
                self._end_streak(now_s - dt)
                return False
        self._under = not over
        # Trip now if the next tick (one more interval like this one) would come after the
        # pause is due: ticks are discrete, and the promise is a pause *within* window_s.
        if now_s + dt - self._over_since > self.window_s + 1e-9:
            self.tripped_at = now_s
            return True
        return False

    def reset(self) -> None:
        self._end_streak(None)
        self.tripped_at = None

    def _end_streak(self, calm_since: float | None) -> None:
        self._over_since = None
        self._calm_since = calm_since
        self._under = False
