"""Anonymous faces: requests without any id, sharing their household's IP."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from bidder.bidstream.generator import generate
from bidder.cli import main
from bidder.decide.identity import identify
from bidder.openrtb.request import parse_bid_request

pytestmark = pytest.mark.pure

SHARE = 0.3


def _requests(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as src:
        return [r["request"] for line in src if "request" in (r := orjson.loads(line))]


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any]]:
    out = tmp_path_factory.mktemp("anonymous")
    kwargs: dict[str, Any] = {"heavy_users": 10, "heavy_share": 0.5, "multi_id": True}
    generate(out / "plain.jsonl.gz", 3_000, seed=11, **kwargs)
    generate(out / "anon.jsonl.gz", 3_000, seed=11, anonymous_share=SHARE, **kwargs)
    return _requests(out / "plain.jsonl.gz"), _requests(out / "anon.jsonl.gz")


def _keys(doc: dict[str, Any]) -> tuple[str | None, str | None]:
    return tuple(identify(parse_bid_request(orjson.dumps(doc)), "ssp-a"))  # type: ignore[return-value]


def test_about_the_share_of_requests_carries_no_user_key(streams: Any) -> None:
    plain, anon = streams
    assert all(_keys(doc)[0] is not None for doc in plain)
    without = sum(_keys(doc)[0] is None for doc in anon) / len(anon)
    assert 0.15 < without < 0.45, without


def test_an_anonymous_request_differs_only_by_its_ids(streams: Any) -> None:
    plain, anon = streams
    assert len(plain) == len(anon)
    for a, b in zip(plain, anon, strict=True):
        if _keys(b)[0] is None:
            for doc in (a, b):
                doc["user"] = {k: v for k, v in doc["user"].items() if k in ("consent", "ext")}
                doc["user"].get("ext", {}).pop("eids", None)
                doc["device"].pop("ifa", None), doc["device"].pop("lmt", None)
        assert a == b


def test_anonymous_requests_share_households_with_identified_ones(streams: Any) -> None:
    _, anon = streams
    households = Counter(_keys(doc)[1] for doc in anon if _keys(doc)[0] is None)
    identified = {_keys(doc)[1] for doc in anon if _keys(doc)[0] is not None}
    repeat = [h for h, n in households.items() if n > 1]
    assert repeat, "no household sends several anonymous requests"
    shared = sum(n for h, n in households.items() if h in identified)
    assert shared > households.total() / 2, (shared, households.total())


def test_a_bad_anonymous_share_is_one_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = str(tmp_path / "x.jsonl.gz")
    args = ["gen", "--out", out, "--requests", "10", "--anonymous-share", "2"]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "anonymous_share must be 0-1 (got 2.0)" in err and "Traceback" not in err
