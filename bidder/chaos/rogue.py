"""A rogue node: ledger entries for one campaign put straight into the spend stream.

What a bidder node with a pacing bug would do: bill a campaign far faster than its
target curve allows, bypassing leases. The entries are well-formed ``LedgerEntry``
records with Snowflake ids of their own worker id (``ROGUE_NODE``), so the audit can
tell them from the bidder's own, and the reconciler applies them like any other.
"""

from __future__ import annotations

import threading
import time

from bidder.adapters.aws import aws_client
from bidder.core.campaigns import Campaign
from bidder.core.ledger import LedgerEntry
from bidder.serve.settings import Settings
from bidder.winloop.spend_stream import KinesisStream
from ids.snowflake import MAX_SEQUENCE, MAX_WORKER, compose
from pacing.curves import second_of_day
from pacing.reconcile import budget_of

ROGUE_NODE = MAX_WORKER
"""Workers lease the lowest free worker ids; the rogue takes the highest."""


def target_micros_per_s(campaign: Campaign, wall_ms: int) -> int:
    """The campaign's target spend over the coming second, from its curve (at least 1)."""
    budget = budget_of(campaign)
    now_s = second_of_day(wall_ms)
    total = budget.daily_budget_micros
    return max(
        1, budget.curve.target_micros(total, now_s + 1) - budget.curve.target_micros(total, now_s)
    )


class RogueNode:
    """Puts ``micros_per_s`` of spend for ``campaign`` every ``every_s`` on a thread."""

    def __init__(
        self, settings: Settings, campaign: Campaign, micros_per_s: int, every_s: float = 0.25
    ) -> None:
        client = aws_client("kinesis", settings.aws_endpoint or "", settings.aws_region)
        self._stream = KinesisStream(client, settings.spend_stream)
        self._campaign = campaign
        self._cost = max(1, round(micros_per_s * every_s))
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rogue-node", daemon=True)
        self._sequence = 0
        self.first_ms: int | None = None
        self.spent_micros = 0
        self.entries = 0
        self.errors = 0

    def __enter__(self) -> RogueNode:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            entry = self._entry(time.time_ns() // 1_000_000)
            try:
                if self._stream.put([entry]) == [True]:
                    self.first_ms = self.first_ms or entry.ts_ms
                    self.spent_micros += entry.cost_micros
                    self.entries += 1
            except Exception:  # the stream is ours to break elsewhere; count and go on
                self.errors += 1
            self._stop.wait(self._every_s)

    def _entry(self, now_ms: int) -> LedgerEntry:
        self._sequence = (self._sequence + 1) % (MAX_SEQUENCE + 1)
        snowflake = compose(now_ms, ROGUE_NODE, self._sequence)
        c = self._campaign
        return LedgerEntry(
            ledger_id=snowflake, kind="bill", campaign_id=c.id, advertiser=c.advertiser,
            creative_id="rogue", imp_id="1", bid_id=str(snowflake),
            price_cpm_micros=self._cost * 1000, cost_micros=self._cost, node=ROGUE_NODE,
            ts_ms=now_ms,
        )  # fmt: skip
