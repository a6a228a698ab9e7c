"""``worker_kill9``: a worker killed with SIGKILL mid-replay; nothing acknowledged is lost,
and the pool puts a fresh worker in its place.

What is injected: one of two workers is killed (SIGKILL: no handler, no flush) at the
first request of the second of three passes (healthy, killed, after: 40% of the
requests in). Until its replacement is ready the survivor takes every new connection
on the shared port (SO_REUSEPORT); ``WorkerPool`` sees the death on the process's
sentinel and starts a replacement at once (its first restart: no back-off), which
leases its own Snowflake worker id and pacing node, and adopts the dead worker's
spool segments at start-up. Requests in flight on the dead worker's connections are
lost to the client (transport errors or timeouts; at most its in-flight bound). The
dead node's pacing leases are never returned: they lapse (its heartbeat ends, then
the leases' expiry).

Checked: no 5xx; transport errors at most ``max_in_flight``; the passes after the kill
answer within the deadline about as often as the healthy one; bids go on after the
kill; the pool saw exactly this death and has all its workers again; the replacement
answers bid requests (its own metrics file counts them); the dead node's lease hash
is gone within its heartbeat plus the lease expiry; every acknowledged bill (the dead
worker's included: its metric files stay) reaches the stream and DynamoDB's totals
equal the ledger. ``recovery_s`` = kill -> the first bid on the probe (served by the
survivor); ``respawn_s`` = kill -> the pool has the replacement ready.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import aiohttp
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample

from bidder.adapters.valkey import connect_sync
from bidder.chaos.faults import at_requests, kill9
from bidder.chaos.harness import Live, ScenarioOptions, live_bidder, records, stream_file
from bidder.chaos.observe import Prober, first_bid_after, probe
from bidder.chaos.result import ScenarioResult, check_ratio_drop, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, check_budgets, replay_pass, run_on_stack, split
from bidder.replay.admin_metrics import WATCHED_FLUSH_S, published
from bidder.replay.report import ReplayResult
from bidder.serve.assemble import pacing_node_id
from bidder.serve.workers import Restart
from pacing.lease_store import leases_key

NAME = "worker_kill9"
INJECTED = "one of two workers killed with SIGKILL at 40% of the replay"
RATE = 200.0
PASSES = {True: (800, 1200, 600), False: (2400, 3600, 1500)}
"""Requests of the healthy, killed (the kill at its first request) and after passes."""
RECOVERY_BOUND_S = 2.0
RESPAWN_BOUND_S = 20.0
"""Kill -> replacement ready: a worker's own imports and start-up (campaigns, model,
leases) on a 2-core machine that is also replaying."""
PROBES_FOR_REPLACEMENT = 200
"""Fresh connections tried until one lands on the replacement (the kernel spreads them)."""
ANSWERED = "bidsim_bid_latency_seconds_count"
HEARTBEAT_S = 15.0
"""``pacing.lease_store.LeaseReader``'s heartbeat: how long a silent node stays live."""
LEASES_SLACK_S = 2.0


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run, workers=2)


async def _run(run: Run) -> None:
    counts = PASSES[run.short]
    stream = records(stream_file(run.workdir, "stream", sum(counts), seed=53))
    healthy, faulted, after = split(stream, counts)
    killed: list[float] = []
    async with live_bidder(run.stack, run.settings) as live:
        pool = live.bidder.pool
        victim = pool.pids[0]
        prober = Prober(live.target)
        prober.start()

        def kill() -> None:
            kill9(victim)
            killed.append(time.monotonic())

        passes = [await replay_pass(live, healthy, RATE)]
        bound_s = _dead_leases_bound_s(run)
        leases = asyncio.create_task(
            asyncio.to_thread(dead_leases_gone_s, live, victim, killed, bound_s)
        )
        passes.append(await replay_pass(live, at_requests(faulted, {0: kill}), RATE))
        passes.append(await replay_pass(live, after, RATE))
        answers = await prober.stop()
        full = await until_workers(live, run.settings.workers, RESPAWN_BOUND_S)
        restarts = list(pool.restarts)
        replacement = restarts[0].new_pid if restarts else None
        answered = await answered_by(live.target, replacement) if replacement else 0
        audit = await audit_money(live, run.scenario, run.checks)
        gone_s = await leases
    killed_at = killed[0] if killed else None
    run.scenario.recovery_s = None if killed_at is None else first_bid_after(answers, killed_at)
    _check(run, passes, full, restarts, killed_at, answered, gone_s)
    check_budgets(run.scenario, run.checks, audit)


async def until_workers(live: Live, workers: int, bound_s: float) -> int:
    """Wait (bounded) until the pool serves with ``workers`` workers; how many it has."""
    for _ in range(round(bound_s / 0.1)):
        if live.bidder.pool.alive() >= workers:
            break
        await asyncio.sleep(0.1)
    return live.bidder.pool.alive()


def _worker_samples(pid: int) -> list[Sample]:
    """Worker ``pid``'s own Prometheus samples (multi-process mode: its histogram file and
    its publication stamp's gauge file in the supervisor's directory)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return []
    files = [Path(directory) / f"{kind}_{pid}.db" for kind in ("histogram", "gauge_livemin")]
    merged = MultiProcessCollector.merge([str(path) for path in files if path.exists()])
    return [sample for family in merged for sample in family.samples]


def _answered(samples: list[Sample]) -> int:
    return int(next((s.value for s in samples if s.name == ANSWERED), 0))


def answered_requests(pid: int) -> int:
    """Bid requests the worker ``pid`` answered, from its own Prometheus file."""
    return _answered(_worker_samples(pid))


async def answered_by(url: str, pid: int, tries: int = PROBES_FOR_REPLACEMENT) -> int:
    """Requests worker ``pid`` has answered, probing on fresh connections (which the
    kernel spreads over the workers) until it has answered one, at most ``tries``."""
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=1.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(tries):
            if answered_requests(pid) > 0:
                break
            await probe(session, url)

    async def own_samples() -> list[Sample]:
        return _worker_samples(pid)

    # The last probes' counts: once the worker has published after them.
    return _answered(await published(own_samples, WATCHED_FLUSH_S, f"worker {pid}"))


def dead_leases_gone_s(live: Live, pid: int, killed: list[float], bound_s: float) -> float | None:
    """Seconds from the kill (once ``killed`` holds its time) until the dead worker's
    lease hash is gone; None if not within ``bound_s`` of it. Polls Valkey (blocking)."""
    client = connect_sync(
        live.settings.valkey_url or "", cluster=live.settings.valkey_cluster, timeout_s=2.0
    )
    key = leases_key(pacing_node_id(pid))
    try:
        waited = time.monotonic()
        while not killed and time.monotonic() - waited < bound_s:  # the kill is imminent
            time.sleep(0.05)
        while killed and time.monotonic() - killed[0] < bound_s:
            if not client.exists(key):
                return round(time.monotonic() - killed[0], 2)
            time.sleep(0.1)
    finally:
        client.close()
    return None


def _dead_leases_bound_s(run: Run) -> float:
    # The reconciler leases to a node until its heartbeat (last refreshed at most
    # lease_refresh_s before the kill) lapses, and notices that at its next tick; the
    # last leases written expire two ticks later. Plus slack for late ticks on a
    # loaded machine.
    tick, refresh = run.settings.pacing_tick_s, run.settings.lease_refresh_s
    return HEARTBEAT_S + 3 * tick + refresh + LEASES_SLACK_S


def _check(
    run: Run,
    passes: list[ReplayResult],
    alive: int,
    restarts: list[Restart],
    killed_at: float | None,
    answered: int,
    leases_gone_s: float | None,
) -> None:
    checks, workers = run.checks, run.settings.workers
    first = restarts[0] if restarts else None
    respawn_s = seen_s = None
    if first is not None and killed_at is not None:
        seen_s = round(first.died_at - killed_at, 3)
        if first.ready_at is not None:
            respawn_s = round(first.ready_at - killed_at, 3)
    run.scenario.figures.update(
        passes=dict(zip(("healthy", "killed", "after"), map(pass_summary, passes), strict=True)),
        workers_alive_after=alive, restarted_by_pool=alive == workers, respawn_s=respawn_s,
        death_seen_s=seen_s,
        restarts=[(r.reason, r.failed_starts, r.last_failure) for r in restarts],
        replacement_answered=answered, dead_node_leases_gone_s=leases_gone_s,
    )  # fmt: skip
    record_answers(checks, run.scenario, passes, None, run.settings.max_in_flight)
    check_ratio_drop(checks, run.scenario, passes[:1], passes[1:], run.options.drop_margin())
    checks.expect("deaths_seen_by_the_pool", len(restarts), "==", 1)
    checks.expect("workers_alive_after_the_respawn", alive, "==", workers)
    checks.expect("respawn_s", respawn_s, "<=", RESPAWN_BOUND_S)
    checks.expect("replacement_answered", answered, ">", 0)
    checks.expect("dead_node_leases_gone_s", leases_gone_s, "<=", _dead_leases_bound_s(run))
    checks.expect("bids_after_the_kill", passes[2].status[200], ">", 0)
    checks.expect("recovery_s", run.scenario.recovery_s, "<=", RECOVERY_BOUND_S)
