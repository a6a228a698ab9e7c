"""The running bidder: resources ready, workers and reconciler up, admin port open.

``running_bidder`` is the one way to bring the service up, used by
``bidsim serve`` and by ``bidsim replay`` without ``--target``. It expects the
Valkey and AWS endpoints to exist already (see ``bidder.stack.local``). As supervisor it
prepares what workers only use (campaigns loaded, the spend stream, archive bucket
and profile table created, one notice signing key for all workers), checks the
model artifact once so a bad one is a clean error, starts the reconciler once every
worker has registered (its first tick then leases to all of them), and returns once
every worker holds its first pacing leases: a replay then measures the steady state,
not the first tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from botocore.exceptions import BotoCoreError, ClientError

from bidder.adapters.aws import aws_client
from bidder.adapters.campaign_store import CampaignTable
from bidder.adapters.valkey import VALKEY_FAILURES, AsyncValkey, connect_async
from bidder.core.campaign_docs import campaign_to_doc, load_campaign_file
from bidder.core.campaigns import Campaign
from bidder.core.tokens import generate_key
from bidder.decide.identity_graph import load_graph
from bidder.decide.identity_table import IdentityStoreError, IdentityTable
from bidder.decide.profiles import ProfileStoreError, ProfileTable
from bidder.serve.admin import build_admin_app
from bidder.serve.assemble import pacing_node_id
from bidder.serve.reconciler_process import running_reconciler
from bidder.serve.settings import Settings
from bidder.serve.workers import PoolCollector, WorkerPool
from bidder.stack.child import Supervised
from bidder.winloop.spend_stream import ensure_ledger_resources
from models.scorer import ModelHandle
from pacing.lease_store import leases_key, live_nodes_key
from pacing.refresher import refresh_interval_s

log = logging.getLogger(__name__)

_LEASE_WAIT_TICKS = 3
_LEASE_WAIT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class RunningBidder:
    bid_url: str
    admin_url: str
    pool: WorkerPool
    reconciler: Supervised | None
    """The reconciler process this bidder started (``Settings.reconciler``)."""


def campaigns_of(path: Path, settings: Settings) -> list[Campaign]:
    """The campaign file's campaigns, daily budgets scaled by ``--budget-scale``."""
    campaigns = load_campaign_file(path)
    if settings.budget_scale == 1.0:
        return campaigns
    return [
        dataclasses.replace(
            c, daily_budget_micros=round(c.daily_budget_micros * settings.budget_scale)
        )
        for c in campaigns
    ]


def load_campaigns(path: Path, settings: Settings) -> int:
    """Validate a campaign file and make the store hold exactly its campaigns."""
    campaigns = campaigns_of(path, settings)
    if settings.aws_endpoint is None:
        raise ValueError("no AWS endpoint to load campaigns into")
    client = aws_client("dynamodb", settings.aws_endpoint, settings.aws_region)
    table = CampaignTable(client, settings.campaigns_table)
    table.ensure_table()
    table.replace_all([campaign_to_doc(c) for c in campaigns])
    return len(campaigns)


class PrepareError(ValueError):
    """A resource the workers need could not be made; the message names it."""


def prepare_resources(settings: Settings) -> None:
    """What the workers need to exist, made by the supervisor (blocking: boto3)."""
    ModelHandle.load(settings.model_dir)  # raises ArtifactError naming what disagrees
    if settings.identity_graph is not None:
        load_graph(settings.identity_graph)  # raises GraphFormatError naming the file
    if settings.aws_endpoint is None:
        raise PrepareError("no AWS endpoint for campaigns, profiles and the spend stream")
    try:
        _prepare_aws(settings, settings.aws_endpoint)
    except (BotoCoreError, ClientError, ProfileStoreError, IdentityStoreError) as exc:
        raise PrepareError(
            f"cannot prepare AWS resources at {settings.aws_endpoint}: {exc}"
        ) from exc


def _prepare_aws(settings: Settings, endpoint: str) -> None:
    if settings.campaigns_path is not None:
        load_campaigns(settings.campaigns_path, settings)
    ensure_ledger_resources(
        endpoint,
        settings.aws_region,
        settings.spend_stream,
        settings.archive_bucket,
        settings.archive_retention_days,
    )
    dynamodb = aws_client("dynamodb", endpoint, settings.aws_region)
    ProfileTable(dynamodb, settings.profiles_table).ensure_table()
    if settings.identity_table is not None:
        _check_identity_table(IdentityTable(dynamodb, settings.identity_table), endpoint)


def _check_identity_table(table: IdentityTable, endpoint: str) -> None:
    if table.current_version() is None:
        raise PrepareError(
            f"--identity-table {table.table_name!r} at {endpoint} has no graph:"
            " load one with `bidsim identity load`"
        )


def with_shared_notice_key(settings: Settings) -> Settings:
    """Settings whose workers all sign and verify with one key.

    Without ``--notice-key`` each worker would make its own, and a notice reaching
    another worker than the one that bid would be refused. The generated key dies
    with this process: notices of bids made before a restart are refused.
    """
    if settings.notice_keys:
        return settings
    log.warning("no --notice-key: notices are signed with a key made for this run only")
    return settings.replace(notice_keys=(("run", generate_key()),))


@contextlib.asynccontextmanager
async def running_bidder(
    settings: Settings, reconciler_settings: Settings | None = None
) -> AsyncIterator[RunningBidder]:
    """``reconciler_settings``: the reconciler's own settings where they differ from the
    workers' (the same stores reached another way, e.g. through a proxy)."""
    await asyncio.to_thread(prepare_resources, settings)
    settings = with_shared_notice_key(settings)
    with _metrics_dir() as metrics_dir, contextlib.ExitStack() as reconciling:
        reconciler = None
        pool = WorkerPool(settings)
        await pool.start()
        runner = web.AppRunner(
            build_admin_app(
                metrics_dir,
                pool.alive,
                settings.workers,
                settings.valkey_url,
                settings.valkey_cluster,
                collectors=[PoolCollector(pool)],
            ),
            access_log=None,
        )
        try:
            if settings.reconciler:
                nodes = [pacing_node_id(pid) for pid in pool.pids]
                # The reconciler ticks as it starts, leasing to the nodes registered
                # then: started once every worker has, that first tick leases to all of
                # them (started beside the workers, it would find none, and they would
                # wait a whole tick, 5 s by default, with no budget).
                await wait_for_registration(settings, nodes)
                reconciler = reconciling.enter_context(
                    running_reconciler(reconciler_settings or settings)
                )
                await wait_for_leases(settings, nodes)
            await runner.setup()
            await web.TCPSite(runner, settings.host, settings.admin_port).start()
            # Port 0: the one the system gave, so a caller need not pick a free port
            # seconds before the bidder's start binds it (another process may take it).
            admin_port = runner.addresses[0][1]
            yield RunningBidder(
                bid_url=f"http://{settings.host}:{settings.port}",
                admin_url=f"http://{settings.host}:{admin_port}",
                pool=pool,
                reconciler=reconciler,
            )
        finally:
            await runner.cleanup()
            reconciling.close()  # first: no lease is granted to a node that is stopping
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


async def wait_for_registration(settings: Settings, nodes: list[str]) -> None:
    """Until every node in ``nodes`` is in the live set (its first lease refresh), for
    one tick at most. Like ``wait_for_leases``, it ends at once on a stop."""

    async def registered(client: AsyncValkey) -> bool:
        scores = await client.zmscore(live_nodes_key(), nodes)
        return all(score is not None for score in scores)

    if await _poll_valkey(settings, registered, settings.pacing_tick_s) is False:
        log.warning("workers did not register in a tick: they get leases a tick later")


async def wait_for_leases(settings: Settings, nodes: list[str]) -> None:
    """Until every node in ``nodes`` holds leases and has had time to read them.

    Bounded (3 ticks): after that the bidder serves anyway and answers ``no_lease``.
    A stop during the wait (Ctrl-C, SIGTERM) ends it at once: it runs on the event loop,
    not in a thread that the loop's shutdown would have to wait for.
    """

    async def leased(client: AsyncValkey) -> bool:
        return bool(await client.exists(*(leases_key(node) for node in nodes)) == len(nodes))

    found = await _poll_valkey(settings, leased, _LEASE_WAIT_TICKS * settings.pacing_tick_s)
    if found:
        # Each worker re-reads its leases at this interval.
        refresh_s = refresh_interval_s(settings.lease_refresh_s, settings.pacing_tick_s)
        await asyncio.sleep(1.5 * refresh_s)
    elif found is False:
        log.warning("workers have no pacing leases yet: bids answer no_lease until they do")


async def _poll_valkey(
    settings: Settings, holds: Callable[[AsyncValkey], Awaitable[bool]], within_s: float
) -> bool | None:
    """Whether ``holds`` came true within ``within_s`` (asked every 0.1 s); None when
    there is no Valkey to ask, or it failed (logged)."""
    if settings.valkey_url is None:
        return None
    deadline = time.monotonic() + within_s
    client = connect_async(
        settings.valkey_url, cluster=settings.valkey_cluster, timeout_s=_LEASE_WAIT_TIMEOUT_S
    )
    try:
        while not await holds(client):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True
    except VALKEY_FAILURES as exc:
        log.warning("cannot read the pacing state in Valkey (%s); going on", exc)
        return None
    finally:
        await client.aclose()
