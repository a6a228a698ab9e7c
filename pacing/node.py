"""The bidder node's pacer: may this campaign bid now? (stage 6)

Theory of operation. The node holds one ``LeaseAccount`` per campaign, refreshed in the
background from Valkey (``pacing.refresher.run_refresher``). At bid time ``admit`` is
pure and cheap: a dict lookup, an expiry and a remaining-chunk comparison, and one RNG
draw against the pacing rate. The price of the impression is not known at stage 6, so
the bound checked against the chunk is the most one impression can cost:
``cost_of(max_bid_cpm)`` (the caller passes it; ``max_cost_micros`` below). The real
cost is debited when the impression is billed (``debit``), and the reconciler settles
against the ledger.

Budget state that cannot be read means no spend, *beyond the leases already held*.
A lease is budget the reconciler has already handed out and counted in its exposure,
with an expiry (two ticks) that bounds what a node can spend from it whatever
happens; so a failed refresh (Valkey down or slow) does not void the unexpired leases
the node holds: it keeps spending from them, within their chunks, until they expire.
That is exactly the stalled-reconciler bound (``pacing.lease``): at most two chunks
per node. What a failed refresh does stop:

- before the first successful refresh, every campaign is ``BUDGET_UNAVAILABLE``;
- while refreshes fail, a campaign whose lease is missing, expired or used up is
  ``BUDGET_UNAVAILABLE`` (a new lease may exist, but it cannot be read);
- after a successful refresh, those are ``NO_LEASE`` again.

Losing the draw is ``PACED``.

Shutdown (``pacing.refresher.return_leases``): once the worker has stopped serving and flushed its
ledger, the node hands its accounts over (``surrender``: nothing is admitted or debited
afterwards), deregisters from the live set and, right after, gives the leases back in
one script, so the reconciler can grant the unspent remainders to the nodes that stay.
Deregistering only then (not when the refresher stops) keeps the reconciler writing the
node fresh leases until the return: the newest lease is still unexpired when the next
tick applies the return, and a lease written after the refresher stopped comes back
whole.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from bidder.core.clock import Clock
from bidder.core.nobid import NoBid
from pacing.lease import Lease, LeaseAccount, install


class NodePacer:
    def __init__(self, node_id: str, clock: Clock, rng: Callable[[], float] | None = None) -> None:
        """``rng``: a uniform [0, 1) source (default ``random.random``), injected for tests."""
        self.node_id = node_id
        self._clock = clock
        self._random = rng or random.random
        self._accounts: dict[str, LeaseAccount] = {}
        self.available = False
        """Whether the last refresh read the leases (False before the first one)."""

    def admit(self, campaign_id: str, max_cost_micros: int) -> NoBid | None:
        """None if the campaign may bid now; otherwise why not."""
        account = self._accounts.get(campaign_id)
        if account is None or not account.covers(max_cost_micros, self._clock.wall_ms()):
            return NoBid.NO_LEASE if self.available else NoBid.BUDGET_UNAVAILABLE
        if self._random() >= account.rate:
            return NoBid.PACED
        return None

    def debit(self, campaign_id: str, cost_micros: int) -> None:
        """A billed impression: charge its real cost to the campaign's current lease."""
        account = self._accounts.get(campaign_id)
        if account is not None:
            account.debit(cost_micros)

    def install(self, leases: dict[str, Lease]) -> None:
        self._accounts = install(self._accounts, leases)
        self.available = True

    def unavailable(self) -> None:
        """A refresh failed: keep spending from unexpired leases only (module docstring)."""
        self.available = False

    def surrender(self) -> dict[str, LeaseAccount]:
        """Stop spending: every campaign is ``NO_LEASE`` from now on; the accounts held."""
        accounts, self._accounts = self._accounts, {}
        return accounts

    def remaining(self, campaign_id: str) -> int | None:
        account = self._accounts.get(campaign_id)
        return None if account is None else account.remaining
