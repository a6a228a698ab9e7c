"""How a worker process begins: forked from a server that has the libraries loaded.

A worker spends about a second of CPU importing LightGBM (with SciPy and NumPy),
boto3, redis, aiohttp, bidsim's own modules and the rest before it can start; a
replacement after a crash would pay it while its slot serves nothing. So workers (and
the reconciler, ``bidder.serve.forked_child``) are forked from ``multiprocessing``'s
fork server: one process per supervisor, started with the first worker, that imports
``PRELOADED`` once (the libraries, the worker's own code and the models of the AWS
services the workers call, then freezes that heap for the garbage collector) and forks
each worker from that state. It holds no event loop, thread or connection (the clients
that read those models were dropped unused), so a fork of it is as clean as a fresh
interpreter.

The fork server was started with the supervisor's environment of that moment, and a
forked worker inherits the server's. ``enter`` gives the worker the supervisor's
environment of the moment it was asked for (the Prometheus multi-process directory
is set there just before the workers start), and only then unpickles the worker's
entry point and its arguments. The worker's code declares its metrics as it is imported
but loads ``prometheus_client``, which reads that directory as it loads, only when the
started worker binds them (``bidder.core.published_metrics``). Of ``PRELOADED``, only
``bidder.serve.fork_warmup`` reads the environment as it loads: the boto3 session keeps
the AWS profile and config file of the fork server's start, the same for every worker of
one supervisor.

The fork server listens on a Unix socket in ``multiprocessing``'s temporary directory,
made under ``TMPDIR``. A socket's path has at most 107 bytes on Linux, and a long
``TMPDIR`` (a test's own directory) would stop the server from starting; then that
directory is made under the system's temporary directory instead.

The worker's parent is the fork server, not the supervisor, so a worker watches the
supervisor itself (``bidder.stack.child.die_with``). The fork server lives while the
supervisor or any worker it forked does, then exits.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import tempfile
from multiprocessing import util
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

PRELOADED = (
    "lightgbm",
    "numpy",
    "scipy.sparse",
    "boto3",
    "botocore.session",
    "redis.asyncio",
    "hiredis",
    "aiohttp",
    "httptools",
    "msgspec",
    "orjson",
    "uvloop",
    "bidder.serve.worker",
    "bidder.serve.fork_warmup",
)
"""Modules the fork server imports once for every worker it forks: the libraries, the
worker with the bid path, then ``bidder.serve.fork_warmup`` (the botocore models, and
the server's heap frozen, so it must come last). None of them may import
``prometheus_client`` (it chooses its multi-process mode as it loads)."""
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
_SOCKET_PATH_MAX = 107
"""Bytes in a Unix socket's path on Linux, its terminating NUL aside."""
_LISTENER_PATH = len("/pymp-12345678/listener-12345678")
"""What ``multiprocessing`` adds to ``TMPDIR`` for the fork server's socket."""
_SYSTEM_TEMP_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def start(entry: Any, args: Any) -> tuple[BaseProcess, Connection]:
    """A started process that runs ``entry(args, this process's pid, pipe)`` from
    ``enter``, and the read end of that pipe."""
    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    payload = (dict(os.environ), pickle.dumps((entry, args)), os.getpid(), sender)
    proc = ctx.Process(target=enter, args=payload)
    try:
        proc.start()
    except BaseException:
        receiver.close()
        raise
    finally:
        sender.close()
    return proc, receiver


def _context() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(list(PRELOADED))  # read once, when the server starts
    _socket_dir_short_enough()
    return ctx


def _socket_dir_short_enough() -> None:
    """Make ``multiprocessing``'s temporary directory (once per process) under the
    system's temporary directory if ``TMPDIR`` is too long for the fork server's socket."""
    if len(os.fsencode(tempfile.gettempdir())) + _LISTENER_PATH <= _SOCKET_PATH_MAX:
        return
    given = tempfile.tempdir
    tempfile.tempdir = next((d for d in _SYSTEM_TEMP_DIRS if os.access(d, os.W_OK)), given)
    try:
        util.get_temp_dir()  # made now, kept for the process's life, removed at its exit
    finally:
        tempfile.tempdir = given


def enter(environ: dict[str, str], payload: bytes, supervisor_pid: int, conn: Connection) -> None:
    """A worker's first code (the ``target`` of its process): the supervisor's
    environment, then its entry point.

    ``multiprocessing`` imports the parent's main module in the worker before this
    runs. One that loads ``prometheus_client`` as it is imported (a script importing
    ``bidder`` at its top) has made the worker's metrics in the fork server's directory,
    which belongs to the process's first bidder; the worker then refuses to start,
    saying so, rather than count into another bidder's files."""
    server_dir = os.environ.get(METRICS_DIR)
    os.environ.clear()
    os.environ.update(environ)
    if "prometheus_client" in sys.modules and environ.get(METRICS_DIR) != server_dir:
        main = getattr(sys.modules.get("__mp_main__"), "__file__", "the main module")
        conn.send(("error", f"{main} loads prometheus_client when it is imported, so this "
                   "worker's metrics would go to another bidder's directory: import bidder "
                   "inside the function that runs, not at the module's top"))  # fmt: skip
        raise SystemExit(3)
    entry, args = pickle.loads(payload)
    entry(args, supervisor_pid, conn)
