"""The bidder's counters as its admin port publishes them: every worker's summed (dead
workers' counts included) and the supervisor's.

Workers publish their counts every ``--metrics-flush-s`` and stamp each publication
with the time it began (``bidder.core.published_metrics``). A read returns once the
least recent live worker's stamp is past the moment it was asked for, so it includes
everything every worker counted before the call, however late a busy machine ran the
workers' flushes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bidder.core.published_metrics import PUBLISHED_NAME

WATCHED_FLUSH_S = 0.05
"""The metrics flush interval of the bidders the chaos suite and the tests watch
(``bidder.chaos.harness.chaos_settings``): the default of the reads below."""


SETTLE_TIMEOUT_S = 10.0
"""The longest a read waits for the workers to publish: a worker that has not flushed
for that long is wedged, and its counts cannot be read."""


async def samples(admin_url: str, flush_s: float = WATCHED_FLUSH_S) -> list[Sample]:
    """Every sample the admin port exposes, once each live worker has published what it
    counted before this call (``published``)."""

    async def read() -> list[Sample]:
        text = await _metrics_text(admin_url)
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    return await published(read, flush_s, f"a worker of the bidder at {admin_url}")


async def published(
    read: Callable[[], Awaitable[list[Sample]]], flush_s: float, publisher: str
) -> list[Sample]:
    """``read()``'s samples once their publication stamp is past the moment of this call
    (``flush_s``: the workers' flush interval, how often to look).

    With no stamp at all (nothing has been published yet) the read is taken after two
    flush intervals. Raises ``TimeoutError`` naming ``publisher`` when it has not
    published for ``SETTLE_TIMEOUT_S``.
    """
    asked = time.time()
    started = time.monotonic()
    while True:
        await asyncio.sleep(flush_s / 2)
        got = await read()
        stamp = next((s.value for s in got if s.name == PUBLISHED_NAME), None)
        waited = time.monotonic() - started
        settled = waited >= 2 * flush_s if stamp is None else stamp >= asked
        if settled:
            return got
        if waited >= SETTLE_TIMEOUT_S:
            raise TimeoutError(
                f"{publisher} has not published its counts for "
                f"{time.time() - stamp if stamp is not None else waited:.1f} s"
            )


async def metric(
    admin_url: str,
    name: str,
    labels: dict[str, str] | None = None,
    flush_s: float = WATCHED_FLUSH_S,
) -> float:
    """The sum of ``name``'s samples matching ``labels``, from the admin port."""
    wanted = (labels or {}).items()
    return sum(
        sample.value
        for sample in await samples(admin_url, flush_s)
        if sample.name == name and all(sample.labels.get(k) == v for k, v in wanted)
    )


async def _metrics_text(admin_url: str) -> str:
    timeout = aiohttp.ClientTimeout(total=10.0)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{admin_url}/metrics") as resp,
    ):
        return await resp.text()
