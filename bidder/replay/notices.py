"""The exchange's win (nurl) and billing (burl) notices during a replay.

A 200 that wins its auction gets its notices sent as fire-and-forget tasks on their own
connection pools (``NoticeSender``), so they never add to bid latency; the replayer
awaits them (with a bound) after the last bid request. A notice counts as ok on any
2xx; a non-``http://`` URL, an error or a timeout is a failure.

Notice faults, to test exactly-once billing (``plan_notices``): ``duplicate_notices``
is the share of wins whose exchange sends one of the two notices again, half of those
at once (racing the original, like a retry after a lost answer) and half late (one to
one and a half ``notice_window_ms`` after the win's notices started);
``reorder_notices`` sends the billing notice before the win notice for half the wins and
starts each win's notices at a random point inside ``notice_window_ms``, so notices of
different wins arrive out of order. The choices are drawn from a hash of the market
seed and the win's first notice URL: the same bids get the same faults whatever the
order the answers come back in.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from bidder.bidstream.auction import Win
from bidder.core.tasks import TaskSet
from bidder.replay.auction_totals import AuctionTotals
from bidder.replay.client import HttpPool, TransportError, split_url
from bidder.replay.options import ReplayOptions
from bidder.replay.viewability import ViewTally, dwell_s, is_viewable, view_url


@dataclass(frozen=True, slots=True)
class NoticeSend:
    """Notices the exchange sends one after the other, starting ``delay_s`` after the win."""

    delay_s: float
    urls: tuple[str, ...]


def plan_notices(urls: Sequence[str], options: ReplayOptions) -> list[NoticeSend]:
    """How the exchange sends one win's notices (``urls``: nurl then burl, non-empty).

    Without faults: one send, in order, at once. See the module docstring for the faults.
    """
    draw = _uniforms(f"{options.market.seed}/{urls[0]}", 5)
    window_s, chain, start = options.notice_window_ms / 1000, tuple(urls), 0.0
    if options.reorder_notices:
        chain = chain[::-1] if draw[0] < 0.5 else chain
        start = draw[1] * window_s
    plan = [NoticeSend(start, chain)]
    if draw[2] < options.duplicate_notices:
        copy = urls[min(int(draw[3] * len(urls)), len(urls) - 1)]
        late_s = window_s * (1 + draw[4]) if draw[4] < 0.5 else 0.0
        plan.append(NoticeSend(start + late_s, (copy,)))
    return plan


def _uniforms(key: str, count: int) -> list[float]:
    """``count`` uniforms in (0, 1) fixed by ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8 * count).digest()
    return [
        (int.from_bytes(digest[i : i + 8], "big") + 0.5) / 2**64 for i in range(0, 8 * count, 8)
    ]


class NoticeSender:
    """Win (nurl) and billing (burl) notices: fire-and-forget GETs on their own pools."""

    def __init__(self, options: ReplayOptions, totals: AuctionTotals, views: ViewTally) -> None:
        self._options = options
        self._views = views
        self._timeout_s = options.notice_timeout_ms / 1000
        self._connections = options.notice_connections
        self._totals = totals
        self._pools: dict[tuple[str, int], HttpPool] = {}
        self._tasks = TaskSet()

    def send(self, win: Win, measured: bool, fmt: str) -> None:
        """The win's notices; then, when drawn viewable (format ``fmt``), its view notice."""
        urls = [url for url in (win.nurl, win.burl) if url]
        if not urls:
            return
        plan = plan_notices(urls, self._options)
        for planned in plan:
            self._tasks.spawn(self._call(planned, measured))
        rates = self._options.view_rates
        viewable = is_viewable(self._options.market.seed, urls[0], fmt, rates)
        if measured:
            self._views.count(fmt, viewable)
        view = view_url(urls[0]) if viewable else None
        if view is not None:
            self._tasks.spawn(self._view(view, plan[0].delay_s + dwell_s(fmt), measured))

    async def _view(self, url: str, delay_s: float, measured: bool) -> None:
        ok = False
        try:
            await asyncio.sleep(delay_s)
            ok = await self._get(url)
        finally:
            if measured:
                self._views.notices_ok += ok
                self._views.notices_failed += not ok

    async def drain(self, bound_s: float) -> None:
        """Wait up to ``bound_s`` for notices; the rest are cancelled and count as failed."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=bound_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        for pool in self._pools.values():
            await pool.close()

    async def _call(self, planned: NoticeSend, measured: bool) -> None:
        done = 0
        try:
            if planned.delay_s > 0:
                await asyncio.sleep(planned.delay_s)
            for url in planned.urls:  # one after the other: a bill follows its win (or leads it)
                self._count(await self._get(url), measured)
                done += 1
        finally:  # notices cancelled at the drain bound, or never started, count as failed
            for _ in planned.urls[done:]:
                self._count(False, measured)

    def _count(self, ok: bool, measured: bool) -> None:
        if measured:
            self._totals.notices_sent += 1
            self._totals.notices_ok += ok
            self._totals.notices_failed += not ok

    async def _get(self, url: str) -> bool:
        try:
            host, port, target = split_url(url)
        except ValueError:
            return False
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[host, port] = HttpPool(host, port, max_connections=self._connections)
        try:
            response = await pool.request("GET", target, timeout_s=self._timeout_s)
        except (TimeoutError, TransportError):
            return False
        return 200 <= response.status < 300
