"""Fault injectors: signal a server or a process, restart a Valkey, fire at a request.

Each injector does one thing to one process of the scenario's own stack, by pid:
SIGSTOP (a hung server: connections open, no answers), SIGCONT, SIGKILL (refused
connections once the socket closes). ``at_requests`` fires injectors when an
open-loop replay reaches given requests, so a fault lands mid-stream at a known
point whatever the machine's speed. ``ValkeyRestart`` brings a killed Valkey back,
empty, on its old port, from a thread that keeps it alive (a child dies with the
thread that started it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from bidder.stack.cluster import ValkeyNode

_T = TypeVar("_T")


def pause(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block; SIGCONT however it ends (a stopped child would
    ignore the SIGTERM that stops the stack)."""
    pause(pid)
    try:
        yield
    finally:
        resume(pid)


def at_requests(items: Iterable[_T], actions: Mapping[int, Callable[[], None]]) -> Iterator[_T]:
    """``items`` unchanged; ``actions[i]()`` runs just before item ``i`` is handed out."""
    for i, item in enumerate(items):
        action = actions.get(i)
        if action is not None:
            action()
        yield item


class ValkeyRestart:
    """Start a Valkey server on ``port`` (the killed one's) in a thread that keeps it.

    ``start()`` returns at once (starting takes a few hundred ms); ``up`` is set once
    it answers, ``up_at`` is then its monotonic time. ``close()`` stops it.
    """

    def __init__(self, workdir: Path, port: int, on_up: Callable[[], None] | None = None) -> None:
        """``on_up``: called on the restart thread once the server answers."""
        self._node = ValkeyNode(workdir, port)
        self._on_up = on_up
        self._closing = threading.Event()
        self.up = threading.Event()
        self.up_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="valkey-restart", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._node.start()
            self.up_at = time.monotonic()
            self.up.set()
            if self._on_up is not None:
                self._on_up()
            self._closing.wait()
        finally:
            self._node.stop()

    def close(self) -> None:
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(30)


def valkey_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])
