"""Billing: once per impression, a durable ledger entry, then the win-path hooks.

Theory of operation. The first valid notice of an impression, win or billing,
bills it; every later one (exchange retries, the other kind) is a duplicate. The
impression's identity is the bid's Snowflake id from the signed token (fleet-unique,
and a bid is for exactly one imp). ``bill`` does, in order:

1. take a ledger id (a Snowflake id of this node); none means no billing (503);
2. ``SET <ns>:billed:<bid id> <ledger id> NX PX <ttl>`` in Valkey: only the first
   notice of the impression sets it, whichever node receives it. The key lives
   longer than the notice window (``dedup_ttl_ms``), and any notice older than the
   window is refused before it gets here, so a duplicate can never find the key gone;
3. append the ledger entry to the producer, which returns once it is fsync'd in the
   spool; only then is the notice acknowledged. If that fails the key is deleted
   again (best effort) and the notice is answered 503, so the exchange's retry bills;
4. tell every ``ImpressionSink`` (frequency capping, the pacing lease debit). A
   sink's error is logged and counted; it never undoes the entry nor fails the notice.

A crash between steps 2 and 3 leaves the key set without an entry: that impression
goes unbilled (its retries are duplicates). The window is one fsync long; the
opposite order would double-bill on the same crash, which is worse for a ledger.
Valkey unreachable: 503, nothing billed, the exchange retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis

from bidder import metrics
from bidder.clock import Clock
from bidder.ledger import LedgerEntry, cost_of
from bidder.notices import Notice
from bidder.tokens import NoticeClaims
from ids.snowflake import IdsUnavailable, decode

log = logging.getLogger(__name__)

SINK_TIMEOUT_S = 1.0


class BillingUnavailable(Exception):
    """The notice can't be billed safely right now; the exchange should retry (503)."""


@dataclass(frozen=True, slots=True)
class BilledImpression:
    """One impression, billed once: what the win-path hooks act on."""

    claims: NoticeClaims
    """bid id, imp id, campaign, advertiser, creative, user and household keys, bid price."""
    kind: str
    """The notice that billed it: 'win' or 'bill'."""
    price_cpm_micros: int
    cost_micros: int
    ledger_id: int
    ts_ms: int


class ImpressionSink(Protocol):
    """Called once per billed impression, after its ledger entry is durable."""

    async def on_billed(self, impression: BilledImpression) -> None: ...


class LedgerAppender(Protocol):
    async def append(self, entry: LedgerEntry) -> None:
        """Return once ``entry`` is durable; raise when it can't be."""


class Biller:
    def __init__(
        self,
        valkey: aioredis.Redis,
        ledger: LedgerAppender,
        next_id: Callable[[], int],
        clock: Clock,
        sinks: Sequence[ImpressionSink],
        *,
        dedup_ttl_ms: int,
        namespace: str = "bidsim",
    ) -> None:
        self._valkey = valkey
        self._ledger = ledger
        self._next_id = next_id
        self._clock = clock
        self._sinks = sinks  # the state's list: sinks added after start-up are called too
        self._ttl_ms = dedup_ttl_ms
        self._prefix = f"{namespace}:billed:"

    async def bill(self, notice: Notice, kind: str) -> bool:
        """True when this notice billed the impression, False for a duplicate."""
        try:
            ledger_id = self._next_id()
        except IdsUnavailable as exc:
            raise BillingUnavailable(f"no ledger id: {exc}") from exc
        key = self._prefix + str(notice.claims.bid_id)
        try:
            first = await self._valkey.set(key, ledger_id, nx=True, px=self._ttl_ms)
        except Exception as exc:  # any Valkey fault: we can't know whether it is a duplicate
            raise BillingUnavailable(f"dedup store: {exc}") from exc
        if not first:
            return False
        impression = self._impression(notice, kind, ledger_id)
        await self._record(key, impression)
        await self._tell_sinks(impression)
        return True

    def _impression(self, notice: Notice, kind: str, ledger_id: int) -> BilledImpression:
        price = notice.clearing_price_cpm_micros
        return BilledImpression(
            notice.claims, kind, price, cost_of(price), ledger_id, self._clock.wall_ms()
        )

    async def _record(self, key: str, impression: BilledImpression) -> None:
        try:
            await self._ledger.append(ledger_entry(impression))
        except Exception as exc:
            log.error("ledger entry not durable, notice refused for a retry: %s", exc)
            try:
                await self._valkey.delete(key)
            except Exception:  # the retry will then be a duplicate: counted, logged
                log.error("could not clear the dedup key %s; that impression is lost", key)
            raise BillingUnavailable(f"ledger: {exc}") from exc

    async def _tell_sinks(self, impression: BilledImpression) -> None:
        for sink in self._sinks:
            name = type(sink).__name__
            try:
                async with asyncio.timeout(SINK_TIMEOUT_S):
                    await sink.on_billed(impression)
            except Exception:  # a hook's fault never un-bills the impression
                metrics.SINK_ERRORS.labels(name).inc()
                log.exception("impression sink %s failed: ledger %d", name, impression.ledger_id)


def ledger_entry(impression: BilledImpression) -> LedgerEntry:
    claims = impression.claims
    return LedgerEntry(
        ledger_id=impression.ledger_id,
        kind=impression.kind,
        campaign_id=claims.campaign_id,
        advertiser=claims.advertiser,
        creative_id=claims.creative_id,
        imp_id=claims.imp_id,
        bid_id=str(claims.bid_id),
        price_cpm_micros=impression.price_cpm_micros,
        cost_micros=impression.cost_micros,
        node=decode(impression.ledger_id).worker,
        ts_ms=impression.ts_ms,
    )
