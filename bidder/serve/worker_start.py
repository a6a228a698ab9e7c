"""How a worker process begins: forked from a server that has the libraries loaded.

A worker spends about a second of CPU importing LightGBM (with SciPy and NumPy),
boto3, redis, aiohttp and the rest before it can start; a replacement after a crash
would pay it while its slot serves nothing. So workers are forked from
``multiprocessing``'s fork server: one process per supervisor, started with the first
worker, that imports ``PRELOADED`` once and forks each worker from that state. It holds
no event loop, thread, client or connection, so a fork of it is as clean as a fresh
interpreter.

The fork server was started with the supervisor's environment of that moment, and a
forked worker inherits the server's. ``enter`` gives the worker the supervisor's
environment of the moment it was asked for (the Prometheus multi-process directory
is set there just before the workers start), and only then unpickles the worker's
entry point and settings: importing them loads ``prometheus_client``, which reads that
directory as it loads. Nothing in ``PRELOADED`` reads the environment as it loads.

The worker's parent is the fork server, not the supervisor, so a worker watches the
supervisor itself (``bidder.stack.child.die_with``). The fork server lives while the
supervisor or any worker it forked does, then exits.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
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
)
"""Libraries the fork server imports once for every worker it forks. None of them may
import ``prometheus_client`` (it chooses its multi-process mode as it loads)."""


def context() -> ForkServerContext:
    """The ``multiprocessing`` context workers are started with."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(list(PRELOADED))  # read once, when the server starts
    return ctx


def worker_args(entry: Any, settings: Any, conn: Connection) -> tuple[Any, ...]:
    """The arguments of ``enter`` for a worker running ``entry(settings, parent, conn)``,
    asked for now by this process."""
    return (dict(os.environ), pickle.dumps((entry, settings)), os.getpid(), conn)


def enter(environ: dict[str, str], payload: bytes, supervisor_pid: int, conn: Connection) -> None:
    """A worker's first code (the ``target`` of its process): the supervisor's
    environment, then its entry point."""
    os.environ.clear()
    os.environ.update(environ)
    entry, settings = pickle.loads(payload)
    entry(settings, supervisor_pid, conn)
