"""What the win path tells of each billed impression (``bidder.winloop.billing.ImpressionSink``).

A sink runs after the impression's ledger entry is durable, so a sink failure never
loses money; it can only leave a counter behind. Both sinks here are idempotent or
local, which is what makes a retry safe:

- ``CapCounter`` counts the impression in every cap scope and window of its
  campaign (``fcap``); the count script refuses a second count of one impression
  id, so a failed count is retried in the background a few times. It also counts
  viewability notices (``on_viewable``) for campaigns whose caps count viewable
  impressions; the same refusal makes a replayed view notice count once.
- ``LeaseDebit`` charges the real cost to the lease of the node that made the bid
  (``pacing.debits``): this node's own in process memory, another's through Valkey,
  and this node's when Valkey does not answer or the bidder has left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from bidder.core.clock import Clock
from bidder.core.tasks import TaskSet
from bidder.core.tokens import NoticeClaims
from bidder.pipeline.campaign_book import CampaignBook
from bidder.winloop.billing import BilledImpression
from fcap import CountOutcome, FcapUnavailable, FrequencyCapper
from ids import decode
from pacing import NodePacer
from pacing.debits import DebitOutbox

log = logging.getLogger(__name__)

COUNT_RETRY_DELAYS_S = (0.5, 2.0, 5.0, 15.0)
"""Background retries of a failed cap count, then it is given up (and logged)."""


class CapCounter:
    def __init__(self, capper: FrequencyCapper, book: CampaignBook, clock: Clock):
        self._capper = capper
        self._book = book
        self._clock = clock
        self._retries = TaskSet()

    async def on_billed(self, impression: BilledImpression) -> None:
        await self._count_or_retry(impression.claims, "win")

    async def on_viewable(self, claims: NoticeClaims) -> CountOutcome | None:
        """Count a verified viewability notice; None when Valkey failed and the count
        is retried in the background."""
        return await self._count_or_retry(claims, "viewable")

    async def _count_or_retry(self, claims: NoticeClaims, event: str) -> CountOutcome | None:
        try:
            return await self._count(claims, event)
        except FcapUnavailable:
            self._retries.spawn(self._retry(claims, event))
            return None

    async def _count(self, claims: NoticeClaims, event: str) -> CountOutcome:
        subject = self._book.cap_subjects.get((claims.campaign_id, claims.creative_id))
        if subject is None:  # the campaign left the book since the bid: nothing caps it now
            return CountOutcome.NOT_COUNTED
        return await self._capper.count(
            str(claims.bid_id),
            subject,
            event,
            claims.user_key,
            claims.household_key,
            impression_ms=claims.issued_ms,
            now_ms=self._clock.wall_ms(),
        )

    async def _retry(self, claims: NoticeClaims, event: str) -> None:
        for delay in COUNT_RETRY_DELAYS_S:
            await asyncio.sleep(delay)
            try:
                await self._count(claims, event)
            except FcapUnavailable:
                continue
            return
        log.error(
            "frequency count (%s) of impression %s (campaign %s) given up after %d retries",
            event,
            claims.bid_id,
            claims.campaign_id,
            len(COUNT_RETRY_DELAYS_S),
        )


ROUTED_DEBIT_TIMEOUT_S = 0.5
"""Below the sink timeout: a debit that can't be sent by then is charged here."""


class LeaseDebit:
    def __init__(
        self,
        pacer: NodePacer,
        worker: Callable[[], int | None] = lambda: None,
        outbox: DebitOutbox | None = None,
    ):
        """``worker``: this process's Snowflake worker id now; ``outbox``: where the
        debits of other workers' bids go (None: every debit is charged here)."""
        self._pacer = pacer
        self._worker = worker
        self._outbox = outbox

    async def on_billed(self, impression: BilledImpression) -> None:
        campaign_id, cost = impression.claims.campaign_id, impression.cost_micros
        bidder = decode(impression.claims.bid_id).worker
        if self._outbox is None or bidder == self._worker():
            self._pacer.debit(campaign_id, cost)
            return
        try:
            async with asyncio.timeout(ROUTED_DEBIT_TIMEOUT_S):
                if await self._outbox.send(bidder, campaign_id, cost):
                    return
        except Exception as exc:  # any Valkey fault: this node's lease pays instead
            log.warning(
                "debit of bid %d not sent to worker %d: %s", impression.claims.bid_id, bidder, exc
            )
        self._pacer.debit(campaign_id, cost)  # not sent, or the bidder has left
