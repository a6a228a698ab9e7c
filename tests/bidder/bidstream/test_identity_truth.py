"""The generator's ground truth as a graph: every id the bidder forms maps to its person."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from bidder.bidstream.generator import generate
from bidder.bidstream.identity_truth import truth_graph
from bidder.bidstream.population import population
from bidder.cli import main
from bidder.decide.identity import identify
from bidder.decide.identity_graph import load_graph
from bidder.openrtb.request import InvalidRequest, parse_bid_request

HEAVY = 20


def test_every_key_the_bidder_forms_for_a_person_maps_to_that_person(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.gz"
    generate(path, 3_000, seed=11, heavy_users=HEAVY, heavy_share=0.6, multi_id=True)
    pop = population()
    person_of = {pop.user(i, f).id: i for i in range(HEAVY) for f in range(pop.faces(i))}
    graph = truth_graph(HEAVY)
    clusters: dict[int, set[str]] = {}
    with gzip.open(path) as lines:
        for line in lines:
            record = orjson.loads(line)
            person = person_of.get(record.get("request", {}).get("user", {}).get("id"))
            if person is None:
                continue
            try:
                request = parse_bid_request(orjson.dumps(record["request"]))
            except InvalidRequest:
                continue
            key = identify(request, record["ssp"]).user_key
            clusters.setdefault(person, set()).add(graph.cap_key(key))
    assert len(clusters) == HEAVY
    assert all(
        len(keys) == 1 and next(iter(keys), "").startswith("g:") for keys in clusters.values()
    )  # type: ignore[union-attr]
    assert len({next(iter(keys)) for keys in clusters.values()}) == HEAVY


def test_bidsim_identity_build_writes_the_truth_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "graph.json"
    assert main(["identity", "build", "--people", "50", "--version", "4", "--out", str(out)]) == 0
    graph = load_graph(out)
    assert graph.version == 4 and graph.ids == truth_graph(50, 4).ids
    assert capsys.readouterr().out.startswith(f"wrote graph version 4 to {out}: ")


def test_bidsim_identity_build_reads_people_from_a_file(tmp_path: Path) -> None:
    people, out = tmp_path / "people.jsonl", tmp_path / "graph.json"
    people.write_text('["b:a", "i:x"]\n\n["e:s:1"]\n["i:x", "b:z"]\n')
    assert main(["identity", "build", "--from", str(people), "--out", str(out)]) == 0
    graph = load_graph(out)
    assert graph.cap_key("b:z") == graph.cap_key("b:a") == "g:b:a"


def test_a_bad_people_file_is_one_message_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text('["b:a"]\n{"b": 1}\n')
    assert main(["identity", "build", "--from", str(people), "--out", str(tmp_path / "g")]) != 0
    assert capsys.readouterr().err.strip() == (
        f"bidsim: error: {people}: line 2: must be a non-empty array of user keys"
    )
