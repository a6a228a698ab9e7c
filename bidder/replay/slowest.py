"""The slowest answers of a replay, explained by the bidder's own per-stage times.

The replay asks a share of its requests (``stage_times``) for the bidder's stage times
(``bidder.pipeline.stage_times``: the ``X-Stage-Times`` request and answer header) and
keeps the ``keep`` slowest answers that carry them, by corrected latency: request id,
SSP, outcome, the latency the exchange saw, and each step the bidder timed. The gap
between the latency and the sum of the steps is time outside the handler: queueing in
the kernel or the event loop, and the network.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import orjson

from bidder.pipeline.stage_times import parse_header

SLOWEST_KEPT = 20
_GOLDEN = 0.6180339887498949


def asks_for_times(seq: int, share: float) -> bool:
    """Whether request number ``seq`` asks for stage times: an even spread of ``share``."""
    return share >= 1.0 or (seq * _GOLDEN) % 1.0 < share


@dataclass(frozen=True, slots=True)
class SlowAnswer:
    corrected_us: int
    request_id: str
    ssp: str
    outcome: str
    """'bid', or the no-bid reason of a 204."""
    steps: tuple[tuple[str, float], ...]
    """(step, µs) in the order the bidder ran them."""

    def to_dict(self) -> dict[str, Any]:
        inside = sum(us for _, us in self.steps)
        return {
            "request_id": self.request_id,
            "ssp": self.ssp,
            "outcome": self.outcome,
            "corrected_ms": round(self.corrected_us / 1000, 3),
            "stages_us": dict(self.steps),
            "outside_handler_ms": round(max(0.0, self.corrected_us - inside) / 1000, 3),
        }


@dataclass(slots=True)
class SlowestAnswers:
    keep: int = SLOWEST_KEPT
    timed: int = 0
    """Answers that carried stage times."""
    _heap: list[tuple[int, int, SlowAnswer]] = field(default_factory=list)

    def offer(
        self, corrected_us: int, body: bytes, ssp: str, outcome: str, header: str, seq: int
    ) -> None:
        """One timed answer; kept while it is among the slowest."""
        self.timed += 1
        if len(self._heap) >= self.keep and (not self._heap or corrected_us <= self._heap[0][0]):
            return
        answer = SlowAnswer(
            corrected_us, _request_id(body), ssp, outcome, tuple(parse_header(header))
        )
        if len(self._heap) < self.keep:
            heapq.heappush(self._heap, (corrected_us, seq, answer))
        else:
            heapq.heapreplace(self._heap, (corrected_us, seq, answer))

    def slowest_first(self) -> list[SlowAnswer]:
        return [answer for _, _, answer in sorted(self._heap, reverse=True)]


def _request_id(body: bytes) -> str:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    return str(doc.get("id", "")) if isinstance(doc, dict) else ""


def slowest_json(slowest: SlowestAnswers) -> dict[str, Any]:
    """The ``slowest_answers`` object of the replay report's JSON."""
    return {
        "timed_answers": slowest.timed,
        "answers": [answer.to_dict() for answer in slowest.slowest_first()],
    }


def render_slowest(slowest: SlowestAnswers, shown: int = 5) -> str:
    lines = [
        f"slowest answers  (of {slowest.timed:,} with the bidder's stage times;"
        " outside: not in any step; the 3 slowest steps, µs)"
    ]
    for answer in slowest.slowest_first()[:shown]:
        top = sorted(answer.steps, key=lambda step: -step[1])[:3]
        steps = "  ".join(f"{name} {us:,.0f}" for name, us in top)
        outside_ms = answer.to_dict()["outside_handler_ms"]
        lines.append(
            f"  {answer.corrected_us / 1000:>8.3f} ms  {answer.request_id[:24]:<24}"
            f"  {answer.ssp:<10} {answer.outcome:<14} outside {outside_ms:>7.3f} ms  {steps}"
        )
    return "\n".join(lines)
