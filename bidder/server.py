"""The running bidder: campaigns loaded, workers up, admin port open.

``running_bidder`` is the one way to bring the service up, used by
``bidsim serve`` and by ``bidsim replay`` without ``--target``. It expects the
Valkey and AWS endpoints to exist already (see ``bidder.stack``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bidder.admin import build_admin_app
from bidder.aws import aws_client
from bidder.campaign_store import CampaignTable
from bidder.campaigns import campaign_to_doc, load_campaign_file
from bidder.settings import Settings
from bidder.workers import WorkerPool


@dataclass(frozen=True)
class RunningBidder:
    bid_url: str
    admin_url: str
    pool: WorkerPool


def load_campaigns(path: Path, settings: Settings) -> int:
    """Validate a campaign file and make the store hold exactly its campaigns."""
    campaigns = load_campaign_file(path)
    if settings.aws_endpoint is None:
        raise ValueError("no AWS endpoint to load campaigns into")
    client = aws_client("dynamodb", settings.aws_endpoint, settings.aws_region)
    table = CampaignTable(client, settings.campaigns_table)
    table.ensure_table()
    table.replace_all([campaign_to_doc(c) for c in campaigns])
    return len(campaigns)


@contextlib.asynccontextmanager
async def running_bidder(settings: Settings) -> AsyncIterator[RunningBidder]:
    if settings.campaigns_path is not None:
        await asyncio.to_thread(load_campaigns, settings.campaigns_path, settings)
    with _metrics_dir() as metrics_dir:
        pool = WorkerPool(settings)
        await pool.start()
        runner = web.AppRunner(
            build_admin_app(metrics_dir, pool.alive, settings.workers, settings.valkey_url),
            access_log=None,
        )
        try:
            await runner.setup()
            await web.TCPSite(runner, settings.host, settings.admin_port).start()
            yield RunningBidder(
                bid_url=f"http://{settings.host}:{settings.port}",
                admin_url=f"http://{settings.host}:{settings.admin_port}",
                pool=pool,
            )
        finally:
            await runner.cleanup()
            await pool.stop()


@contextlib.contextmanager
def _metrics_dir() -> Iterator[str]:
    """A fresh Prometheus multi-process directory, set in the environment for workers."""
    path = tempfile.mkdtemp(prefix="bidsim-metrics-")
    previous = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = previous
        shutil.rmtree(path, ignore_errors=True)
