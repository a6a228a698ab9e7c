"""How a worker process begins: forked from the supervisor's fork server.

The supervisor starts its workers with ``multiprocessing``'s ``forkserver`` method. The
fork server is a fresh, single-threaded interpreter that imports the heavy third-party
packages a worker needs (``PRELOAD``) once; each worker is a fork of it, so it starts
without paying those imports again and shares their pages with its siblings. What the
fork server must not hold is anything a worker sets up from its supervisor's state:
the environment (the Prometheus multi-process directory is chosen per supervisor, and
``prometheus_client`` picks its value class when first imported), the event loop, the
clients. So the fork server imports no ``bidder`` module and no ``prometheus_client``,
and ``begin`` applies the supervisor's environment before the worker's own module is
imported.

A forked worker's parent is the fork server, which exits when the supervisor does
(multiprocessing closes its pipe): the worker asks for SIGTERM when the fork server
dies, so it still dies with its supervisor, one process later.
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Callable, Mapping
from multiprocessing import forkserver
from typing import Any

from bidder.stack.child import die_with_parent

PRELOAD = (
    "numpy",
    "lightgbm",
    "boto3",
    "botocore.session",
    "aiohttp",
    "redis.asyncio",
    "msgspec",
    "orjson",
    "uvloop",
    "httptools",
)
"""Imported once by the fork server: what most of a worker's start-up imports cost."""


def entry_point(target: Callable[..., Any]) -> str:
    """``module:name`` of a module-level function: how ``begin`` finds it."""
    return f"{target.__module__}:{target.__qualname__}"


def _let_go_of_the_fork_server() -> None:
    """Close this process's copy of the fork server's "alive" pipe.

    multiprocessing hands every process it forks that pipe's write end, and the fork
    server runs until no process holds it. Kept, a killed supervisor would leave the
    fork server running for as long as a worker lives, and every worker waiting for
    the fork server to die: none would ever stop.
    """
    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]


def begin(
    supervisor_pid: int, environ: Mapping[str, str], target: str, settings: bytes, conn: Any
) -> None:
    """Process entry point: die with the supervisor, take its environment, then import
    ``target`` (``module:name``) and run it with the unpickled ``settings`` and ``conn``.
    The settings come pickled because unpickling imports the modules of their classes,
    which must see the supervisor's environment."""
    _let_go_of_the_fork_server()
    die_with_parent(os.getppid())()
    try:
        os.kill(supervisor_pid, 0)
    except ProcessLookupError:  # it died before this worker could be bound to it
        os._exit(1)
    os.environ.clear()
    os.environ.update(environ)
    module, _, name = target.partition(":")
    run = getattr(importlib.import_module(module), name)
    run(pickle.loads(settings), conn)
