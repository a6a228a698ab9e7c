"""A Valkey Cluster master killed mid-replay: its replica takes over, the bidder goes on.

A private stack (moto, 3 masters with 1 replica each) and the full bidder
(``running_bidder``: 2 workers, the reconciler ticking every 2 s). A stream with
heavy users (10 users, 30% of the requests) is replayed open-loop at 300 req/s; at
40% of it the master holding the pacing live-nodes key (every worker's lease
refresh writes there) is killed with SIGKILL. The exchange's notices reach the bidder
through a recording proxy that keeps each signed token (who saw which campaign, and
when it was bid) and its answer. Beside the replay, probes go out every 20 ms from
new users whose counters live on the killed master's slots, for the fail-closed
campaign alone (a German app: only Alpenrail fits): its first bid after the kill is
the first cap check that read the promoted replica.

Asserted: no 5xx, every request answered; the replica is promoted and the same
worker processes bid again, bill, renew their Snowflake id leases and heartbeat with
their pacing leases after it, and no background job of theirs meets a failure it
does not handle; the fail-closed campaign bids again for users of the
killed shard; the cap over-delivery (``fcap.audit``) stays within its bound: every
impression above a cap is explained by bids in flight or by a failed check or count.
Timings (kill -> promotion, kill -> first fail-closed bid) are measured and printed
(``-s``), never asserted.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis
from redis.crc import key_slot

from bidder.adapters.aws import aws_client
from bidder.bidstream.generator import generate
from bidder.bidstream.stream import StreamRecord, read_stream
from bidder.chaos.cap_audit import (
    DeliveryAudit,
    StoreErrors,
    audit_delivered,
    with_recorded_notices,
)
from bidder.core.tokens import TokenSigner
from bidder.replay.admin_metrics import samples
from bidder.replay.ledger_audit import read_ledger
from bidder.replay.notice_recorder import NoticeRecorder
from bidder.replay.replayer import ReplayOptions, ReplayResult, replay
from bidder.replay.report import status_classes
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.cluster import LocalValkeyCluster, ValkeyNode
from bidder.stack.local import LocalStack
from fcap import keys
from ids.worker_lease import lease_keys
from pacing.lease_store import live_nodes_key
from tests.bidder.live import CAMPAIGNS, stack_settings

pytestmark = [pytest.mark.chaos, pytest.mark.long(20)]

REQUESTS, RATE = 2400, 300.0
KILL_AT = 960
"""The request index (40%) at which the master goes: 3.2 s in, 4.8 s before the end,
room for the failover (~2.5 s) and the pacing gap after it (up to ~1.5 s, below)."""
TICK_S = 2.0
"""Leases stay valid two ticks (4 s), longer than a failover (~2.5 s): the budget never
runs dry, so what the failover does to caps, ids and billing shows on its own."""
RESUME_ROOM_MS = 1000
"""Sends after the promotion, at least: room for bids to resume and be seen."""
PROBE_EVERY_S = 0.02
DEADLINE_MS = 50.0
"""Decisions, not latency, are under test: on the shared 2-core box a tight deadline
would hide the failover behind deadline no-bids."""
ID_TTL_MS = 10_000
"""Settings.id_lease_ttl_s: a renewal sent at t writes expiry t + ttl."""
HEARTBEAT_TTL_MS = 15_000
"""pacing.LeaseReader's default: a refresh at t heartbeats until t + ttl."""
CLOSED = "alpenrail-dach"
KEY = "cluster-failover-notice-key-" + "f" * 32
SIGNER = TokenSigner({"k1": KEY.encode()}, "k1")
APP_PROBE = {
    "id": "probe",
    "imp": [{"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 0.05}],
    "app": {"bundle": "de.example.reise", "name": "Reise"},
    "device": {"devicetype": 2, "geo": {"country": "DEU"}},
    "regs": {"gdpr": 0},
}


@dataclass
class Failover:
    """Kills the master of ``live_nodes_key()`` at request ``KILL_AT``; times the promotion."""

    cluster: LocalValkeyCluster
    victim: ValkeyNode
    slots: list[tuple[int, int]]
    killed_ms: int | None = None
    promoted_ms: int | None = None
    _watch: threading.Thread | None = None
    _closing: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def of(cls, cluster: LocalValkeyCluster) -> Failover:
        victim = cluster.master_of(live_nodes_key())
        return cls(cluster, victim, _own_slots(victim))

    def on_victim(self, user_key: str) -> bool:
        slot = key_slot(keys.counters(keys.USER, user_key).encode())
        return any(lo <= slot <= hi for lo, hi in self.slots)

    def at(self, records: Iterable[StreamRecord]) -> Iterator[StreamRecord]:
        for i, record in enumerate(records):
            if i == KILL_AT:
                self.victim.kill()
                self.killed_ms = _now_ms()
                self._watch = threading.Thread(target=self._wait_for_promotion, daemon=True)
                self._watch.start()
            yield record

    def _wait_for_promotion(self) -> None:
        while not self._closing.is_set():
            if len(self.cluster.masters_now()) == self.cluster.masters:
                self.promoted_ms = _now_ms()
                return
            time.sleep(0.02)

    def close(self) -> None:
        self._closing.set()
        if self._watch is not None:
            self._watch.join(10)


def _own_slots(node: ValkeyNode) -> list[tuple[int, int]]:
    with redis.Redis(port=node.port, decode_responses=True, socket_timeout=2.0) as client:
        me = client.execute_command("CLUSTER", "MYID")
        return [(int(e[0]), int(e[1])) for e in client.cluster("slots") if e[2][2] == me]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Probe:
    sent_ms: int
    status: int
    reason: str | None
    campaigns: tuple[str, ...]


async def _probes(url: str, failover: Failover, done: asyncio.Event) -> list[Probe]:
    """The fail-closed campaign alone, for new users on the victim's slots."""
    found: list[Probe] = []
    async with aiohttp.ClientSession() as session:
        while not done.is_set():
            uid = _user_on(failover)
            body = orjson.dumps({**APP_PROBE, "user": {"buyeruid": uid}})
            sent = _now_ms()
            async with session.post(url, data=body, headers={"X-Ssp": "ssp-alpha"}) as resp:
                raw = await resp.read()
            bids = orjson.loads(raw)["seatbid"] if resp.status == 200 else []
            cids = tuple(b["cid"] for s in bids for b in s["bid"])
            found.append(Probe(sent, resp.status, resp.headers.get("X-Nbr-Reason"), cids))
            await asyncio.sleep(PROBE_EVERY_S)
    return found


def _user_on(failover: Failover) -> str:
    while True:
        uid = uuid.uuid4().hex
        if failover.on_victim(f"b:{uid}"):
            return uid


@dataclass(frozen=True)
class Outcome:
    result: ReplayResult
    failover: Failover
    probes: list[Probe]
    recorder: NoticeRecorder
    ledger_ms: dict[int, int]
    """bid id -> when the ledger billed it."""
    metrics: Counter[str]
    same_workers: bool
    id_lease_expiry_ms: list[int]
    heartbeat_until_ms: list[int]
    replay_ms: tuple[int, int]


def _settings(stack: LocalStack, tmp_path: Path) -> Settings:
    return stack_settings(
        stack,
        tmp_path,
        workers=2,
        valkey_cluster=True,
        pacing_tick_s=TICK_S,
        deadline_ms=DEADLINE_MS,
        fcap_check_timeout_ms=25.0,
        notice_keys=(("k1", KEY),),
    )


async def _run(stack: LocalStack, tmp: Path) -> Outcome:
    stream = tmp / "stream.jsonl.gz"
    generate(stream, REQUESTS, seed=23, mean_rate=RATE, heavy_users=10, heavy_share=0.3)
    recorder = NoticeRecorder()
    settings = with_recorded_notices(_settings(stack, tmp), recorder)
    failover = await asyncio.to_thread(Failover.of, stack.cluster)
    try:
        async with recorder, running_bidder(settings) as bidder:
            pids = list(bidder.pool.pids)
            result, probes, replay_ms = await _replay(bidder.bid_url, stream, failover)
            metrics = await _settled(bidder.admin_url)
            in_valkey = await asyncio.to_thread(_renewed, settings, failover)
            same = bidder.pool.pids == pids and bidder.pool.alive() == len(pids)
    finally:
        await asyncio.to_thread(failover.close)
    kinesis = aws_client("kinesis", stack.aws_endpoint)
    ledger = await asyncio.to_thread(read_ledger, kinesis, settings.spend_stream)
    ledger_ms = {int(e.bid_id): e.ts_ms for e in ledger}
    return Outcome(
        result, failover, probes, recorder, ledger_ms, metrics, same, *in_valkey, replay_ms
    )


async def _replay(
    bid_url: str, stream: Path, failover: Failover
) -> tuple[ReplayResult, list[Probe], tuple[int, int]]:
    url = f"{bid_url}/openrtb2/bid"
    options = ReplayOptions(rate=RATE, deadline_ms=DEADLINE_MS, timeout_ms=2000.0)
    done = asyncio.Event()
    probing = asyncio.create_task(_probes(url, failover, done))
    began = _now_ms()
    try:
        result = await replay(failover.at(read_stream(stream)), url, options)
    finally:
        done.set()
        probes = await probing
    return result, probes, (began, _now_ms())


async def _settled(admin_url: str) -> Counter[str]:
    """The metrics once the journaled notices are settled (bounded: the journal
    retries every second)."""
    for _ in range(50):
        metrics = await _metrics(admin_url)
        if metrics["deferred_depth"] == 0:
            break
        await asyncio.sleep(0.2)
    return metrics


_SAMPLES = {
    "bidsim_notices_total": ("notice", "outcome"),
    "bidsim_deferred_replayed_total": ("replayed", "outcome"),
    "bidsim_fcap_store_errors_total": ("fcap_errors", "op"),
    "bidsim_deferred_depth": ("deferred_depth", None),
    "bidsim_background_restarts_total": ("restarts", "job"),
}


async def _metrics(admin_url: str) -> Counter[str]:
    """The samples of ``_SAMPLES``, summed over the workers, as ``<name>_<label>``."""
    found: Counter[str] = Counter()
    for sample in await samples(admin_url):
        if sample.name in _SAMPLES:
            name, label = _SAMPLES[sample.name]
            key = f"{name}_{sample.labels[label]}" if label else name
            found[key] += int(sample.value)
    return found


def _renewed(settings: Settings, failover: Failover) -> tuple[list[int], list[int]]:
    """``_in_valkey`` once every id lease and heartbeat was renewed after the promotion,
    or after a bound: an id lease renewal that failed in the failover is retried a
    renewal interval (2.7 s) later, possibly after the replay's end."""
    for _ in range(40):
        leases, beats = _in_valkey(settings)
        promoted = failover.promoted_ms or 0
        if (
            min(leases, default=0) > promoted + ID_TTL_MS
            and min(beats, default=0) > promoted + HEARTBEAT_TTL_MS
        ):
            break
        time.sleep(0.2)
    return leases, beats


def _in_valkey(settings: Settings) -> tuple[list[int], list[int]]:
    """(each worker's id lease expiry, each node's heartbeat-until), epoch ms."""
    assert settings.valkey_url is not None
    client = redis.RedisCluster.from_url(
        settings.valkey_url, socket_timeout=2.0, decode_responses=True
    )
    try:
        leases = client.hvals(lease_keys(settings.key_namespace)[0])
        beats = client.zrange(live_nodes_key(), 0, -1, withscores=True)
    finally:
        client.close()
    return [int(str(v).rsplit("|", 1)[1]) for v in leases], [int(beat[1]) for beat in beats]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    with LocalStack(cluster=3, cluster_replicas=1) as stack:
        found = asyncio.run(_run(stack, tmp_path_factory.mktemp("cluster-failover")))
    print(
        "cluster failover:", orjson.dumps(summary(found), option=orjson.OPT_NON_STR_KEYS).decode()
    )
    return found


def _promoted(outcome: Outcome) -> int:
    assert outcome.failover.promoted_ms is not None, "the replica was never promoted"
    return outcome.failover.promoted_ms


def _delivered(outcome: Outcome) -> DeliveryAudit:
    return audit_delivered(outcome.recorder.answers, SIGNER, DEADLINE_MS, CAMPAIGNS)


def test_no_request_gets_a_5xx(outcome: Outcome) -> None:
    assert status_classes(outcome.result.status)["5xx"] == 0, summary(outcome)


def test_every_request_is_answered(outcome: Outcome) -> None:
    result = outcome.result
    answered = sum(result.status.values())
    assert (answered, result.timeouts, result.transport_errors) == (result.requests, 0, 0)


def test_the_replica_of_the_killed_master_is_promoted(outcome: Outcome) -> None:
    _promoted(outcome)
    assert not outcome.failover.victim.running


def test_the_same_worker_processes_serve_throughout(outcome: Outcome) -> None:
    assert outcome.same_workers


def test_bidding_resumes_after_the_promotion(outcome: Outcome) -> None:
    """Bids made after the promotion are billed. The sends go on for a while after it
    (checked), so the replay leaves room to see them; the replay's own end is later
    still (view notices follow wins by their dwell), so it is no measure of the sends."""
    promoted = _promoted(outcome)
    last_send_ms = outcome.replay_ms[0] + outcome.result.duration_s * 1000
    assert last_send_ms - promoted >= RESUME_ROOM_MS, summary(outcome)
    won = _delivered(outcome).delivered
    assert [c for c in won if c.issued_ms > promoted], summary(outcome)


def test_the_fail_closed_campaign_bids_again_for_users_of_the_killed_shard(
    outcome: Outcome,
) -> None:
    after = [p for p in outcome.probes if p.sent_ms >= _promoted(outcome)]
    assert any(CLOSED in p.campaigns for p in after), summary(outcome)


def test_notices_are_billed_after_the_failover(outcome: Outcome) -> None:
    assert any(ms > _promoted(outcome) for ms in outcome.ledger_ms.values())


def test_every_deferred_notice_is_billed(outcome: Outcome) -> None:
    deferred = {SIGNER.verify(t).bid_id for t in outcome.recorder.tokens(202)}
    assert deferred <= outcome.ledger_ms.keys()


def test_worker_id_leases_are_renewed_after_the_failover(outcome: Outcome) -> None:
    expiries = outcome.id_lease_expiry_ms
    assert len(expiries) == 2 and min(expiries) > _promoted(outcome) + ID_TTL_MS


def test_every_worker_heartbeats_with_its_lease_refresh_after_the_failover(
    outcome: Outcome,
) -> None:
    beats = outcome.heartbeat_until_ms
    assert len(beats) == 2 and min(beats) > _promoted(outcome) + HEARTBEAT_TTL_MS, summary(outcome)


def test_every_failure_of_the_failover_is_one_its_job_handles(outcome: Outcome) -> None:
    """A background job that met an error it does not handle is started again
    (``bidder.serve.worker.keep_running``) and counted: the failover must cause none.
    The worker's log (captured stderr) holds the traceback."""
    restarts = {key: n for key, n in outcome.metrics.items() if key.startswith("restarts_")}
    assert restarts == {}, summary(outcome)


def test_cap_over_delivery_is_explained_by_bids_in_flight_or_failed_store_calls(
    outcome: Outcome,
) -> None:
    audit = _delivered(outcome).over_delivery
    assert audit.not_in_flight <= over_delivery_bound(outcome), summary(outcome)


def test_the_audit_sees_impressions_bring_counters_to_their_limits(outcome: Outcome) -> None:
    delivered = _delivered(outcome)
    assert delivered.capped_impressions > 0 and delivered.over_delivery.reached_limit > 0


def over_delivery_bound(outcome: Outcome) -> int:
    """``DeliveryAudit.bound`` (``bidder.chaos.cap_audit``) of the replayed requests'
    failed store calls: the probes' failed checks (fail-closed: answered
    ``fcap_unavailable``) bid nothing."""
    probes_failed = sum(p.reason == "fcap_unavailable" for p in outcome.probes)
    checks_failed = outcome.metrics["fcap_errors_check"] - probes_failed
    errors = StoreErrors(checks_failed, outcome.metrics["fcap_errors_count"])
    return _delivered(outcome).bound(errors)


def summary(outcome: Outcome) -> dict[str, Any]:
    """The figures docs/fcap.md and the report record (print with -s)."""
    f, r = outcome.failover, outcome.result
    killed = f.killed_ms or 0
    after = [p for p in outcome.probes if p.sent_ms > killed]
    closed_bids = [p.sent_ms for p in after if CLOSED in p.campaigns]
    return {
        "requests": r.requests,
        "status": dict(r.status),
        "timeouts": r.timeouts,
        "reasons": dict(r.nbr_reasons.most_common(8)),
        "within_deadline_share": round(r.within_deadline_share, 4),
        "kill_to_promotion_ms": (f.promoted_ms - killed) if f.promoted_ms else None,
        "kill_to_first_fail_closed_bid_ms": (closed_bids[0] - killed) if closed_bids else None,
        "probes_after_kill": dict(Counter(",".join(p.campaigns) or str(p.reason) for p in after)),
        "probes_by_500ms_after_kill": _timeline(after, killed),
        "notices": dict(outcome.metrics),
        "over_delivery": _delivered(outcome).over_delivery.summary(),
        "over_delivery_bound": over_delivery_bound(outcome),
    }


def _timeline(probes: list[Probe], killed_ms: int) -> dict[int, dict[str, int]]:
    """Probe outcomes per half second after the kill."""
    out: dict[int, Counter[str]] = {}
    for p in probes:
        slot = (p.sent_ms - killed_ms) // 500 * 500
        out.setdefault(slot, Counter())[",".join(p.campaigns) or str(p.reason)] += 1
    return {slot: dict(counts) for slot, counts in sorted(out.items())}
