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

A stopping worker ends ``EXIT_BACKSTOP_S`` after its SIGTERM at the latest
(``exit_within``), even with no pool left to kill it.

Background jobs are kept running while the worker serves (``keep_running``): one that
fails with an error it does not handle is logged, counted and started again.

Bid requests racing the stop are not answered ``shutting_down``: one sent on an idle
keep-alive connection just as it is closed meets the close (the usual keep-alive race;
the exchange counts a no-bid), and the exchange's next connection lands on a live
worker. A request that has arrived is answered.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from functools import partial
from multiprocessing.connection import Connection

import uvloop

from bidder.core import metrics, published_metrics
from bidder.core.tasks import cancel_and_wait
from bidder.serve._loads import WorkerStartError
from bidder.serve.app import BidderState, Job, build_server
from bidder.serve.assemble import build_state
from bidder.serve.http.server import HttpServer
from bidder.serve.settings import Settings
from bidder.stack.child import die_with

log = logging.getLogger(__name__)

DRAIN_S = 2.0
"""How long requests in progress at shutdown may take to finish."""
SHUTDOWN_GRACE_S = 7.0
"""The whole graceful stop: drain (2 s), flush (2 s), the rest (about 1.5 s)."""
EXIT_BACKSTOP_S = SHUTDOWN_GRACE_S + 3.0
"""A stopping worker has ended this long after its SIGTERM, whatever happens (``exit_within``)."""


def run_worker(settings: Settings, supervisor_pid: int, conn: Connection) -> None:
    """Process entry point (``bidder.serve.worker_start.enter`` calls it)."""
    die_with(supervisor_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        uvloop.run(_serve(settings, conn))
    except WorkerStartError as exc:
        conn.send(("error", str(exc)))
        raise SystemExit(3) from None


RESTART_FIRST_S = 0.5
RESTART_MAX_S = 30.0
"""A background job that fails is started again after ``RESTART_FIRST_S``, then twice as
long after each failure in a row, up to this."""
STABLE_S = 60.0
"""A job that ran this long before failing starts again after ``RESTART_FIRST_S``."""


async def start_background(state: BidderState) -> list[asyncio.Task[None]]:
    """Start the state's background jobs (id lease renewal, ledger shipping), each kept
    running (``keep_running``)."""
    return [asyncio.create_task(keep_running(job)) for job in state.background]


async def keep_running(job: Job, first_s: float = RESTART_FIRST_S) -> None:
    """Run ``job`` until it returns or is cancelled, starting it again after a failure.

    Each job handles the failures it expects (a store down, a stream unreachable) and
    goes on; what escapes is a failure nobody foresaw (a Cluster client's own error
    during a failover, a bug). Left dead, the job would stop the worker quietly: no
    lease refresh means no heartbeat, so no budget and no bids, for as long as the
    worker lives. So it is logged with its traceback, counted
    (``bidsim_background_restarts_total``) and the job started again.
    """
    name = _job_name(job)
    loop = asyncio.get_running_loop()
    delay = first_s
    while True:
        started = loop.time()
        try:
            await job()
            return
        except Exception:
            if loop.time() - started >= STABLE_S:
                delay = first_s
            metrics.BACKGROUND_RESTARTS.labels(name).inc()
            log.exception("background job %s failed; starting it again in %.1f s", name, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, RESTART_MAX_S)


def _job_name(job: Job) -> str:
    func = job.func if isinstance(job, partial) else job
    return str(getattr(func, "__qualname__", type(func).__qualname__))


async def stop_background(state: BidderState, tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the jobs, then close what they used (flush the ledger, release the id)."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        await cancel_and_wait(task)
    for close in state.closers:
        try:
            closing = close()
            if closing is not None:
                await closing
        except Exception as exc:  # shutting down: report and go on closing the rest
            log.warning("error while closing %s: %s", getattr(close, "__qualname__", close), exc)


async def start_site(state: BidderState) -> HttpServer:
    """Open the bid port for ``state``; the caller closes it (``HttpServer.close``)."""
    settings = state.settings
    server = build_server(state)
    try:
        await server.listen(settings.host, settings.port)
    except OSError as exc:
        raise WorkerStartError(f"cannot listen on {settings.host}:{settings.port}: {exc}") from exc
    return server


async def _serve(settings: Settings, conn: Connection) -> None:
    # Now that the environment is the supervisor's (``worker_start.enter``): the
    # metrics are made in this bidder's Prometheus directory.
    published_metrics.bind()
    state = await build_state(settings)
    site = await start_site(state)
    # Everything loaded so far lives as long as the worker. Freezing it keeps the
    # garbage collector from rescanning it: without this a full collection over the
    # start-up heap (boto3, botocore) stalled requests for ~30 ms.
    gc.collect()
    gc.freeze()
    background = await start_background(state)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    conn.send(("ready", os.getpid()))
    await stop.wait()
    exit_within(EXIT_BACKSTOP_S)
    await shutdown(state, site, background)


def exit_within(seconds: float) -> None:
    """Have the kernel end this process ``seconds`` from now (SIGALRM, whose default
    action ends it). The graceful stop is bounded by its timeouts; the event loop's last
    cancel of the tasks left after it is not: on Python 3.11 a task can drop a cancel
    (``asyncio.wait_for`` returns a result that arrived with it) and loop on, and the
    loop then waits for it forever. The pool kills such a worker, but a worker whose
    pool is gone (the supervisor killed) would live on. Ending it loses nothing: the
    spool and the deferred journal are written ahead."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, seconds)


async def shutdown(
    state: BidderState, site: HttpServer, background: list[asyncio.Task[None]]
) -> None:
    """The graceful stop (module docstring), cut short at ``SHUTDOWN_GRACE_S``."""
    try:
        async with asyncio.timeout(SHUTDOWN_GRACE_S):
            await site.close(DRAIN_S)
            await stop_background(state, background)
    except TimeoutError:
        log.error("graceful stop took over %.0f s; exiting with work left", SHUTDOWN_GRACE_S)
