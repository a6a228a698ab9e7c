"""The identity graph in DynamoDB (moto server) behind the in-process fill cache."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.adapters.aws import aws_client
from bidder.cli import main
from bidder.core.clock import ManualClock
from bidder.decide.identity_graph import IdentityGraph, build_graph
from bidder.decide.identity_table import (
    IDENTITY_METRICS,
    MAX_USER_KEYS,
    CachedGraph,
    Entry,
    IdentityTable,
    entry_of,
    item_of,
)
from bidder.decide.profile_cache import CacheConfig, FillCache
from bidder.serve.server import PrepareError, prepare_resources
from bidder.serve.settings import Settings, SettingsError

TTL_S = 60.0


@pytest.fixture
def table(aws_endpoint: str) -> IdentityTable:
    # A table per test: the moto server is shared by the whole session.
    name = f"identity-{uuid.uuid4().hex[:12]}"
    table = IdentityTable(aws_client("dynamodb", aws_endpoint), name)
    table.ensure_table()
    return table


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def placer(table: IdentityTable, clock: ManualClock) -> Iterator[CachedGraph]:
    config = CacheConfig(ttl_s=TTL_S, absent_ttl_s=TTL_S, max_batch=MAX_USER_KEYS)
    cache = FillCache[Entry](table.get_many, clock, config, IDENTITY_METRICS)
    yield CachedGraph(cache)
    cache.close()


# ------------------------------------------------------------------------------ items

clusters = st.text(min_size=1, max_size=20)
confidences = st.floats(min_value=0, max_value=1)
versions = st.integers(min_value=1, max_value=2**40)


@given(clusters, confidences, versions, versions)
def test_an_item_reads_back_as_its_entry_unless_an_older_version(
    cluster: str, confidence: float, version: int, current: int
) -> None:
    item = item_of("b:u", (cluster, confidence), version)
    expected = (cluster, confidence) if version >= current else None
    assert entry_of(item, current) == expected


@pytest.mark.parametrize(
    "item",
    [
        {"k": {"S": "b:u"}, "v": {"N": "1"}},
        {"k": {"S": "b:u"}, "c": {"S": ""}, "s": {"N": "1"}, "v": {"N": "1"}},
        {"k": {"S": "b:u"}, "c": {"S": "c"}, "s": {"N": "1.5"}, "v": {"N": "1"}},
        {"k": {"S": "b:u"}, "c": {"S": "c"}, "s": {"N": "x"}, "v": {"N": "1"}},
    ],
)
def test_a_malformed_item_is_refused(item: dict[str, dict[str, str]]) -> None:
    with pytest.raises(ValueError):
        entry_of(item, 1)


# ------------------------------------------------------------------------------ the table


def test_a_loaded_version_answers_its_keys_and_none_for_others(table: IdentityTable) -> None:
    assert table.current_version() is None
    assert table.load(build_graph(1, [["b:a", "i:a"]])) == 2
    assert table.current_version() == 1
    assert table.get_many(["b:a", "i:a", "b:nobody"]) == {
        "b:a": ("b:a", 1.0),
        "i:a": ("b:a", 1.0),
        "b:nobody": None,
    }


def test_a_table_without_a_graph_knows_no_key(table: IdentityTable) -> None:
    assert table.get_many(["b:a"]) == {"b:a": None}


def test_a_version_not_above_the_current_one_is_refused(table: IdentityTable) -> None:
    table.load(build_graph(2, [["b:a", "b:b"]]))
    with pytest.raises(ValueError, match="holds version 2: a new version must be above it"):
        table.load(build_graph(2, [["b:a"]]))
    assert table.current_version() == 2


def test_a_key_the_new_version_drops_reads_as_not_in_the_graph(table: IdentityTable) -> None:
    table.load(build_graph(1, [["b:a", "b:b"]]))
    table.load(build_graph(2, [["b:a", "i:a"]]))
    assert table.get_many(["b:b", "i:a"]) == {"b:b": None, "i:a": ("b:a", 1.0)}


# ------------------------------------------------------------------------------ the cache


@pytest.mark.asyncio
async def test_a_miss_caps_under_its_own_key_and_the_next_request_finds_the_cluster(
    table: IdentityTable, placer: CachedGraph
) -> None:
    table.load(build_graph(1, [["b:a", "i:a"]]))
    assert placer.place("i:a") == ("i:a", False)  # not cached yet: its own key, this time
    await placer.cache.drain()
    assert placer.place("i:a") == ("g:b:a", False)
    assert placer.cache.stats.calls == 1


@pytest.mark.asyncio
async def test_a_key_known_with_little_confidence_keeps_its_own_key(
    table: IdentityTable, placer: CachedGraph
) -> None:
    table.load(IdentityGraph(1, {"b:a": ("p1", 0.2)}))
    placer.place("b:a")
    await placer.cache.drain()
    assert placer.place("b:a") == ("b:a", True)


@pytest.mark.asyncio
async def test_a_merge_replaces_the_old_clusters_once_the_entries_expire(
    table: IdentityTable, placer: CachedGraph, clock: ManualClock
) -> None:
    table.load(build_graph(1, [["b:a"], ["b:b"]]))
    for key in ("b:a", "b:b", "i:new"):
        placer.place(key)
    await placer.cache.drain()
    assert placer.place("b:b") == ("g:b:b", False)
    table.load(build_graph(2, [["b:a", "b:b", "i:new"]]))  # one person now
    clock.advance(TTL_S - 1)
    assert placer.place("b:b") == ("g:b:b", False)  # cached: the old version, until expiry
    assert placer.place("i:new") == ("i:new", False)  # cached as not in the graph
    clock.advance(1)
    assert placer.place("b:b") == ("b:b", False)  # expired: a miss, its own key
    placer.place("b:a")
    placer.place("i:new")
    await placer.cache.drain()
    assert [placer.place(k)[0] for k in ("b:a", "b:b", "i:new")] == ["g:b:a"] * 3


# ------------------------------------------------------------------------------ bad input


def _graph_file(tmp_path: Path, version: int, people: list[list[str]]) -> Path:
    path = tmp_path / f"graph-{version}.json"
    path.write_bytes(orjson.dumps(build_graph(version, people).to_doc()))
    return path


def test_identity_load_writes_a_version_and_says_what_it_replaced(
    table: IdentityTable, aws_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["identity", "load", "--table", table.table_name, "--aws-endpoint", aws_endpoint]
    assert main([*argv, "--graph", str(_graph_file(tmp_path, 1, [["b:a"], ["b:b"]]))]) == 0
    assert main([*argv, "--graph", str(_graph_file(tmp_path, 2, [["b:a", "b:b"]]))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        f"loaded graph version 2 into table {table.table_name} at {aws_endpoint}"
        " (was version 1): 2 ids in 1 people"
    )
    assert table.get_many(["b:b"]) == {"b:b": ("b:a", 1.0)}


def test_identity_load_of_an_old_version_is_one_message(
    table: IdentityTable, aws_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table.load(build_graph(3, [["b:a"]]))
    argv = ["identity", "load", "--table", table.table_name, "--aws-endpoint", aws_endpoint]
    assert main([*argv, "--graph", str(_graph_file(tmp_path, 3, [["b:b"]]))]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"bidsim: error: table {table.table_name!r} holds version 3: "
        "a new version must be above it, got 3\n"
    )


def test_identity_load_of_a_bad_file_names_it(
    aws_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "graph.json"
    bad.write_text('{"version": 1,\n "ids": [}')
    argv = ["identity", "load", "--table", "t", "--aws-endpoint", aws_endpoint]
    assert main([*argv, "--graph", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bidsim: error: {bad}: line 2 column") and err.count("\n") == 1


def test_a_graph_file_and_a_graph_table_together_are_one_settings_problem(
    tmp_path: Path,
) -> None:
    graph = _graph_file(tmp_path, 1, [["b:a"]])
    with pytest.raises(SettingsError, match="--identity-graph and --identity-table: give one"):
        Settings(identity_graph=graph, identity_table="ids").validate()


def test_serving_from_a_table_without_a_graph_is_refused_at_start(
    table: IdentityTable, aws_endpoint: str
) -> None:
    settings = Settings(aws_endpoint=aws_endpoint, identity_table=table.table_name).validate()
    with pytest.raises(PrepareError, match="has no graph: load one with `bidsim identity load`"):
        prepare_resources(settings)


def test_serving_from_a_missing_table_is_refused_at_start(aws_endpoint: str) -> None:
    name = f"missing-{uuid.uuid4().hex[:12]}"
    settings = Settings(aws_endpoint=aws_endpoint, identity_table=name).validate()
    with pytest.raises(PrepareError, match=f"--identity-table '{name}' at .* has no graph"):
        prepare_resources(settings)
