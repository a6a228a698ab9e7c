"""The exchange's response-rate rule: a bidder that answers late gets fewer requests. Pure.

Large exchanges watch each bidder's share of answers that arrive within ``tmax`` and
cut the traffic they send to one that falls behind, then give it back step by step
once it recovers. The replay's exchange model does the same (``Throttle``):

- every ``step_s`` it judges the answers of the last ``window_s``: an answer is on
  time when it is a 200 or a 204 that arrived within ``tmax`` (the replay's timeout);
  a timeout or a transport error is not;
- below ``threshold`` (with at least ``min_answers`` judged) it multiplies the share
  of requests it sends by ``cut`` (never below ``floor``), and forgets the window, so
  the next cut needs fresh evidence at the new rate;
- at or above it (or with nothing to judge) it raises the share by ``restore`` up to 1.

Which requests are withheld is deterministic: a credit grows by the share at each
request and a request is sent when the credit reaches 1, so over ``n`` requests at a
steady share ``s`` about ``n * s`` are sent, evenly spread.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ThrottleRule:
    threshold: float = 0.85
    window_s: float = 10.0
    step_s: float = 1.0
    min_answers: int = 20
    cut: float = 0.5
    floor: float = 0.1
    restore: float = 0.1

    def __post_init__(self) -> None:
        problems = [
            f"throttle {name} must be in (0, 1], got {getattr(self, name)}"
            for name in ("threshold", "cut", "floor", "restore")
            if not 0 < getattr(self, name) <= 1
        ]
        problems += [
            f"throttle {name} must be positive, got {getattr(self, name)}"
            for name in ("window_s", "step_s", "min_answers")
            if not getattr(self, name) > 0
        ]
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(slots=True)
class Throttle:
    """The rule's state over one replay; times are seconds from the replay's start."""

    rule: ThrottleRule
    share: float = 1.0
    """The share of requests sent now."""
    changes: list[tuple[float, float]] = field(default_factory=list)
    """(time, share) at each change of the share."""
    _answers: collections.deque[tuple[float, bool]] = field(default_factory=collections.deque)
    _next_step: float = 0.0
    _credit: float = 0.0

    def record(self, at_s: float, on_time: bool) -> None:
        """One answer (or its absence: a timeout, an error) judged at ``at_s``."""
        self._answers.append((at_s, on_time))

    def admit(self, at_s: float) -> bool:
        """Whether the request due at ``at_s`` is sent (False: withheld)."""
        while at_s >= self._next_step:
            self._judge(self._next_step)
            self._next_step += self.rule.step_s
        self._credit += self.share
        if self._credit >= 1.0:
            self._credit -= 1.0
            return True
        return False

    def on_time_share(self, at_s: float) -> float | None:
        """The share of on-time answers in the window ending at ``at_s``; None if none."""
        answers = self._answers
        while answers and answers[0][0] < at_s - self.rule.window_s:
            answers.popleft()
        if not answers:
            return None
        return sum(ok for _, ok in answers) / len(answers)

    def _judge(self, at_s: float) -> None:
        share, rule = self.on_time_share(at_s), self.rule
        if share is not None and share < rule.threshold and len(self._answers) >= rule.min_answers:
            self._set(at_s, max(rule.floor, self.share * rule.cut))
            self._answers.clear()
        elif self.share < 1.0 and (share is None or share >= rule.threshold):
            self._set(at_s, min(1.0, self.share + rule.restore))

    def _set(self, at_s: float, share: float) -> None:
        share = round(share, 6)  # so that restore steps add up to exactly 1
        if share != self.share:
            self.share = share
            self.changes.append((round(at_s, 3), share))
