"""Per-stage times of one bid request, recorded only when the request asks for them.

A request carrying ``X-Stage-Times: 1`` is answered with ``X-Stage-Times`` listing
each step it went through and the microseconds it took, in order:
``read=41.2;ConsentStage=3.1;...;respond=9.8``. ``read`` is the body read and
parse, each pipeline stage is named by its class, ``respond`` builds the bid. The
replay asks for them and joins them to its own latency by request, so its slowest
answers come with the stage that made them slow (``bidder.replay.slowest``).

Requests that don't ask pay for one header lookup and a None check per stage; a
timed request adds one ``perf_counter_ns`` per step and the header.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

HEADER = "X-Stage-Times"


@dataclass(slots=True)
class StageTimes:
    last_ns: int = field(default_factory=time.perf_counter_ns)
    spans: list[tuple[str, int]] = field(default_factory=list)

    def mark(self, name: str) -> None:
        """The step ``name`` ended now; it began when the previous one ended."""
        now = time.perf_counter_ns()
        self.spans.append((name, now - self.last_ns))
        self.last_ns = now

    def header(self) -> str:
        return ";".join(f"{name}={ns / 1000:.1f}" for name, ns in self.spans)


def parse_header(value: str) -> list[tuple[str, float]]:
    """The steps of an ``X-Stage-Times`` answer header, (name, µs); malformed parts dropped."""
    steps = []
    for part in value.split(";"):
        name, _, micros = part.partition("=")
        try:
            steps.append((name.strip(), float(micros)))
        except ValueError:
            continue
    return steps
