"""People with several ids: faces of one person in the audience and in a multi-id stream."""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from bidder.bidstream.generator import generate
from bidder.bidstream.population import MAX_FACES, population

PEOPLE = 20_000
HEAVY = 10


def _user_ids() -> dict[str, int]:
    """Exchange user id -> person, for every face of the heavy users."""
    pop = population()
    return {pop.user(i, f).id: i for i in range(HEAVY) for f in range(pop.faces(i))}


@pytest.fixture(scope="module")
def heavy_requests(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("multi") / "stream.jsonl.gz"
    generate(path, 4_000, seed=7, heavy_users=HEAVY, heavy_share=0.5, multi_id=True)
    with gzip.open(path) as src:
        return [r["request"] for line in src if "request" in (r := orjson.loads(line))]


def test_face_counts_follow_their_shares() -> None:
    pop = population()
    counts = Counter(pop.faces(i) for i in range(PEOPLE))
    shares = [counts[n] / PEOPLE for n in range(1, MAX_FACES + 1)]
    assert shares == pytest.approx([0.45, 0.35, 0.20], abs=0.015)


def test_face_zero_is_the_single_id_user() -> None:
    pop = population()
    assert all(pop.user(i, 0) == pop.user(i) for i in range(200))


def test_faces_of_one_person_have_ids_of_their_own_and_share_home_and_login() -> None:
    pop = population()
    people = [i for i in range(500) if pop.faces(i) == MAX_FACES]
    for i in people:
        faces = [pop.user(i, f) for f in range(MAX_FACES)]
        assert len({u.id for u in faces}) == MAX_FACES
        assert len({u.ifa for u in faces if not u.lmt}) == sum(not u.lmt for u in faces)
        assert len({u.ip for u in faces}) == 1 and len({u.eid for u in faces}) == 1
    assert any(pop.user(i).eid for i in people) and any(not pop.user(i).eid for i in people)


def test_a_multi_id_stream_shows_heavy_people_under_several_ids(
    heavy_requests: list[dict[str, Any]],
) -> None:
    person_of = _user_ids()
    ids_seen: defaultdict[int, set[str]] = defaultdict(set)
    for request in heavy_requests:
        user_id = request.get("user", {}).get("id")
        if user_id in person_of:
            ids_seen[person_of[user_id]].add(user_id)
    pop = population()
    assert {i: len(ids) for i, ids in ids_seen.items()} == {i: pop.faces(i) for i in range(HEAVY)}


SINGLE_ID_SHA256 = "c6a74cfc38205ec33da47a98b44f2d7bfe969e7d9da8125069beeb8d5136914c"
"""The single-id stream below: streams made without ``multi_id`` keep their bytes."""


def test_without_multi_id_the_stream_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl.gz"
    generate(path, 500, seed=4, heavy_users=HEAVY, heavy_share=0.3)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SINGLE_ID_SHA256
