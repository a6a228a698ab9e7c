"""The supervisor's view of its worker processes: start, watch, stop.

Workers are started with the ``spawn`` method so each gets a fresh interpreter
(no forked event loop or boto3 state) and inherits the Prometheus
multi-process directory from the environment set before the spawn.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from bidder.settings import Settings
from bidder.worker import SHUTDOWN_GRACE_S, run_worker

_START_TIMEOUT_S = 60.0
_STOP_GRACE_S = SHUTDOWN_GRACE_S + 3.0
"""A worker's own graceful stop, plus interpreter exit; then it is killed."""


class WorkerPoolError(Exception):
    """Workers could not be started; the message carries their own reasons."""


class WorkerPool:
    def __init__(self, settings: Settings):
        self._settings = settings
        self._procs: list[BaseProcess] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

    def alive(self) -> int:
        return sum(1 for p in self._procs if p.is_alive())

    async def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        pipes = []
        for _ in range(self._settings.workers):
            receiver, sender = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=run_worker, args=(self._settings, os.getpid(), sender))
            proc.start()
            sender.close()
            self._procs.append(proc)
            pipes.append(receiver)
        problems = await asyncio.gather(*(asyncio.to_thread(_await_ready, r) for r in pipes))
        if any(problems):
            await self.stop()
            raise WorkerPoolError("; ".join(sorted({p for p in problems if p})))

    async def stop(self) -> None:
        """SIGTERM every worker (each stops gracefully: ``bidder.worker``), wait, kill
        what is still alive after ``_STOP_GRACE_S``."""
        for proc in self._procs:
            if proc.is_alive() and proc.pid is not None:
                proc.terminate()
        await asyncio.gather(*(asyncio.to_thread(_join_or_kill, p) for p in self._procs))
        self._procs.clear()


def _await_ready(receiver: Connection) -> str:
    """'' when the worker is ready, else why it is not."""
    try:
        if not receiver.poll(_START_TIMEOUT_S):
            return f"a worker did not become ready within {_START_TIMEOUT_S:.0f} s"
        kind, detail = receiver.recv()
    except EOFError:
        return "a worker exited during start-up"
    finally:
        receiver.close()
    return "" if kind == "ready" else str(detail)


def _join_or_kill(proc: BaseProcess) -> None:
    proc.join(_STOP_GRACE_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
