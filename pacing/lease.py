"""Leases: the chunks of budget a bidder node may spend without asking anyone.

Theory of operation. Every reconciler tick grants each live node, per campaign, a
fresh lease: an amount in micros, the pacing rate, and an expiry two ticks out. A
node's new lease *replaces* its old one (a lease is an allowance, not a balance that
tops up), so a node holds at most one live lease per campaign, and between the
reconciler writing a lease and the node picking it up the node may still spend from
the old one. Hence the bounds:

- a late tick: nodes keep spending the lease they hold, at most one chunk each;
- a stalled reconciler: at most the old lease's rest plus the new one, 2 chunks per
  node, and then nothing: every lease expires two ticks after it was written.

*Exposure* bounds what nodes can still spend from the leases written so far, plus what
they spent that the ledger has not applied yet; grants keep ``spent + exposure <=
budget``. It is a running balance: grants add, the spend applied since the previous
tick subtracts (nodes spend only from leases, whichever one it came from), capped at
the amounts of the leases whose spend may not all be applied yet, and floored at 0.
Subtracting spend per lease instead would be unsound: spend after a grant may come from
the lease it replaced, leaving the new one whole. Spend beyond the balance is reported
as ``overdrawn``. Late ledger entries only make the balance conservative.

The cap. A lease stops being spendable at its expiry, but its spend is applied only
once the ledger has caught up past that instant: the spend stream's consumer runs
behind, and a debit reaches the stream some time after it was made. So ``observe``
takes the *watermark*, the instant through which every debit is applied, and a
generation stays in the cap while ``expires_ms > watermark``; dropped at its expiry
instead, the spend from it that arrives afterwards would be subtracted from a balance
that no longer holds it, and the tick would grant that money a second time. A
generation in the cap is spendable only while ``now < expires_ms``: ``keepable``,
``each_holder_covers`` and ``renew`` look at the spendable ones, ``give_back`` at all
of the cap (an expired lease's unspent remainder may still be taken off the cap).
With the ledger on time (the default) the watermark is ``now`` and the cap holds
exactly the spendable generations. The reconciler's watermark comes from its spend
read (``pacing.stream_lag.applied_through_ms``).

Returned leases. A node that shuts down gracefully stops spending, then gives back,
per campaign, the unspent remainder of the lease it holds (``amount - debited``) and the
whole amount of a newer lease written for it that it never installed
(``pacing.lua.return_leases``). ``LeaseBook.give_back`` takes a remainder off the exposure
and off its lease generation's total, once per node and generation, and only while that
generation is in the cap (once dropped, there is nothing to take off). Sound because a
remainder is what was granted minus what the node *debited*, and every debit reaches the
ledger: ``grants - applied - remainder`` still bounds what the other nodes can spend, as
long as nothing is debited to the departed node afterwards (it stops serving first,
takes the debits routed to it before it returns, and from then on the workers that
receive notices of its bids debit their own leases: ``pacing.debits``). Its later
ledger entries are subtracted when applied, like everyone's; the floor at 0 holds.

Chunk size: ``budget / nodes / chunk_periods_per_day``. The default 288 periods (five
minutes of a node's average spend) gives the design card's $0.69 for $10,000 and 50
nodes. A chunk must cover a node's spend in one tick at the busiest hour with room to
spare, or the lease, not the controller, paces (see docs/pacing.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

EXPIRY_TICKS = 2
DEFAULT_CHUNK_PERIODS = 288
RATE_SCALE = 1_000_000
"""Pacing rates travel as integer parts per million."""


class LeaseFormatError(ValueError):
    """A stored lease is not in the expected format."""


def chunk_micros(
    budget_micros: int, nodes: int, periods_per_day: int = DEFAULT_CHUNK_PERIODS
) -> int:
    """The default chunk: budget / nodes / periods-per-day, at least 1 micro."""
    if nodes < 1 or periods_per_day < 1:
        raise ValueError("nodes and periods_per_day must be at least 1")
    return max(1, budget_micros // nodes // periods_per_day)


def expiry_ms(issued_ms: int, tick_ms: int) -> int:
    """A lease written at ``issued_ms`` is dead once two ticks have passed unanswered."""
    return issued_ms + EXPIRY_TICKS * tick_ms


def grant_per_node(
    budget: int, spent: int, exposure: int, nodes: int, chunk: int, max_cost: int = 0
) -> int:
    """What each of ``nodes`` may get now so that spent + exposure stays within budget;
    nothing when that is less than one impression at ``max_cost``: no node could bid
    from it, and it would hold money in the exposure (while an expired lease is still
    held too, the two such shares would take turns with neither spent)."""
    available = budget - spent - exposure
    if nodes < 1 or available <= 0:
        return 0
    share = min(chunk, available // nodes)
    return share if share >= max_cost else 0


def tail_holders(available: int, nodes: int, max_cost: int) -> int:
    """How many of ``nodes`` to split ``available`` over: all of them while each share
    covers one impression at ``max_cost`` (a node bids only while its lease does), else
    as many as it covers whole, at least one. Split evenly, the end of a budget would
    leave up to ``nodes x max_cost`` in leases no node can bid from."""
    if max_cost <= 0 or nodes <= 1 or available // nodes >= max_cost:
        return nodes
    return max(1, min(nodes, available // max_cost))


def is_live(expires_ms: int, now_ms: int) -> bool:
    """A lease is spendable strictly before its expiry instant."""
    return now_ms < expires_ms


_N = TypeVar("_N", int, np.ndarray)


def take(want: _N, remaining: _N) -> _N:
    """How much of ``want`` a lease with ``remaining`` lets through (ints or arrays)."""
    result: _N = np.minimum(want, np.maximum(remaining, 0))
    return result


@dataclass(frozen=True, slots=True)
class Lease:
    """One campaign's allowance for one node."""

    lease_id: int
    """The reconciler tick that wrote it; a new id means a new allowance."""
    amount_micros: int
    expires_ms: int
    rate_ppm: int
    """Pacing rate (bid probability) in parts per million."""

    def encode(self) -> str:
        return f"{self.lease_id}:{self.amount_micros}:{self.expires_ms}:{self.rate_ppm}"

    @classmethod
    def decode(cls, text: str | bytes) -> Lease:
        raw = text.decode() if isinstance(text, bytes) else text
        parts = raw.split(":")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise LeaseFormatError(f"not a lease: {raw!r}")
        lease_id, amount, expires, rate = (int(p) for p in parts)
        if rate > RATE_SCALE:
            raise LeaseFormatError(f"rate {rate} ppm is above {RATE_SCALE}")
        return cls(lease_id, amount, expires, rate)


class LeaseAccount:
    """A node's spending against one lease: the node-side accounting.

    ``spent`` counts billed cost since this lease was installed. Billing notices of
    bids made under an older lease are charged here too (conservative).
    """

    __slots__ = ("expires_ms", "lease", "rate", "spent")

    def __init__(self, lease: Lease, spent: int = 0) -> None:
        self.lease = lease
        self.expires_ms = lease.expires_ms
        self.rate = lease.rate_ppm / RATE_SCALE
        self.spent = spent

    @property
    def remaining(self) -> int:
        return self.lease.amount_micros - self.spent

    def covers(self, cost_micros: int, now_ms: int) -> bool:
        """Live, and what is left covers ``cost_micros`` (the per-bid form of ``take``)."""
        return now_ms < self.expires_ms and self.lease.amount_micros - self.spent >= cost_micros

    def debit(self, cost_micros: int) -> None:
        self.spent += cost_micros


class FleetAccounts:
    """N nodes' accounts against the same lease, as arrays: the simulator's nodes.

    Same rules as ``LeaseAccount`` and ``install``: a new lease id starts from nothing
    spent, the same lease id keeps what was spent, nothing is spent once expired.
    """

    def __init__(self, nodes: int) -> None:
        self.lease: Lease | None = None
        self.spent = np.zeros(nodes, dtype=np.int64)
        self.amounts = np.zeros(nodes, dtype=np.int64)

    def install(self, lease: Lease, holders: int | None = None) -> None:
        """``lease`` for the first ``holders`` nodes (default: all), empty for the rest."""
        if self.lease is None or self.lease.lease_id != lease.lease_id:
            self.spent[:] = 0
        self.lease = lease
        self.amounts[:] = 0
        self.amounts[: len(self.amounts) if holders is None else holders] = lease.amount_micros

    def live(self, now_ms: int) -> bool:
        return self.lease is not None and is_live(self.lease.expires_ms, now_ms)

    def spend_up_to(self, want: np.ndarray, now_ms: int) -> np.ndarray:
        """Debit each node's ``want`` as far as its lease allows; returns what was debited."""
        if self.lease is None or not self.live(now_ms):
            return np.zeros_like(want)
        got = take(want, self.amounts - self.spent)
        self.spent += got
        return got

    def spend_wins(
        self,
        bidders: np.ndarray,
        costs: np.ndarray,
        now_ms: int,
        max_cost: int,
    ) -> np.ndarray:
        """Wins in time order: ``bidders[k]`` bid win ``k`` of ``costs[k]``, only while its
        account still covered ``max_cost`` (the live node's bid-time check,
        ``LeaseAccount.covers``), and the win is debited to its account (live, the
        notice is routed to the worker that bid: ``pacing.debits``). Returns each node's
        debits; an account may go below zero by the last win's cost less ``max_cost``."""
        nodes = len(self.spent)
        got = np.zeros(nodes, dtype=np.int64)
        if self.lease is None or not self.live(now_ms) or not len(costs):
            return got
        bidder = bidders.tolist()
        room = (self.amounts - self.spent - max_cost).tolist()
        for k, cost in enumerate(costs.tolist()):
            if room[bidder[k]] >= 0:
                room[bidder[k]] -= cost
                got[bidder[k]] += cost
        self.spent += got
        return got


def install(current: dict[str, LeaseAccount], fresh: dict[str, Lease]) -> dict[str, LeaseAccount]:
    """The accounts after a refresh: a lease seen before keeps what was spent from it."""
    accounts: dict[str, LeaseAccount] = {}
    for campaign_id, lease in fresh.items():
        old = current.get(campaign_id)
        if old is not None and old.lease.lease_id == lease.lease_id:
            accounts[campaign_id] = LeaseAccount(lease, old.spent)
        else:
            accounts[campaign_id] = LeaseAccount(lease)
    return accounts


@dataclass(frozen=True, slots=True)
class ReturnedLease:
    """A departed node's unspent remainder of one lease, as it recorded it."""

    node: str
    campaign_id: str
    lease_id: int
    micros: int


@dataclass(slots=True)
class _Generation:
    lease_id: int
    per_node: int
    nodes: int
    """The nodes holding it (``Kept.holders``)."""
    total_micros: int
    expires_ms: int
    fleet: int
    """The live nodes when it was granted: holders, and the rest with an empty lease."""
    spent_at: int
    """The campaign's spend when it was granted: all spend since may have come from it."""
    returned_by: set[str] = field(default_factory=set)
    """Nodes whose remainder of this generation was taken off already."""


@dataclass(frozen=True, slots=True)
class Kept:
    """The newest lease out, worth keeping on the nodes instead of a smaller grant."""

    lease: Lease
    holders: int
    """How many of the live nodes hold it (the rest hold an empty lease)."""


class LeaseBook:
    """Reconciler side: an upper bound on what one campaign's leases can still spend.

    Call ``observe`` once per tick with the campaign's spend so far, then ``record`` the
    tick's grant; ``exposure`` is the bound after both (see the module docstring).
    """

    __slots__ = ("_capped", "_exposure", "_now", "_spent", "overdrawn")

    def __init__(self) -> None:
        self._capped: list[_Generation] = []
        """The generations whose spend may not all be applied yet, oldest first."""
        self._now: int | None = None
        self._exposure = 0
        self._spent: int | None = None
        self.overdrawn = 0
        """Spend seen by the last ``observe`` beyond the exposure before it."""

    @property
    def exposure(self) -> int:
        return self._exposure

    def observe(self, now_ms: int, spent: int, applied_through_ms: int | None = None) -> int:
        """The exposure at ``now_ms`` given the campaign's cumulative ``spent``, which
        holds every debit made before ``applied_through_ms`` (the ledger's watermark;
        default ``now_ms``: a ledger on time; never later than ``now_ms``)."""
        through = now_ms if applied_through_ms is None else min(applied_through_ms, now_ms)
        self._now = now_ms
        self._capped = [g for g in self._capped if g.expires_ms > through]
        since = 0 if self._spent is None else spent - self._spent
        self._spent = spent
        left = self._exposure - since
        self.overdrawn = max(0, -left)
        self._exposure = max(0, min(left, sum(g.total_micros for g in self._capped)))
        return self._exposure

    def _live(self) -> list[_Generation]:
        """The generations nodes may still spend from, as of the last ``observe``."""
        if self._now is None:
            return list(self._capped)
        return [g for g in self._capped if is_live(g.expires_ms, self._now)]

    def record(
        self, lease_id: int, per_node: int, nodes: int, expires_ms: int, fleet: int | None = None
    ) -> None:
        """A grant of ``per_node`` to ``nodes`` of ``fleet`` live nodes (default: all)."""
        if per_node > 0 and nodes > 0:
            total, spent = per_node * nodes, self._spent or 0
            gen = _Generation(lease_id, per_node, nodes, total, expires_ms, fleet or nodes, spent)
            self._capped.append(gen)
            self._exposure += total

    def keepable(self, per_node: int, nodes: int) -> Kept | None:
        """The newest lease out, when it allows each holder more than ``per_node`` and was
        granted when as many nodes were live: keeping it (same id: nodes keep what they
        spent from it) grants nothing new, where a smaller fresh lease would replace it
        on the nodes while the exposure still holds it whole. Call after ``observe``."""
        live = self._live()
        gen = live[-1] if live else None
        if gen is None or gen.per_node <= per_node or gen.fleet != nodes or gen.returned_by:
            return None
        return Kept(Lease(gen.lease_id, gen.per_node, gen.expires_ms, 0), gen.nodes)

    def each_holder_covers(self, lease_id: int, cost_micros: int) -> bool:
        """Whether every node holding a live generation surely has ``cost_micros`` left of
        it: all the campaign's spend applied since its grant (whichever lease paid it)
        is at most one node's share less that cost. Call after ``observe``."""
        gen = next((g for g in self._live() if g.lease_id == lease_id), None)
        if gen is None:
            return False
        return (self._spent or 0) - gen.spent_at + cost_micros <= gen.per_node

    def renew(self, lease_id: int, expires_ms: int) -> None:
        """Extend a live generation's expiry: its nodes keep spending it, and the
        exposure keeps counting it, until then. Call after ``observe``."""
        for gen in self._live():
            if gen.lease_id == lease_id:
                gen.expires_ms = max(gen.expires_ms, expires_ms)

    def give_back(self, node: str, lease_id: int, micros: int) -> int:
        """Take ``node``'s unspent remainder of lease ``lease_id`` off the exposure.

        Call after ``observe`` (so the generations out of the cap are gone). Returns
        what was taken off: at most the node's share of that generation, nothing when
        the cap has dropped the generation or this node's remainder of it was taken
        already. An expired generation still in the cap counts: the remainder was never
        debited, so no late ledger entry will bring it back.
        """
        gen = next((g for g in self._capped if g.lease_id == lease_id), None)
        if gen is None or node in gen.returned_by or micros <= 0:
            return 0
        gen.returned_by.add(node)
        taken = min(micros, gen.per_node, gen.total_micros)
        gen.total_micros -= taken
        self._exposure = max(0, self._exposure - taken)
        return taken

    def rebased(self) -> LeaseBook:
        """The same leases for a new spend total (a new pacing day): the next
        ``observe`` takes its spend as the baseline and subtracts nothing."""
        book = LeaseBook()
        book._capped, book._exposure = list(self._capped), self._exposure
        book._now = self._now
        return book
