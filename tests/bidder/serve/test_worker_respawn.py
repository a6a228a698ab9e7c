"""Live: the worker pool replaces a worker that dies while the bidder runs.

Real worker processes on the session's Valkey and moto. A worker of a running
2-worker bidder is killed with SIGKILL; the pool starts a fresh process in its slot,
which serves bid requests (its own Prometheus file counts them) and holds pacing
leases under its own node id. Start-up crashes of replacements are injected through
the pool's ``target`` hook (``_controlled_worker``, started like ``run_worker``),
steered by files in a directory named by ``CONTROL_ENV``: ``crashes`` holds how many
starts still crash, ``hang`` makes a start block forever, and each start leaves
``started-<pid>``. Waits are bounded polls; nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import pytest_asyncio
import redis
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from bidder.chaos.scenarios.worker_kill9 import answered_by
from bidder.serve.assemble import pacing_node_id
from bidder.serve.server import prepare_resources, running_bidder, with_shared_notice_key
from bidder.serve.settings import Settings
from bidder.serve.worker import run_worker
from bidder.serve.workers import PoolCollector, Restart, RestartPolicy, WorkerPool, describe_exit
from bidder.stack.child import die_with, held_port
from pacing.lease_store import leases_key
from tests.processes import reaped

pytestmark = pytest.mark.long(20)

CONTROL_ENV = "BIDSIM_TEST_WORKER_CONTROL"
BOUND_S = 60.0
"""How long a poll waits for the pool before the test gives up (never asserted on)."""
QUICK = RestartPolicy(first_s=0.05, max_s=0.2, stable_s=30.0)
PATIENT = RestartPolicy(first_s=60.0, max_s=60.0, stable_s=30.0)
"""A back-off the test outlives: a respawn stays pending."""


def _controlled_worker(settings: Settings, supervisor_pid: int, conn: Connection) -> None:
    """``run_worker``, unless the test's control directory says crash or hang first."""
    die_with(supervisor_pid)
    control = Path(os.environ[CONTROL_ENV])
    (control / f"started-{os.getpid()}").touch()
    crashes = control / "crashes"
    left = int(crashes.read_text()) if crashes.exists() else 0
    if left > 0:
        crashes.write_text(str(left - 1))
        os._exit(3)  # a crash: no report on the pipe
    while (control / "hang").exists():
        time.sleep(0.1)
    run_worker(settings, supervisor_pid, conn)


async def _until(condition: Callable[[], bool]) -> bool:
    for _ in range(round(BOUND_S / 0.05)):
        if condition():
            return True
        await asyncio.sleep(0.05)
    return condition()


def _started(control: Path) -> set[int]:
    return {int(p.name.removeprefix("started-")) for p in control.glob("started-*")}


def _fresh(settings: Settings, **changes: object) -> Settings:
    return settings.replace(port=held_port(), admin_port=0, **changes)


# --- pure parts ------------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=10_000))
def test_restart_delays_double_from_the_first_up_to_the_cap(failures: int) -> None:
    policy = RestartPolicy(first_s=0.5, max_s=30.0)
    delay, before = policy.delay_s(failures), policy.delay_s(failures - 1)
    assert 0.0 <= before <= delay <= 30.0
    assert delay in (0.0, 30.0) or delay == 0.5 * 2 ** (failures - 2)


def test_the_first_restart_of_a_slot_does_not_wait() -> None:
    assert RestartPolicy().delay_s(1) == 0.0 and RestartPolicy().delay_s(2) == 0.5


def test_an_exit_by_signal_is_described_by_its_name() -> None:
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"


# --- a killed worker of a live bidder ---------------------------------------------------


@dataclass(frozen=True)
class Respawned:
    victim: int
    survivor: int
    pids_after: list[int]
    restart: Restart
    answered: int
    """Bid requests the replacement answered."""
    holds_leases: bool
    log: list[str]
    metrics: str
    """The pool's own metrics (``PoolCollector``) once the replacement was ready."""


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _kill_one(settings: Settings, lines: _Lines) -> Respawned:
    async with running_bidder(settings) as bidder:
        pool = bidder.pool
        victim, survivor = pool.pids
        os.kill(victim, signal.SIGKILL)
        await _until(lambda: bool(pool.restarts) and pool.restarts[0].ready_at is not None)
        new = pool.restarts[0].new_pid or 0
        answered = await answered_by(f"{bidder.bid_url}/openrtb2/bid", new)
        client = redis.Redis.from_url(settings.valkey_url or "")
        try:
            key = leases_key(pacing_node_id(new))
            holds = await _until(lambda: bool(client.exists(key)))
        finally:
            client.close()
        pids_after = pool.pids
        registry = CollectorRegistry()
        registry.register(PoolCollector(pool))
        metrics = generate_latest(registry).decode()
    return Respawned(
        victim, survivor, pids_after, pool.restarts[0], answered, holds, lines.lines, metrics
    )


@pytest.fixture(scope="module")
def respawned(bidder_settings: Settings) -> Respawned:
    """A live 2-worker bidder whose worker 0 was killed with SIGKILL, once replaced."""
    logger, lines = logging.getLogger("bidder.serve.workers"), _Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        return asyncio.run(_kill_one(_fresh(bidder_settings, workers=2), lines))
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def test_a_worker_killed_with_sigkill_is_replaced_by_a_new_process(
    respawned: Respawned,
) -> None:
    new = respawned.restart.new_pid
    assert new is not None and new not in (respawned.victim, respawned.survivor)
    assert respawned.pids_after == [new, respawned.survivor]


def test_the_replacement_answers_bid_requests(respawned: Respawned) -> None:
    assert respawned.answered > 0


def test_the_replacement_holds_pacing_leases_under_its_own_node_id(
    respawned: Respawned,
) -> None:
    assert respawned.holds_leases


def test_the_log_names_the_dead_worker_and_its_signal(respawned: Respawned) -> None:
    new, victim = respawned.restart.new_pid, respawned.victim
    assert respawned.restart.reason == "was killed by SIGKILL"
    assert any(f"worker 0 (pid {victim}) was killed by SIGKILL" in s for s in respawned.log)
    assert any(f"worker 0 replaced: pid {new} ready" in s for s in respawned.log)


def test_the_pool_metrics_count_the_death_and_the_replacement(respawned: Respawned) -> None:
    lines = set(respawned.metrics.splitlines())
    assert {
        'bidsim_worker_restarts_total{outcome="died"} 1.0',
        'bidsim_worker_restarts_total{outcome="ready"} 1.0',
        'bidsim_worker_restarts_total{outcome="failed_start"} 0.0',
        "bidsim_workers_alive 2.0",
    } <= lines


# --- injected start-up crashes and the stop ---------------------------------------------


@pytest_asyncio.fixture
async def controlled(
    bidder_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Settings, Path]]:
    """One-worker settings (resources prepared, as ``running_bidder`` does) and the
    control directory the spawned workers read."""
    monkeypatch.setenv(CONTROL_ENV, str(tmp_path))
    settings = _fresh(bidder_settings, workers=1, reconciler=False)
    await asyncio.to_thread(prepare_resources, settings)
    yield with_shared_notice_key(settings), tmp_path


async def _start(settings: Settings, policy: RestartPolicy) -> WorkerPool:
    pool = WorkerPool(settings, target=_controlled_worker, policy=policy)
    await pool.start()
    return pool


@pytest.mark.asyncio
async def test_a_replacement_crashing_at_start_up_is_retried_with_growing_back_off(
    controlled: tuple[Settings, Path], caplog: pytest.LogCaptureFixture
) -> None:
    settings, control = controlled
    caplog.set_level(logging.INFO, logger="bidder.serve.workers")
    pool = await _start(settings, QUICK)
    try:
        (control / "crashes").write_text("2")
        os.kill(pool.pids[0], signal.SIGKILL)
        await _until(lambda: bool(pool.restarts) and pool.restarts[0].ready_at is not None)
        restart, alive = pool.restarts[0], pool.alive()
    finally:
        await pool.stop()
    backoffs = [r.getMessage() for r in caplog.records if "backing off" in r.getMessage()]
    assert restart.failed_starts == 2
    assert restart.last_failure == "a worker exited during start-up (exited with code 3)"
    assert [line.rsplit(" ", 2)[-2] for line in backoffs] == ["0.05", "0.10"]
    assert alive == 1 and restart.new_pid is not None


@pytest.mark.asyncio
async def test_stopping_while_a_restart_waits_out_its_back_off_leaves_no_process(
    controlled: tuple[Settings, Path],
) -> None:
    settings, control = controlled
    pool = await _start(settings, PATIENT)
    (control / "crashes").write_text("1")
    os.kill(pool.pids[0], signal.SIGKILL)
    await _until(lambda: pool.counts.failed_start == 1)
    await pool.stop()
    started = _started(control)
    assert len(started) == 2 and all(reaped(pid) for pid in started)
    assert multiprocessing.active_children() == [] and pool.pids == []


@pytest.mark.asyncio
async def test_stopping_while_a_replacement_is_starting_ends_it(
    controlled: tuple[Settings, Path],
) -> None:
    settings, control = controlled
    pool = await _start(settings, QUICK)
    (control / "hang").touch()
    os.kill(pool.pids[0], signal.SIGKILL)
    await _until(lambda: len(_started(control)) == 2)
    await pool.stop()
    started = _started(control)
    assert len(started) == 2 and all(reaped(pid) for pid in started)
    assert multiprocessing.active_children() == [] and pool.restarts[0].new_pid is None
