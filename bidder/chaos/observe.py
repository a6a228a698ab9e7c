"""What a scenario watches while it runs: probe answers, worker memory, the metrics.

``Prober`` sends one known request (a fresh user each time, so caps never bite) every
``every_s`` beside the replay and keeps each answer with its send time: recovery is
the time from a fault's end to the first bid again. ``RssSampler`` reads ``VmRSS``
from ``/proc/<pid>/status`` of the workers on a thread. The admin port's counters are
read with ``bidder.replay.admin_metrics``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from bidder.adapters.valkey import connect_sync
from bidder.core.ledger import LedgerEntry
from bidder.replay.admin_metrics import samples
from bidder.serve.settings import Settings
from ids.snowflake import decode
from pacing.lease import Lease
from pacing.lease_store import decode_leases, leases_key

PROBE_REQUEST: dict[str, Any] = {
    # A German news site, 300x250: several bundled campaigns fit (fail-open and
    # fail-closed caps), so a healthy bidder bids on nearly every probe.
    "id": "chaos-probe",
    "imp": [{"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 0.05}],
    "site": {"domain": "nachrichten.example", "page": "https://nachrichten.example/"},
    "device": {"devicetype": 2, "geo": {"country": "DEU"}},
    "regs": {"gdpr": 0},
}


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    sent_at: float
    """``time.monotonic()`` at the send."""
    status: int
    reason: str | None
    campaigns: tuple[str, ...]

    @property
    def bid(self) -> bool:
        return self.status == 200


class Background:
    """A watcher's coroutine (``_run``), run as a task from ``start`` until ``stop``."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        raise NotImplementedError


class Prober:
    def __init__(self, url: str, every_s: float = 0.05, ssp: str = "ssp-alpha") -> None:
        self._url, self._every_s, self._ssp = url, every_s, ssp
        self.answers: list[ProbeAnswer] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> list[ProbeAnswer]:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return self.answers

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await self._one(session)
                await asyncio.sleep(self._every_s)

    async def _one(self, session: aiohttp.ClientSession) -> None:
        self.answers.append(await probe(session, self._url, self._ssp))


async def probe(session: aiohttp.ClientSession, url: str, ssp: str = "ssp-alpha") -> ProbeAnswer:
    """One probe request (a fresh user); status 0 with reason ``transport`` on no answer."""
    body = orjson.dumps({**PROBE_REQUEST, "user": {"buyeruid": uuid.uuid4().hex}})
    sent = time.monotonic()
    try:
        async with session.post(url, data=body, headers={"X-Ssp": ssp}) as resp:
            raw = await resp.read()
            status, reason = resp.status, resp.headers.get("X-Nbr-Reason")
    except (aiohttp.ClientError, TimeoutError):
        status, reason, raw = 0, "transport", b""
    campaigns: tuple[str, ...] = ()
    if status == 200:
        doc = orjson.loads(raw)
        campaigns = tuple(bid["cid"] for seat in doc["seatbid"] for bid in seat["bid"])
    return ProbeAnswer(sent, status, reason, campaigns)


async def until_probe(
    url: str, wanted: Callable[[ProbeAnswer], bool], bound_s: float
) -> float | None:
    """Probe every 50 ms until ``wanted`` holds; seconds it took, None at the bound."""
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=1.0)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() - started < bound_s:
            if wanted(await probe(session, url)):
                return round(time.monotonic() - started, 3)
            await asyncio.sleep(0.05)
    return None


def first_bid_after(answers: Sequence[ProbeAnswer], since: float) -> float | None:
    """Seconds from ``since`` to the first probe sent after it that got a bid."""
    for answer in answers:
        if answer.sent_at >= since and answer.bid:
            return round(answer.sent_at - since, 3)
    return None


def vm_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler:
    """Peak RSS (KiB) per pid, sampled on a thread every ``every_s``; ``mark`` starts a
    new phase so the peak before and during a fault can be told apart."""

    def __init__(self, pids: Sequence[int], every_s: float = 0.05) -> None:
        self._pids, self._every_s = list(pids), every_s
        self.peaks: dict[str, dict[int, int]] = {}
        self._phase = "before"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def mark(self, phase: str) -> None:
        self._phase = phase

    def peak_kib(self, phase: str) -> int:
        """The largest single worker's peak in ``phase`` (0 if never sampled)."""
        return max(self.peaks.get(phase, {}).values(), default=0)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            peaks = self.peaks.setdefault(self._phase, {})
            for pid in self._pids:
                rss = vm_rss_kib(pid)
                if rss is not None:
                    peaks[pid] = max(peaks.get(pid, 0), rss)


def held_leases(settings: Settings, nodes: Sequence[str]) -> dict[str, list[Lease]]:
    """Every lease ``nodes`` hold in Valkey now, by campaign (blocking)."""
    client = connect_sync(settings.valkey_url or "", cluster=settings.valkey_cluster, timeout_s=2.0)
    found: dict[str, list[Lease]] = {}
    try:
        for node in nodes:
            for campaign, lease in decode_leases(client.hgetall(leases_key(node))).items():
                found.setdefault(campaign, []).append(lease)
    finally:
        client.close()
    return found


def bid_ms(entry: LedgerEntry) -> int:
    """When the bid behind a ledger entry was made (its Snowflake id's time)."""
    return decode(int(entry.bid_id)).time_ms


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A Prometheus histogram as the admin port showed it once."""

    buckets: dict[float, float]
    """Cumulative count per upper bound (seconds), summed over workers."""

    def _since(self, since: HistogramSnapshot | None) -> dict[float, float]:
        before = since.buckets if since is not None else {}
        return {le: n - before.get(le, 0.0) for le, n in self.buckets.items()}

    def quantile_ms(self, q: float, since: HistogramSnapshot | None = None) -> float | None:
        """The upper bound (ms) of the bucket holding the ``q`` quantile of the samples
        since ``since``; None without samples or in the +Inf bucket."""
        delta = self._since(since)
        total = delta.get(float("inf"), 0.0)
        bound = next((le for le in sorted(delta) if total and delta[le] >= q * total), None)
        return None if bound is None or bound == float("inf") else round(bound * 1000, 3)

    def count(self, since: HistogramSnapshot | None = None) -> int:
        return round(self._since(since).get(float("inf"), 0.0))

    def over(self, bound_s: float, since: HistogramSnapshot | None = None) -> int | None:
        """Samples above ``bound_s`` since ``since``; None if it is not a bucket bound."""
        delta = self._since(since)
        if bound_s not in delta:
            return None
        return round(delta.get(float("inf"), 0.0) - delta[bound_s])


BID_LATENCY = "bidsim_bid_latency_seconds"
"""The workers' own answer times (handler entry to answer), as a histogram."""


async def histogram(admin_url: str, name: str) -> HistogramSnapshot:
    """Histogram ``name`` from the admin port, summed over the workers."""
    buckets: dict[float, float] = {}
    for sample in await samples(admin_url):
        if sample.name == f"{name}_bucket":
            le = float(sample.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + sample.value
    return HistogramSnapshot(buckets)
