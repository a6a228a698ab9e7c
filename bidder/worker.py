"""One bidder worker process: its own event loop, caches, leases and worker id.

Workers share the bid port through SO_REUSEPORT, so the kernel spreads
connections across them and each is an independent "node" (``bidder.assemble``
builds what it decides with). A worker reports ``("ready", pid)`` or
``("error", message)`` on its pipe once, ignores Ctrl-C (the supervisor owns
shutdown), stops gracefully on SIGTERM (returning its id lease and flushing the
ledger), and dies with the supervisor if that is killed outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from multiprocessing.connection import Connection

import uvloop
from aiohttp import web

from bidder.app import BidderState, build_app
from bidder.assemble import WorkerStartError, build_state
from bidder.settings import Settings
from bidder.stack import die_with_parent

log = logging.getLogger(__name__)


def run_worker(settings: Settings, parent_pid: int, conn: Connection) -> None:
    """Process entry point (multiprocessing, spawn)."""
    die_with_parent(parent_pid)()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        uvloop.run(_serve(settings, conn))
    except WorkerStartError as exc:
        conn.send(("error", str(exc)))
        raise SystemExit(3) from None


async def start_background(state: BidderState) -> list[asyncio.Task[None]]:
    """Start the state's background jobs (id lease renewal, ledger shipping)."""
    return [asyncio.create_task(job()) for job in state.background]


async def stop_background(state: BidderState, tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the jobs, then close what they used (flush the ledger, release the id)."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for close in state.closers:
        try:
            await close()
        except Exception as exc:  # shutting down: report and go on closing the rest
            log.warning("error while closing %s: %s", getattr(close, "__qualname__", close), exc)


async def start_site(state: BidderState) -> web.AppRunner:
    """Open the bid port for ``state``; the caller cleans the runner up."""
    settings = state.settings
    # No access log: it would cost more than the whole no-bid path. Gzip is decoded
    # by bidder.body, within the body cap.
    runner = web.AppRunner(build_app(state), access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_port=True, backlog=4096)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise WorkerStartError(f"cannot listen on {settings.host}:{settings.port}: {exc}") from exc
    return runner


async def _serve(settings: Settings, conn: Connection) -> None:
    state = await build_state(settings)
    runner = await start_site(state)
    # Everything loaded so far lives as long as the worker. Freezing it keeps the
    # garbage collector from rescanning it: without this a full collection over the
    # start-up heap (boto3, botocore, aiohttp) stalled requests for ~30 ms.
    gc.collect()
    gc.freeze()
    background = await start_background(state)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    conn.send(("ready", os.getpid()))
    await stop.wait()
    await runner.cleanup()
    await stop_background(state, background)
