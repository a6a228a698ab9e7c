"""The whole stack on a local 3-master Valkey Cluster: a short replay, end to end.

``LocalStack(cluster=3)`` starts moto and the cluster; the bidder (one worker, the
reconciler process with ``--valkey-cluster``) runs with ``valkey_cluster=True``. One
replay serves every test here; what was in Valkey is read while the bidder still runs
(worker ids and leases are given back at shutdown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from bidder.adapters.valkey import connect_sync
from bidder.bidstream.generator import generate
from bidder.bidstream.stream import read_stream
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, status_classes
from bidder.serve.assemble import pacing_node_id
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.child import StackError
from bidder.stack.local import LocalStack
from ids.worker_lease import lease_keys
from pacing.lease_store import leases_key
from tests.pacing.test_live_ledger import live_settings, notice_outcomes
from tests.processes import reaped

pytestmark = pytest.mark.long(13)

REQUESTS, RATE = 1000, 400.0
WARMUP_S = 0.5
"""Start-up answers (first lease reads, slot map loads) are counted, not measured."""


@dataclass(frozen=True)
class Outcome:
    result: ReplayResult
    notices: dict[str, int]
    nodes_with_leases: int
    nodes: int
    worker_ids: int
    masters_with_keys: int


def _in_valkey(settings: Settings, nodes: list[str], stack: LocalStack) -> tuple[int, int, int]:
    """(pacing nodes holding leases, worker ids leased, cluster masters holding keys)."""
    assert settings.valkey_url is not None
    client = connect_sync(settings.valkey_url, cluster=True, timeout_s=2.0)
    try:
        with_leases = sum(bool(client.exists(leases_key(node))) for node in nodes)
        worker_ids = int(client.hlen(lease_keys(settings.key_namespace)[0]))
    finally:
        client.close()
    masters = 0
    for pid_name in stack.pids:
        if pid_name.startswith("valkey-"):
            port = int(pid_name.removeprefix("valkey-"))
            with redis.Redis(port=port, socket_timeout=2.0) as node:
                masters += int(node.dbsize()) > 0
    return with_leases, worker_ids, masters


async def _replay_on_the_cluster(stack: LocalStack, tmp_path: Path) -> Outcome:
    stream_file = tmp_path / "stream.jsonl.gz"
    generate(stream_file, requests=REQUESTS, seed=11, mean_rate=RATE)
    settings = live_settings(stack, tmp_path, workers=1, valkey_cluster=True)
    options = ReplayOptions(
        rate=RATE, warmup_s=WARMUP_S, deadline_ms=settings.deadline_ms, timeout_ms=1000.0
    )
    async with running_bidder(settings) as bidder:
        result = await replay(read_stream(stream_file), f"{bidder.bid_url}/openrtb2/bid", options)
        notices = dict(await notice_outcomes(bidder.admin_url))
        nodes = [pacing_node_id(pid) for pid in bidder.pool.pids]
        in_valkey = await asyncio.to_thread(_in_valkey, settings, nodes, stack)
    return Outcome(result, notices, in_valkey[0], len(nodes), in_valkey[1], in_valkey[2])


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    with LocalStack(cluster=3) as stack:
        assert stack.valkey_cluster
        yield asyncio.run(_replay_on_the_cluster(stack, tmp_path_factory.mktemp("cluster")))


def test_the_bidder_bids_on_the_cluster(outcome: Outcome) -> None:
    assert outcome.result.status.get(200, 0) > 0


def test_won_impressions_are_billed(outcome: Outcome) -> None:
    assert outcome.notices.get("billed", 0) > 0


def test_no_request_gets_a_5xx(outcome: Outcome) -> None:
    assert status_classes(outcome.result.status)["5xx"] == 0


def test_no_answer_after_start_up_is_an_internal_error_or_a_missing_id_or_budget(
    outcome: Outcome,
) -> None:
    reasons = outcome.result.nbr_reasons
    assert [reasons[r] for r in ("internal_error", "ids_unavailable", "budget_unavailable")] == [
        0,
        0,
        0,
    ]


def test_every_worker_holds_pacing_leases_on_the_cluster(outcome: Outcome) -> None:
    assert outcome.nodes_with_leases == outcome.nodes == 1


def test_the_worker_leased_its_snowflake_worker_id_on_the_cluster(outcome: Outcome) -> None:
    assert outcome.worker_ids == 1


def test_the_keys_spread_over_more_than_one_master(outcome: Outcome) -> None:
    assert outcome.masters_with_keys >= 2


def test_a_local_cluster_of_fewer_than_three_masters_is_refused() -> None:
    with pytest.raises(StackError, match="at least 3 masters"):
        LocalStack(cluster=2)


def test_a_local_cluster_and_a_given_valkey_url_are_refused_together() -> None:
    with pytest.raises(StackError, match="can't be combined"):
        LocalStack(valkey_url="redis://127.0.0.1:6379", cluster=3)


def test_cluster_replicas_without_a_local_cluster_are_refused() -> None:
    with pytest.raises(StackError, match="replicas need a local cluster"):
        LocalStack(cluster_replicas=1)


def test_a_negative_number_of_cluster_replicas_is_refused() -> None:
    with pytest.raises(StackError, match="0 or more"):
        LocalStack(cluster=3, cluster_replicas=-1)


def test_stopping_a_cluster_stack_stops_every_node(aws_endpoint: str) -> None:
    with LocalStack(aws_endpoint=aws_endpoint, cluster=3) as stack:
        pids = [pid for name, pid in stack.pids.items() if name.startswith("valkey-")]
    assert len(pids) == 3 and all(reaped(pid) for pid in pids)
