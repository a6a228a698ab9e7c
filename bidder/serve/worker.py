"""One bidder worker process: its own event loop, caches, leases and worker id.

Workers share the bid port through SO_REUSEPORT, so the kernel spreads
connections across them and each is an independent "node" (``bidder.serve.assemble``
builds what it decides with). A worker reports ``("ready", pid)`` or
``("error", message)`` on its pipe once, ignores Ctrl-C (the supervisor owns
shutdown), stops gracefully on SIGTERM, and dies with the supervisor if that is
killed outright.

Graceful stop (``shutdown``), in order, all of it within ``SHUTDOWN_GRACE_S`` (the
pool kills a worker that takes longer; nothing is lost then either: the spool and the
deferred journal are adopted by another process, the leases expire):

1. stop listening: new connections go to the other workers on the port
   (SO_REUSEPORT); idle keep-alive connections are closed, so the exchange reconnects
   to a live worker; requests already being handled finish, within ``DRAIN_S`` (a bid
   ends at its deadline). No drain window for notices: once the socket is closed the
   other workers receive them and debit their own leases, which is what keeps the
   reconciler's exposure sound after this node returns its remainders;
2. stop the background jobs: the lease refresher (the node stays in the live set
   until step 3 returns its leases), the deferred-notice replay (what is left stays
   journaled, for another worker to adopt), the ledger shipper;
3. close, in order (``state.closers``): the deferred journal, the ledger producer
   (ships what is spooled, within its flush timeout), the pacing leases (deregister,
   then return them: ``pacing.refresher.return_leases``), the Snowflake id lease, the
   clients.

Bid requests racing the stop are not answered ``shutting_down``: one sent on an idle
keep-alive connection just as it is closed meets the close (the usual keep-alive race;
the exchange counts a no-bid), and the exchange's next connection lands on a live
worker. A request that has arrived is answered.
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

from bidder.serve._loads import WorkerStartError
from bidder.serve.app import BidderState, build_server
from bidder.serve.assemble import build_state
from bidder.serve.settings import Settings
from bidder.stack.child import die_with_parent

log = logging.getLogger(__name__)

DRAIN_S = 2.0
"""How long requests in progress at shutdown may take to finish."""
SHUTDOWN_GRACE_S = 7.0
"""The whole graceful stop: drain (2 s), flush (2 s), the rest (about 1.5 s)."""


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
            closing = close()
            if closing is not None:
                await closing
        except Exception as exc:  # shutting down: report and go on closing the rest
            log.warning("error while closing %s: %s", getattr(close, "__qualname__", close), exc)


async def start_site(state: BidderState) -> web.BaseRunner:
    """Open the bid port for ``state``; the caller cleans the runner up."""
    settings = state.settings
    # No access log: it would cost more than the whole no-bid path. Gzip is decoded
    # by bidder.openrtb.body, within the body cap.
    runner = web.ServerRunner(build_server(state), access_log=None, shutdown_timeout=DRAIN_S)
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
    await shutdown(state, runner, background)


async def shutdown(
    state: BidderState, runner: web.BaseRunner, background: list[asyncio.Task[None]]
) -> None:
    """The graceful stop (module docstring), cut short at ``SHUTDOWN_GRACE_S``."""
    try:
        async with asyncio.timeout(SHUTDOWN_GRACE_S):
            await runner.cleanup()
            await stop_background(state, background)
    except TimeoutError:
        log.error("graceful stop took over %.0f s; exiting with work left", SHUTDOWN_GRACE_S)
