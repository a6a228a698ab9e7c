"""Duplicate auctions in a replay: did each auction sent through several SSPs get one bid,
and on its best path?

Requests are grouped by their auction id (``source.tid``, read as the bidder reads it:
``bidder.openrtb.request.auction_source``, ``bidder.supply.path.auction_id``); a *group* is a
tid seen on two requests or more. Each copy's path is ranked with the bidder's own pure
rank (``PathPolicy.key``: the replay should use the bidder's preference and fees). Per
group the tally keeps the number of copies, its bids, the best key of every copy, and the
best key of the copies that *would* bid: answered 200, or 204 ``duplicate_auction``
(the dedup claim is only made by a copy about to bid). A copy refused for its own reasons
(its floor, its chain) was never a candidate, so "bid on the best bidding copy" is the
measure of the dedup's choice; "bid on the best copy" is shown beside it.

Memory is bounded: at most ``max_open`` tids are held; past that the oldest is folded
into the totals (copies of one auction arrive milliseconds apart, so only a replay
sending more than ``max_open`` auctions within one auction's copies could split a group).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bidder.openrtb.request import auction_source
from bidder.supply.path import DEFAULT_POLICY, PathKey, PathPolicy, auction_id

DUPLICATE_REASON = "duplicate_auction"
MAX_OPEN = 50_000


@dataclass(frozen=True, slots=True)
class DuplicateSummary:
    groups: int
    """Auctions (tids) seen on two requests or more."""
    copies: int
    """Requests in those groups."""
    groups_with_bid: int
    groups_bid_once: int
    groups_bid_more_than_once: int
    groups_bid_on_best_bidding_copy: int
    """Groups with a bid on the best path among the copies that would bid (200 or
    ``duplicate_auction``); ties count as best."""
    groups_bid_on_best_copy: int
    """Groups with a bid on the best path among all their copies."""
    duplicate_answers: int
    """Requests answered 204 ``duplicate_auction`` (in groups or not)."""
    requests_without_tid: int
    """Requests without a usable tid (not grouped; the bidder does not dedup them)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class _Group:
    best: PathKey
    copies: int = 0
    best_bidding: PathKey | None = None
    bids: list[PathKey] = field(default_factory=list)

    def add(self, key: PathKey, bid: bool, would_bid: bool) -> None:
        self.copies += 1
        self.best = min(self.best, key)
        if would_bid:
            self.best_bidding = key if self.best_bidding is None else min(self.best_bidding, key)
        if bid:
            self.bids.append(key)


@dataclass(slots=True)
class _Totals:
    groups: int = 0
    copies: int = 0
    with_bid: int = 0
    bid_once: int = 0
    bid_more: int = 0
    on_best_bidding: int = 0
    on_best: int = 0

    def fold(self, group: _Group) -> None:
        if group.copies < 2:
            return
        self.groups += 1
        self.copies += group.copies
        if not group.bids:
            return
        self.with_bid += 1
        self.bid_once += len(group.bids) == 1
        self.bid_more += len(group.bids) > 1
        self.on_best_bidding += group.best_bidding in group.bids
        self.on_best += group.best in group.bids


class DuplicateTally:
    """Fed every answered request of a replay; ``summary()`` at any time."""

    def __init__(self, policy: PathPolicy = DEFAULT_POLICY, max_open: int = MAX_OPEN) -> None:
        self.policy = policy
        self._max_open = max_open
        self._open: dict[str, _Group] = {}
        self._closed = _Totals()
        self._duplicate_answers = 0
        self._without_tid = 0

    def count(self, ssp: str, body: bytes, status: int, reason: str | None) -> None:
        """One answered request: ``status`` 200 is a bid; ``reason`` the 204's label."""
        duplicate = status == 204 and reason == DUPLICATE_REASON
        self._duplicate_answers += duplicate
        tid, schain = _source(body)
        tid = auction_id(tid)
        if tid is None:
            self._without_tid += 1
            return
        key = self.policy.key(ssp, schain)
        group = self._open.get(tid)
        if group is None:
            group = self._open[tid] = _Group(best=key)
            if len(self._open) > self._max_open:
                self._closed.fold(self._open.pop(next(iter(self._open))))
        group.add(key, bid=status == 200, would_bid=status == 200 or duplicate)

    def summary(self) -> DuplicateSummary:
        totals = dataclasses.replace(self._closed)
        for group in self._open.values():
            totals.fold(group)
        return DuplicateSummary(
            groups=totals.groups,
            copies=totals.copies,
            groups_with_bid=totals.with_bid,
            groups_bid_once=totals.bid_once,
            groups_bid_more_than_once=totals.bid_more,
            groups_bid_on_best_bidding_copy=totals.on_best_bidding,
            groups_bid_on_best_copy=totals.on_best,
            duplicate_answers=self._duplicate_answers,
            requests_without_tid=self._without_tid,
        )


def _source(body: bytes) -> tuple[str | None, dict[str, Any] | None]:
    if b'"tid"' not in body:  # most bodies without one skip the decode
        return None, None
    return auction_source(body)
