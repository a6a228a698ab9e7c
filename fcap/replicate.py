"""Replication between regions: one region's change log, applied to another region.

One ``Replicator`` per (source, destination) pair tails the source server's change
log (``fcap.keys.CHANGE_LOG``, written by region_count.lua and region_check.lua) and
applies each change to the destination with region_apply.lua: every slot becomes the
larger of the two values (``fcap.regions``). That makes delivery forgiving: an entry
applied twice, late, or after a newer one changes nothing, so the replicator retries
freely and never needs to know what the destination already has.

- **Delay**: an entry is applied ``delay_s`` after it was written (by the writer's
  clock), to measure what replication delay does to caps.
- **Loss**: each apply is lost with probability ``loss``; a lost apply is sent again
  after ``retry_s``, and the entries behind it wait (the log is applied in order).
- **Partition**: ``partition()`` stops applying; ``heal()`` resumes from the cursor.
- **Lag**: the age of the oldest change not yet applied (0 when caught up), in
  ``lag_s`` and the ``bidsim_fcap_replication_lag_seconds{source,dest}`` gauge;
  ``bidsim_fcap_replication_lag_alert`` turns 1 (and a warning is logged) while it
  exceeds ``lag_alert_s``.
- **Gaps**: the log is trimmed (``MAXLEN ~``). When the log has dropped more entries
  than the replicator has read (a partition longer than the log holds, or a replicator
  started late), some were never read: it copies every slot of the source's counter
  hashes instead (``resync``), then goes on from the log's end.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any

import prometheus_client
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from bidder.core.clock import Clock, SystemClock
from fcap import keys, scripts

log = logging.getLogger(__name__)

# Not on the bid path: plain prometheus_client metrics, labelled by link.
REPLICATION_LAG = prometheus_client.Gauge(
    "bidsim_fcap_replication_lag_seconds",
    "Age of the oldest counter change not yet applied in the destination region.",
    ["source", "dest"],
    multiprocess_mode="max",
)
REPLICATION_ALERT = prometheus_client.Gauge(
    "bidsim_fcap_replication_lag_alert",
    "1 while the replication lag is over its alert threshold.",
    ["source", "dest"],
    multiprocess_mode="max",
)
REPLICATION_APPLIED = prometheus_client.Counter(
    "bidsim_fcap_replication_applied",
    "Counter changes applied in the destination region.",
    ["source", "dest"],
)

START = "0-0"


@dataclass(frozen=True, slots=True)
class Link:
    """How changes travel from one region to another."""

    delay_s: float = 0.0
    loss: float = 0.0
    """Probability that one apply is lost (and retried after ``retry_s``)."""
    retry_s: float = 0.05
    lag_alert_s: float = 5.0
    poll_s: float = 0.05
    """How long one read of the log waits for new entries."""
    batch: int = 500

    def problems(self) -> list[str]:
        checks = (
            (self.delay_s >= 0, "replication delay must be 0 or more"),
            (0 <= self.loss < 1, "replication loss must be in [0, 1)"),
            (self.retry_s > 0, "replication retry must be above 0"),
            (self.lag_alert_s > 0, "replication lag alert threshold must be above 0"),
        )
        return [message for ok, message in checks if not ok]


class Replicator:
    def __init__(
        self,
        source: Redis,
        dest: Redis,
        source_name: str,
        dest_name: str,
        link: Link = Link(),
        *,
        clock: Clock | None = None,
        seed: int | None = None,
    ) -> None:
        problems = link.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.source, self.dest, self.link = source, dest, link
        self.clock = clock or SystemClock()
        self.cursor = START
        self.applied = 0
        """Entries applied to the destination."""
        self.lost = 0
        """Applies lost (each was retried)."""
        self.resyncs = 0
        self._consumed = 0
        """Log entries read (or covered by a resync) since the log began."""
        self.lag_s = 0.0
        self._rng = random.Random(seed)
        self._open = asyncio.Event()
        self._open.set()
        self._loading = asyncio.Lock()
        self._lag_gauge = REPLICATION_LAG.labels(source_name, dest_name)
        self._alert_gauge = REPLICATION_ALERT.labels(source_name, dest_name)
        self._applied_counter = REPLICATION_APPLIED.labels(source_name, dest_name)
        self.name = f"{source_name}->{dest_name}"

    @property
    def partitioned(self) -> bool:
        return not self._open.is_set()

    def partition(self) -> None:
        """Stop applying (the link is cut); the lag keeps being measured. An apply
        already sent still lands, as on a real link."""
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def run(self) -> None:
        """Replicate until cancelled."""
        while True:
            await self.step()

    async def step(self) -> int:
        """One read of the log (waiting up to ``poll_s``) and its applies; the entries
        applied. While partitioned, only the lag is measured."""
        if self.partitioned:
            await self._measure_pending()
            await asyncio.sleep(self.link.poll_s)
            return 0
        await self._resync_on_gap()
        block_ms = max(1, int(self.link.poll_s * 1000))
        answer: Any = await self.source.xread(
            {keys.CHANGE_LOG: self.cursor}, count=self.link.batch, block=block_ms
        )
        entries = answer[0][1] if answer else []
        done = 0
        for entry_id, fields in entries:
            if self.partitioned:
                break
            await self._apply(fields)
            self.cursor = _text(entry_id)
            self._consumed += 1
            done += 1
        if not entries:
            self._set_lag(0.0)
        return done

    async def catch_up(self) -> None:
        """Apply everything logged so far (for tests and measurements)."""
        while not self.partitioned:
            if not await self.step():
                return

    async def resync(self) -> int:
        """Copy every slot of every counter hash of the source (max-merge); the hashes
        copied. Entries logged meanwhile are applied again later: harmless."""
        copied = 0
        for prefix in (keys.USER, keys.HOUSEHOLD):
            async for key in self.source.scan_iter(match=f"{prefix}:{{*}}", count=500):
                name = _text(key)
                if ":d:" in name:
                    continue  # a dedup mark, not a counter hash
                slots = await self.source.hgetall(key)
                if slots:
                    args = [item for pair in slots.items() for item in pair]
                    await self._send(name, args)
                    copied += 1
        self.resyncs += 1
        return copied

    # ------------------------------------------------------------------ internals

    async def _apply(self, fields: dict[Any, Any]) -> None:
        entry = {_text(k): v for k, v in fields.items()}
        written_ms = int(entry.pop("t"))
        key = _text(entry.pop("k"))
        if self.link.delay_s > 0:  # else a writer's clock ahead of ours would delay it
            due_ms = written_ms + int(self.link.delay_s * 1000)
            wait_s = (due_ms - self.clock.wall_ms()) / 1000
            if wait_s > 0:
                await asyncio.sleep(wait_s / self.clock.speed)
        while self._rng.random() < self.link.loss:
            self.lost += 1
            await asyncio.sleep(self.link.retry_s)
        self._set_lag(max(0.0, (self.clock.wall_ms() - written_ms) / 1000))
        await self._send(key, [item for pair in entry.items() for item in pair])
        self.applied += 1
        self._applied_counter.inc()

    async def _send(self, key: str, slot_values: list[Any]) -> None:
        args = (self.clock.wall_ms(), *slot_values)
        await scripts.REGION_APPLY.run(self.dest, (key,), args, self._loading)

    async def _measure_pending(self) -> None:
        pending: Any = await self.source.xrange(keys.CHANGE_LOG, f"({self.cursor}", "+", count=1)
        if not pending:
            self._set_lag(0.0)
            return
        written_ms = int({_text(k): v for k, v in pending[0][1].items()}["t"])
        self._set_lag(max(0.0, (self.clock.wall_ms() - written_ms) / 1000))

    async def _resync_on_gap(self) -> None:
        """A full copy when entries were trimmed before they were read: the log has
        dropped more entries than this replicator has read."""
        try:
            info = await self.source.xinfo_stream(keys.CHANGE_LOG)
        except ResponseError as exc:  # no log yet: nothing was written, nothing missed
            if "no such key" in str(exc).lower():
                return
            raise
        dropped = int(info["entries-added"]) - int(info["length"])
        if dropped > self._consumed:
            log.warning("%s: the log was trimmed past the cursor; copying every slot", self.name)
            await self.resync()
            self.cursor = _text(info["last-generated-id"])
            self._consumed = int(info["entries-added"])

    def _set_lag(self, lag_s: float) -> None:
        alert = lag_s > self.link.lag_alert_s
        if alert and self.lag_s <= self.link.lag_alert_s:
            log.warning(
                "%s: replication lag %.1f s over %.1f s", self.name, lag_s, self.link.lag_alert_s
            )
        self.lag_s = lag_s
        self._lag_gauge.set(lag_s)
        self._alert_gauge.set(1 if alert else 0)


def mesh(
    clients: dict[str, Redis],
    link: Link = Link(),
    *,
    clock: Clock | None = None,
    seed: int | None = None,
) -> list[Replicator]:
    """One replicator per ordered pair of regions: every region's changes reach every
    other region directly."""
    pairs = [(a, b) for a in sorted(clients) for b in sorted(clients) if a != b]
    return [
        Replicator(
            clients[a],
            clients[b],
            a,
            b,
            link,
            clock=clock,
            seed=None if seed is None else seed + n,
        )
        for n, (a, b) in enumerate(pairs)
    ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
