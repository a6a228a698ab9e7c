"""The I/O around a node's pacer: the lease refresher and the return at shutdown.

``run_refresher`` reloads the node's leases from Valkey every interval and heartbeats
the node into the live set; a failed refresh leaves only unexpired leases spending
(``pacing.node`` states the rule). ``return_leases`` gives the unspent remainders back
when the worker stops. These load redis-py; the pacer itself (``NodePacer``) does not,
so the package's face stays light for the hot path.
"""

from __future__ import annotations

import asyncio
import logging

from bidder.adapters.valkey import VALKEY_FAILURES
from bidder.core.clock import Clock
from pacing.debits import DebitInbox
from pacing.lease import LeaseFormatError
from pacing.lease_store import LeaseReader
from pacing.node import NodePacer

log = logging.getLogger("bidsim.pacing")


def refresh_interval_s(lease_refresh_s: float, tick_s: float) -> float:
    """How often a node re-reads its leases: ``lease_refresh_s``, but at most half a
    pacing tick. A lease lives two ticks from its write and a refresh reads one up to a
    tick old, so a node refreshing less than once a tick would hold an expired lease
    (``no_lease``) while a live one waited in Valkey."""
    return min(lease_refresh_s, tick_s / 2)


async def refresh_once(
    pacer: NodePacer, reader: LeaseReader, clock: Clock, inbox: DebitInbox | None = None
) -> bool:
    """Heartbeat and reload the leases, then debit what other workers billed of this
    node's bids (``pacing.debits``); on any failure only unexpired leases spend."""
    try:
        leases = await reader.refresh(clock.wall_ms())
    except (*VALKEY_FAILURES, LeaseFormatError) as exc:
        if pacer.available:
            log.warning("pacing: lease refresh failed, spending only unexpired leases: %s", exc)
        pacer.unavailable()
        return False
    pacer.install(leases)
    if inbox is not None:
        await take_debits(pacer, inbox)
    return True


async def take_debits(pacer: NodePacer, inbox: DebitInbox, leaving: bool = False) -> None:
    """Debit what the other workers billed of this node's bids; when Valkey fails, the
    debits wait there for the next refresh."""
    try:
        async with asyncio.timeout(1.0):
            owed = await inbox.take(leaving)
    except VALKEY_FAILURES as exc:
        log.warning("pacing: routed debits not taken (next refresh): %s", exc)
        return
    for campaign_id, micros in owed.items():
        pacer.debit(campaign_id, micros)


async def run_refresher(
    pacer: NodePacer,
    reader: LeaseReader,
    clock: Clock,
    interval_s: float = 1.0,
    timeout_s: float = 0.5,
    inbox: DebitInbox | None = None,
) -> None:
    """Refresh every ``interval_s`` until cancelled (``return_leases`` deregisters)."""
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                await refresh_once(pacer, reader, clock, inbox)
        except TimeoutError:
            pacer.unavailable()
        await asyncio.sleep(interval_s)


async def return_leases(
    pacer: NodePacer, reader: LeaseReader, timeout_s: float = 1.0, inbox: DebitInbox | None = None
) -> bool:
    """Leave the live set and give every lease back (shutdown, once the refresher has
    stopped); False if Valkey could not be told: the leases then simply expire. With
    ``inbox``, the debits other workers routed here are taken first (and no more are
    routed), so the remainders returned count them."""
    if inbox is not None:
        await take_debits(pacer, inbox, leaving=True)
    held = pacer.surrender()
    try:
        async with asyncio.timeout(timeout_s):
            await reader.leave()
            records = await reader.give_back(held)
    except VALKEY_FAILURES as exc:
        log.warning("pacing: leases not returned (they expire on their own): %s", exc)
        return False
    log.info("pacing: node %s returned its leases (%d records)", reader.node_id, records)
    return True
