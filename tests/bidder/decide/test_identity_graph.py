"""The identity graph: cap keys per person, merges and splits across versions, the file."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.decide.identity_graph import (
    GraphFormatError,
    IdentityGraph,
    build_graph,
    graph_from_doc,
    load_graph,
)

_KEYS = st.sampled_from([f"b:{n}" for n in range(12)])
_PEOPLE = st.lists(st.lists(_KEYS, min_size=1, max_size=4), max_size=8)


def test_a_known_id_caps_under_its_cluster() -> None:
    graph = build_graph(1, [["b:cookie", "i:phone", "e:uidapi.com:login"]])
    assert {graph.cap_key(k) for k in ("b:cookie", "i:phone", "e:uidapi.com:login")} == {
        "g:b:cookie"
    }


def test_an_unknown_id_keeps_its_own_key_and_no_id_stays_none() -> None:
    graph = build_graph(1, [["b:cookie", "i:phone"]])
    assert (graph.cap_key("b:other"), graph.cap_key(None)) == ("b:other", None)


def test_an_id_below_the_confidence_threshold_keeps_its_own_key() -> None:
    graph = IdentityGraph(1, {"b:a": ("p1", 0.4), "b:b": ("p1", 0.9)}, min_confidence=0.5)
    assert (graph.cap_key("b:a"), graph.cap_key("b:b")) == ("b:a", "g:p1")


def test_only_an_id_known_below_the_threshold_is_placed_with_low_confidence() -> None:
    graph = IdentityGraph(1, {"b:a": ("p1", 0.4), "b:b": ("p1", 0.5)}, min_confidence=0.5)
    placed = [graph.place(key) for key in ("b:a", "b:b", "b:unknown")]
    assert placed == [("b:a", True), ("g:p1", False), ("b:unknown", False)]


@given(_PEOPLE)
def test_ids_of_one_person_share_a_cluster_named_after_its_smallest_id(
    people: list[list[str]],
) -> None:
    graph = build_graph(1, people)
    for keys in people:
        clusters = {graph.ids[k][0] for k in keys}
        assert len(clusters) == 1
        members = [k for k, (c, _) in graph.ids.items() if c in clusters]
        assert clusters == {min(members)}


@given(_PEOPLE, st.randoms())
def test_the_order_of_people_does_not_change_the_graph(
    people: list[list[str]], rng: random.Random
) -> None:
    shuffled = [list(p) for p in people]
    rng.shuffle(shuffled)
    assert build_graph(1, people).ids == build_graph(1, shuffled).ids


def test_a_merge_keeps_the_smaller_clusters_id_so_its_counts_go_on() -> None:
    before = build_graph(1, [["b:a", "i:x"], ["b:c", "i:y"]])
    after = build_graph(2, [["b:a", "i:x", "b:c", "i:y"]])
    assert (before.cap_key("i:y"), after.cap_key("i:y")) == ("g:b:c", "g:b:a")
    assert before.cap_key("i:x") == after.cap_key("i:x")


def test_a_split_keeps_the_id_for_the_part_holding_it_and_starts_the_other_afresh() -> None:
    before = build_graph(1, [["b:a", "i:x", "b:c", "i:y"]])
    after = build_graph(2, [["b:a", "i:x"], ["b:c", "i:y"]])
    assert before.cap_key("i:x") == after.cap_key("i:x") == "g:b:a"
    assert after.cap_key("i:y") == "g:b:c"


def test_a_graph_round_trips_through_its_file(tmp_path: Path) -> None:
    graph = build_graph(3, [["b:a", "i:x"], ["e:s:1"]])
    path = tmp_path / "graph.json"
    path.write_bytes(orjson.dumps(graph.to_doc()))
    assert load_graph(path) == graph


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([], "must be an object with exactly 'version' and 'ids'"),
        ({"version": 0, "ids": {}}, "'version' must be a positive integer"),
        ({"version": 1, "ids": {"b:a": ["p", 2]}}, "ids['b:a'] must be [cluster id, confidence"),
        ({"version": 1, "ids": {"b:a": ["", 1]}}, "ids['b:a'] must be [cluster id, confidence"),
    ],
)
def test_a_bad_graph_document_is_named(doc: object, problem: str) -> None:
    with pytest.raises(GraphFormatError) as err:
        graph_from_doc(doc, "g.json", 0.5)
    assert str(err.value).startswith("g.json: ") and problem in str(err.value)


def test_a_graph_file_that_is_not_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text('{"version": 1,\n  "ids": {,}}')
    with pytest.raises(GraphFormatError, match=r"graph.json: line 2 column \d+: not valid JSON"):
        load_graph(path)
