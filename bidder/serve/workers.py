"""The supervisor's view of its worker processes: start, watch, replace, stop.

Workers are forked from a fork server that has the heavy libraries loaded and holds
no event loop, client or thread (``bidder.serve.worker_start``); each gets the
supervisor's environment as it is when the worker is started, with the Prometheus
multi-process directory in it.

Theory of operation. ``start`` spawns every worker and waits for each to report
ready on its pipe; one that fails makes ``start`` stop the rest and raise
``WorkerPoolError`` with the reasons. Once all are up, one watcher task per slot
waits for its process's sentinel (readable when the process exits: no polling).
A worker that exits while the pool runs is replaced in its slot by a fresh process
with the same settings: it leases its own Snowflake worker id and pacing node id as
any worker does at start-up and adopts the dead one's spool and journal segments
(their ``flock`` died with it); the dead node's pacing leases and id lease are
never returned, they expire (``pacing``: two ticks after the reconciler last wrote
them, which it stops doing once the node's heartbeat lapses; ``ids.worker_lease``).
The dead worker's counter and histogram files stay in the metrics directory (what it
counted still counts); its ``live*`` gauge files are removed (``mark_process_dead``).

Crash loops are bounded by ``RestartPolicy``: the first death of a slot is replaced
at once; each further failure in a row (a replacement that fails start-up, or dies
before it has run ``stable_s``) waits twice as long, from ``first_s`` up to
``max_s``. A replacement that fails start-up is retried forever: the bidder serves
on the remaining workers meanwhile and ``/healthz`` says degraded. A worker watches
the supervisor's pid and ends with it (``bidder.stack.child.die_with``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from prometheus_client import multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bidder.core.clock import Clock, SystemClock
from bidder.serve import worker_start
from bidder.serve.settings import Settings
from bidder.serve.worker import SHUTDOWN_GRACE_S, run_worker

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 60.0
_HISTORY = 100
"""Restart records kept (a crash loop must not grow the supervisor's memory)."""
_EXIT_WAIT_S = 5.0
"""How long a worker that failed start-up may take to exit before it is killed."""
_STOP_GRACE_S = SHUTDOWN_GRACE_S + 3.0
"""A worker's own graceful stop, plus interpreter exit; then it is killed."""

WorkerTarget = Callable[[Settings, int, Connection], None]
"""A worker process's entry point: ``(settings, supervisor pid, ready pipe)``."""


class WorkerPoolError(Exception):
    """Workers could not be started; the message carries their own reasons."""


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    first_s: float = 0.5
    """The wait before the second restart in a row; it doubles with each further one."""
    max_s: float = 30.0
    stable_s: float = 30.0
    """A worker that ran this long before dying starts its slot's count afresh."""

    def delay_s(self, failures: int) -> float:
        """The wait before a restart after ``failures`` failures in a row (1: none)."""
        if failures <= 1:
            return 0.0
        return min(self.max_s, self.first_s * 2.0 ** min(failures - 2, 64))


DEFAULT_RESTART_POLICY = RestartPolicy()


def describe_exit(exitcode: int | None) -> str:
    """``multiprocessing``'s exit code in words: negative is the killing signal."""
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-exitcode).name}"
        return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


@dataclass
class Restart:
    """One death in a slot and what the pool did about it (``WorkerPool.restarts``)."""

    slot: int
    old_pid: int
    reason: str
    died_at: float
    """The pool clock's ``monotonic()`` when the death was seen."""
    failed_starts: int = 0
    """Replacement attempts that did not become ready."""
    last_failure: str | None = None
    """Why the latest of them failed."""
    new_pid: int | None = None
    ready_at: float | None = None


@dataclass
class RestartCounts:
    """Totals since the pool started (``restarts`` keeps only the latest records)."""

    died: int = 0
    """Workers seen dying while the bidder ran."""
    ready: int = 0
    """Replacements that became ready."""
    failed_start: int = 0
    """Replacement starts that failed."""


@dataclass
class _Slot:
    index: int
    proc: BaseProcess
    ready_at: float | None = None
    failures: int = 0


class WorkerPool:
    def __init__(
        self,
        settings: Settings,
        *,
        target: WorkerTarget = run_worker,
        policy: RestartPolicy = DEFAULT_RESTART_POLICY,
        clock: Clock | None = None,
    ):
        """``target``: the worker entry point (a test may wrap ``run_worker``; it must
        be importable: it is pickled to the worker)."""
        self._settings, self._target, self._policy = settings, target, policy
        self._clock = clock or SystemClock()
        self._slots: list[_Slot] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        self.restarts: deque[Restart] = deque(maxlen=_HISTORY)
        """The latest deaths seen while running, oldest first, with their replacements."""
        self.counts = RestartCounts()

    @property
    def pids(self) -> list[int]:
        """The live, ready workers, in slot order (a replacement once it is ready)."""
        return [s.proc.pid for s in self._slots if _serving(s) and s.proc.pid is not None]

    def alive(self) -> int:
        return len(self.pids)

    async def start(self) -> None:
        self._stopping = False
        count = self._settings.workers
        started = [worker_start.start(self._target, self._settings) for _ in range(count)]
        self._slots = [_Slot(i, proc) for i, (proc, _) in enumerate(started)]
        try:
            problems = await asyncio.gather(*(_await_ready(pipe) for _, pipe in started))
        except asyncio.CancelledError:  # stopped while starting: no worker outlives it
            await self.stop()
            raise
        if any(problems):
            await self.stop()
            raise WorkerPoolError("; ".join(sorted({p for p in problems if p})))
        for slot in self._slots:
            slot.ready_at = self._clock.monotonic()
        self._watchers = [asyncio.create_task(self._watch(s)) for s in self._slots]

    async def stop(self) -> None:
        """Stop replacing, SIGTERM every worker (each stops gracefully:
        ``bidder.serve.worker``), wait, kill what is still alive after ``_STOP_GRACE_S``.
        A replacement still starting is stopped too."""
        self._stopping = True
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers.clear()
        procs = [slot.proc for slot in self._slots]
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                proc.terminate()
        await asyncio.gather(*(asyncio.to_thread(_join_or_kill, p) for p in procs))
        self._slots.clear()

    async def _watch(self, slot: _Slot) -> None:
        """Forever: wait for the slot's worker to exit, then put a ready one in its place."""
        try:
            while not self._stopping:
                exitcode = await _exit_code(slot.proc)
                if self._stopping:
                    return
                restart = self._record_death(slot, exitcode)
                await self._replace(slot, restart)
        except Exception:  # our bug: say so loudly; the other workers go on serving
            log.exception(
                "worker %d: its watcher failed; the slot is no longer replaced", slot.index
            )

    def _record_death(self, slot: _Slot, exitcode: int) -> Restart:
        now = self._clock.monotonic()
        pid = slot.proc.pid or 0
        _forget_live_gauges(pid)
        if slot.ready_at is not None and now - slot.ready_at >= self._policy.stable_s:
            slot.failures = 0
        slot.failures += 1
        slot.ready_at = None
        restart = Restart(slot.index, pid, describe_exit(exitcode), now)
        self.restarts.append(restart)
        self.counts.died += 1
        log.error(
            "worker %d (pid %d) %s while the bidder runs; replacing it (failure %d in a row)",
            slot.index, pid, restart.reason, slot.failures,
        )  # fmt: skip
        return restart

    async def _replace(self, slot: _Slot, restart: Restart) -> None:
        """Start replacements, backing off, until one is ready."""
        while True:
            delay = self._policy.delay_s(slot.failures)
            if delay > 0:
                last = restart.last_failure or restart.reason
                log.warning(
                    "worker %d: %d failures in a row (last: %s); backing off %.2f s",
                    slot.index, slot.failures, last, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
            problem = await self._start_in(slot)
            if not problem:
                self._ready(slot, restart)
                return
            slot.failures += 1
            restart.failed_starts += 1
            restart.last_failure = problem
            self.counts.failed_start += 1
            log.error(
                "worker %d: replacement (pid %s) failed to start: %s",
                slot.index, slot.proc.pid, problem,
            )  # fmt: skip

    async def _start_in(self, slot: _Slot) -> str:
        """Spawn a worker into ``slot``; '' once it is ready, else why it is not."""
        try:
            proc, pipe = worker_start.start(self._target, self._settings)
        except OSError as exc:
            return f"cannot spawn a worker process: {exc}"
        slot.proc = proc  # before waiting: stop() must see (and stop) a starting worker
        problem = await _await_ready(pipe)
        if problem:
            problem = f"{problem} ({describe_exit(await _ended(proc))})"
        return problem

    def _ready(self, slot: _Slot, restart: Restart) -> None:
        slot.ready_at = self._clock.monotonic()
        restart.new_pid, restart.ready_at = slot.proc.pid, slot.ready_at
        self.counts.ready += 1
        log.warning(
            "worker %d replaced: pid %s ready %.2f s after pid %d %s",
            slot.index, slot.proc.pid, slot.ready_at - restart.died_at, restart.old_pid,
            restart.reason,
        )  # fmt: skip


class PoolCollector(Collector):
    """The supervisor's own metrics (register it beside the workers' multi-process
    collector): workers serving, and worker restarts by outcome."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        alive = GaugeMetricFamily("bidsim_workers_alive", "Worker processes serving.")
        alive.add_metric([], self._pool.alive())
        yield alive
        restarts = CounterMetricFamily(
            "bidsim_worker_restarts",
            "Worker deaths seen while the bidder runs (died), replacements that became"
            " ready (ready), replacement starts that failed (failed_start).",
            labels=["outcome"],
        )
        counts = self._pool.counts
        for outcome in ("died", "ready", "failed_start"):
            restarts.add_metric([outcome], getattr(counts, outcome))
        yield restarts


def _serving(slot: _Slot) -> bool:
    return slot.ready_at is not None and slot.proc.is_alive()


async def _readable(fd: int) -> None:
    """Until ``fd`` is readable (data or end of file), on the running loop."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()

    def wake() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await readable
    finally:
        loop.remove_reader(fd)


async def _exit_code(proc: BaseProcess) -> int:
    """Wait for ``proc`` to exit (its sentinel) and reap it."""
    await _readable(proc.sentinel)
    # The sentinel closes as the process exits, a moment before it can be reaped; no
    # event marks that moment, hence a short poll.
    while (exitcode := proc.exitcode) is None:  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    return exitcode


async def _ended(proc: BaseProcess) -> int:
    """The exit code of a worker that failed start-up: it is exiting (its pipe closed)
    or it reported an error and exits; killed if it lingers (or never became ready)."""
    try:
        async with asyncio.timeout(_EXIT_WAIT_S):
            return await _exit_code(proc)
    except TimeoutError:
        proc.kill()
        return await _exit_code(proc)


async def _await_ready(receiver: Connection) -> str:
    """'' when the worker is ready, else why it is not."""
    try:
        async with asyncio.timeout(_START_TIMEOUT_S):
            await _readable(receiver.fileno())
        kind, detail = receiver.recv()
    except TimeoutError:
        return f"a worker did not become ready within {_START_TIMEOUT_S:.0f} s"
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


def _forget_live_gauges(pid: int) -> None:
    """Drop a dead worker's ``live*`` gauge files so sums cover live workers only."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        multiprocess.mark_process_dead(pid, directory)
