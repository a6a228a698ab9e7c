"""The floor under every latency figure: how late this machine wakes a sleeping thread
when nothing of ours is running.

A thread sleeps ``period_s`` over and over and records how late each wake-up came.
On an idle machine the lateness is the operating system's and the hypervisor's own:
a virtual CPU the host takes away for a while stalls every process on it, whatever
the bidder does. ``steady`` measures it with its stack up but before any worker
starts, and reports it beside the acceptance figure. The scale: at 400 req/s one
16 ms stall delays about 6 answers past an 8 ms deadline, while 0.01% of the 5,200
requests ``steady`` measures is half an answer. (This project's 2-core machine, idle,
stalled past 8 ms once or twice a minute: figures and command in docs/reliability.md.)
"""

from __future__ import annotations

import time
from collections.abc import Sequence

PERIOD_S = 0.001
BOUNDS_MS = (2.0, 4.0, 8.0)


def wake_lateness(duration_s: float, period_s: float = PERIOD_S) -> list[float]:
    """Sleep ``period_s`` again and again for ``duration_s``; each wake-up's lateness
    in seconds. Blocking: run it on a thread or before the event loop starts."""
    lateness: list[float] = []
    end = time.perf_counter() + duration_s
    while (start := time.perf_counter()) < end:
        time.sleep(period_s)
        lateness.append(max(0.0, time.perf_counter() - start - period_s))
    return lateness


def summarize(
    lateness_s: Sequence[float], duration_s: float, bounds_ms: Sequence[float] = BOUNDS_MS
) -> dict[str, object]:
    """Wake-ups, how many came later than each bound (also per minute), the worst."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    over = {f"{bound:g}": sum(late * 1000 > bound for late in lateness_s) for bound in bounds_ms}
    return {
        "duration_s": duration_s,
        "wakeups": len(lateness_s),
        "later_than_ms": over,
        "later_than_ms_per_min": {k: round(n * 60 / duration_s, 2) for k, n in over.items()},
        "max_ms": round(max(lateness_s, default=0.0) * 1000, 3),
    }
