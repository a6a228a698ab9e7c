"""Whether the reconciler may grant budget while the spend stream's consumer lags.

Theory of operation. Leases are sized from the spend the reconciler has applied; spend
still in the stream is spend it cannot see. While the consumer is a few seconds behind
that is the ordinary delay of a tick, but once it is further behind than the threshold
(default 10 s), every new grant is budget handed out against a spend figure that is
known to be stale, and the nodes could spend the same money twice over. So the
reconciler *holds*: it writes no new or renewed lease, and the leases already out
expire on their own two ticks later, which bounds what nodes spend unseen to what those
leases hold, the same bound as a stalled reconciler (``pacing.lease``).

Holding starts when the lag is above the threshold and ends when it is at most half of
it: a lag hovering at the threshold would otherwise grant every other tick, and a lease
lives two ticks, so nodes would never stop. The lag is the spend stream's own figure
(Kinesis ``MillisBehindLatest`` of the last page read per shard; the largest shard
counts).

Below the threshold the lag still says how stale the spend figure is: a read that
began at ``t`` and ended ``lag`` behind the tip holds every debit that reached the
stream before ``t - lag``, and so every debit made before ``t - lag - ledger delay``
(the producer's bound from debit to stream). That instant, the ledger's *watermark*,
tells the lease book when a lease's spend is all applied (``applied_through_ms``).
Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_THRESHOLD_S = 10.0
DEFAULT_LEDGER_DELAY_S = 0.25
"""How long (real time) after a debit its ledger entry may reach the stream: the
producer lingers 0.1 s before a put that is not a full batch
(``bidder.winloop.spend_stream``), plus the put itself. On a 5 s tick any allowance
below the tick less the lag holds a lease in the cap the same one tick past its
expiry; on a simulated clock it counts ``speed`` x as much (docs/pacing.md)."""


def applied_through_ms(read_at_ms: int, lag_ms: int, ledger_delay_ms: int) -> int:
    """The ledger's watermark: every debit made before it is in the spend applied by a
    read that began at ``read_at_ms`` and ended ``lag_ms`` behind the stream's tip, when
    a debit reaches the stream at most ``ledger_delay_ms`` after it was made. The lease
    book keeps an expired lease in its cap until the watermark passes its expiry
    (``pacing.lease``)."""
    return read_at_ms - max(lag_ms, 0) - max(ledger_delay_ms, 0)


def holds(holding: bool, lag_ms: int, threshold_ms: int) -> bool:
    """Whether to hold grants this tick, given whether the last tick held."""
    if lag_ms > threshold_ms:
        return True
    return holding and lag_ms > threshold_ms // 2


@dataclass(frozen=True, slots=True)
class LagDecision:
    lag_ms: int
    hold: bool
    started: bool
    """This tick starts a hold (the last one granted)."""
    cleared: bool
    """This tick ends a hold (the last one held)."""


class LagGate:
    """The hold state across ticks: call ``observe`` once per tick with the lag read."""

    __slots__ = ("holding", "threshold_ms")

    def __init__(self, threshold_ms: int) -> None:
        if threshold_ms < 1:
            raise ValueError(f"the lag threshold must be at least 1 ms, got {threshold_ms}")
        self.threshold_ms = threshold_ms
        self.holding = False

    def observe(self, lag_ms: int) -> LagDecision:
        was, self.holding = self.holding, holds(self.holding, lag_ms, self.threshold_ms)
        return LagDecision(lag_ms, self.holding, self.holding and not was, was and not self.holding)
