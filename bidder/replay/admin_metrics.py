"""The bidder's counters as its admin port publishes them: every worker's summed (dead
workers' counts included) and the supervisor's.

Workers publish their counts every ``--metrics-flush-s``; a read waits two of those
first, so it includes everything a worker counted before the call.
"""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

WATCHED_FLUSH_S = 0.05
"""The metrics flush interval of the bidders the chaos suite and the tests watch
(``bidder.chaos.harness.chaos_settings``): the default of the reads below."""


async def samples(admin_url: str, flush_s: float = WATCHED_FLUSH_S) -> list[Sample]:
    """Every sample the admin port exposes, read two flushes (``flush_s``) from now."""
    await asyncio.sleep(2 * flush_s)
    text = await _metrics_text(admin_url)
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


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
