"""The circuit breaker: pause a campaign whose spend runs far ahead of its target.

Each reconciler tick reports the spend applied in the interval just ended and the
target spend of that interval (from the curve). The breaker trips when the spend has
been above ``ratio`` x target in every interval for ``window_s`` seconds in a row
(by default 3x for 60 s). A tripped breaker stays open for the rest of the pacing day
(or until ``reset``): a runaway is a bug to look at, not a blip to retry.
"""

from __future__ import annotations


class Breaker:
    __slots__ = ("_over_since", "ratio", "tripped_at", "window_s")

    def __init__(self, ratio: float = 3.0, window_s: float = 60.0) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self._over_since: float | None = None
        self.tripped_at: float | None = None

    @property
    def open(self) -> bool:
        """True once tripped: the campaign must not spend."""
        return self.tripped_at is not None

    def observe(self, now_s: float, dt: float, spend: int, target: int) -> bool:
        """Record one interval (``now_s - dt``, ``now_s``]; True if this call trips it."""
        if self.open:
            return False
        if spend > self.ratio * max(target, 0) and spend > 0:
            if self._over_since is None:
                self._over_since = now_s - dt
            if now_s - self._over_since >= self.window_s - 1e-9:
                self.tripped_at = now_s
                return True
        else:
            self._over_since = None
        return False

    def reset(self) -> None:
        self._over_since = None
        self.tripped_at = None
