"""Billing: once per impression, a durable ledger entry, then the win-path hooks.

Theory of operation. The first valid notice of an impression, win or billing,
bills it; every later one (exchange retries, the other kind) is a duplicate. The
impression's identity is the bid's Snowflake id from the signed token (fleet-unique,
and a bid is for exactly one imp). Billing a verified notice (``Billable``) does,
in order:

1. take a ledger id (a Snowflake id of this node), unless the notice has one from
   an earlier attempt;
2. ``SET <ns>:billed:<bid id> <ledger id> NX GET PX <ttl>`` in Valkey: the first
   notice of the impression sets it, whichever node receives it. A key already
   holding *this* ledger id was set by an earlier attempt of this same notice
   (its answer was lost, or the spool failed after it): that is not a duplicate.
   The key lives longer than the notice window (``dedup_ttl_ms``), and any notice
   older than the window is refused before it gets here, so a duplicate can never
   find the key gone;
3. append the ledger entry to the producer, which returns once it is fsync'd in the
   spool;
4. tell every ``ImpressionSink`` (frequency capping, the pacing lease debit). A
   sink's error is logged and counted; it never undoes the entry nor fails the notice.

When step 1, 2 or 3 can't be done now (no id lease, Valkey down, spool failing),
the notice is appended to the deferred journal (``bidder.winloop.deferred``, fsync'd) with
the ledger id it took, and answered 202; the journal's replayer bills it later
through the same steps (``replay``). Only when the journal can't be written either
is the notice refused with ``BillingUnavailable`` (503): the dedup key, if this
attempt set it, is deleted again so the exchange's retry bills.

A crash between steps 2 and 3 of a live notice leaves the key set without an entry:
that impression goes unbilled (its retries are duplicates). The window is one fsync
long; the opposite order would double-bill on the same crash. A journaled notice has
no such window: its replay finds the key holding its own ledger id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bidder.adapters.valkey import AsyncValkey
from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.ledger import LedgerEntry, cost_of
from bidder.core.tokens import NoticeClaims
from bidder.winloop.billable import Billable, BillingOutcome
from bidder.winloop.deferred import DeferredJournal
from bidder.winloop.notices import MAX_SKEW_MS, Notice
from ids.snowflake import IdsUnavailable, decode

log = logging.getLogger(__name__)

SINK_TIMEOUT_S = 1.0


class BillingUnavailable(Exception):
    """The notice could be neither billed nor journaled: the exchange must retry (503)."""


class _NotNow(Exception):
    """Billing can't finish now; what the attempt got done so far."""

    def __init__(self, cause: str, detail: str, ledger_id: int | None, claimed: bool) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.ledger_id = ledger_id
        self.claimed = claimed
        """This attempt set the dedup key."""


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
        valkey: AsyncValkey,
        ledger: LedgerAppender,
        next_id: Callable[[], int],
        clock: Clock,
        sinks: Sequence[ImpressionSink],
        *,
        dedup_ttl_ms: int,
        namespace: str = "bidsim",
        deferred: DeferredJournal | None = None,
    ) -> None:
        self._valkey = valkey
        self._ledger = ledger
        self._next_id = next_id
        self._clock = clock
        self._sinks = sinks  # the state's list: sinks added after start-up are called too
        self._ttl_ms = dedup_ttl_ms
        self._prefix = f"{namespace}:billed:"
        self.deferred = deferred

    async def bill(self, notice: Notice, kind: str) -> BillingOutcome:
        """BILLED, DUPLICATE, or DEFERRED (journaled, to be billed exactly once later).

        Raises ``BillingUnavailable`` when it could neither bill nor journal the notice.
        """
        price = notice.clearing_price_cpm_micros
        billable = Billable(notice.claims, kind, price, self._clock.wall_ms())
        try:
            return await self._settle(billable)
        except _NotNow as exc:
            return await self._defer(dataclasses.replace(billable, ledger_id=exc.ledger_id), exc)

    async def replay(self, billable: Billable) -> BillingOutcome | None:
        """Settle a journaled notice: its outcome, or None while billing is still unavailable."""
        if billable.ledger_id is None:
            return await self._rejournal(billable)
        try:
            outcome = await self._settle(billable)
        except _NotNow as exc:
            log.info("deferred notice of bid %d still waits: %s", billable.claims.bid_id, exc)
            return None
        late = self._clock.wall_ms() > self.exact_until_ms(billable.claims)
        if outcome is BillingOutcome.BILLED and late:
            log.warning(
                "deferred notice of bid %d billed after its dedup horizon: a notice of it "
                "billed before the outage would have been billed twice",
                billable.claims.bid_id,
            )
            return BillingOutcome.BILLED_LATE
        return outcome

    def exact_until_ms(self, claims: NoticeClaims) -> int:
        """Until then, the dedup key of any earlier billing of this impression still lives.

        An earlier billing happened at the earliest ``MAX_SKEW_MS`` before the issue
        time (notices from further ahead are refused), and its key lives the TTL.
        """
        return claims.issued_ms - MAX_SKEW_MS + self._ttl_ms

    async def _settle(self, billable: Billable) -> BillingOutcome:
        ledger_id = billable.ledger_id
        if ledger_id is None:
            try:
                ledger_id = self._next_id()
            except IdsUnavailable as exc:
                raise _NotNow("ids", f"no ledger id: {exc}", None, False) from exc
        key = self._prefix + str(billable.claims.bid_id)
        try:
            held = await self._valkey.set(key, ledger_id, nx=True, get=True, px=self._ttl_ms)
        except Exception as exc:  # any Valkey fault: we can't know whether it is a duplicate
            raise _NotNow("dedup", f"dedup store: {exc}", ledger_id, False) from exc
        if held is not None and _text(held) != str(ledger_id):
            return BillingOutcome.DUPLICATE
        price = billable.price_cpm_micros
        impression = BilledImpression(
            billable.claims, billable.kind, price, cost_of(price), ledger_id, billable.accepted_ms
        )
        try:
            await self._ledger.append(ledger_entry(impression))
        except Exception as exc:
            raise _NotNow("ledger", f"ledger: {exc}", ledger_id, True) from exc
        await self._tell_sinks(impression)
        return BillingOutcome.BILLED

    async def _defer(self, billable: Billable, why: _NotNow) -> BillingOutcome:
        if self.deferred is not None:
            try:
                await self.deferred.append(billable)
            except Exception as exc:  # the disk failed too: see below
                log.error("deferred journal failed (%s) after billing failed (%s)", exc, why)
            else:
                metrics.NOTICES_DEFERRED.labels(why.cause).inc()
                log.info(
                    "%s notice of bid %d deferred: %s", billable.kind, billable.claims.bid_id, why
                )
                return BillingOutcome.DEFERRED
        log.error(
            "%s notice of bid %d NOT recorded, neither billed nor journaled; answered 503 so "
            "the exchange retries: %s",
            billable.kind,
            billable.claims.bid_id,
            why,
        )
        if why.claimed:
            await self._release(billable.claims.bid_id)
        raise BillingUnavailable(str(why)) from why

    async def _rejournal(self, billable: Billable) -> BillingOutcome | None:
        """Give a journaled notice its ledger id before any SET, so a crash can't orphan it."""
        if self.deferred is None:
            return None
        try:
            ledger_id = self._next_id()
            await self.deferred.append(dataclasses.replace(billable, ledger_id=ledger_id))
        except Exception as exc:  # no id lease yet, or the journal is failing: later
            log.info("deferred notice of bid %d still waits: %s", billable.claims.bid_id, exc)
            return None
        return BillingOutcome.REJOURNALED

    async def _release(self, bid_id: int) -> None:
        key = self._prefix + str(bid_id)
        try:
            await self._valkey.delete(key)
        except Exception:  # the retry will then be a duplicate: counted, logged
            log.error("could not clear the dedup key %s; that impression is lost", key)

    async def _tell_sinks(self, impression: BilledImpression) -> None:
        for sink in self._sinks:
            name = type(sink).__name__
            try:
                async with asyncio.timeout(SINK_TIMEOUT_S):
                    await sink.on_billed(impression)
            except Exception:  # a hook's fault never un-bills the impression
                metrics.SINK_ERRORS.labels(name).inc()
                log.exception("impression sink %s failed: ledger %d", name, impression.ledger_id)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        caps_unchecked=claims.caps_unchecked,
    )
