"""`bidsim train` and `bidsim profiles load` through their handlers."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from bidder.adapters.aws import aws_client
from bidder.bidstream.generator import generate
from bidder.decide.profiles import MAX_BATCH_KEYS, Profile, ProfileTable
from models.cli import add_commands, stream_user_keys
from models.scorer import Scorer
from models.synth import synth_profile
from tests.cli import run_commands


def _run(argv: list[str]) -> int:
    return run_commands(add_commands, argv)


def test_train_writes_metrics_json_and_a_loadable_artifact(tmp_path: Path) -> None:
    out, report = tmp_path / "artifact", tmp_path / "train.json"
    argv = ["train", "--impressions", "2500", "--trees", "30", "--win-samples", "5000"]
    assert _run([*argv, "--out", str(out), "--json", str(report)]) == 0
    metrics = orjson.loads(report.read_bytes())
    assert metrics["auc"] > metrics["baseline_auc"] == 0.5
    assert metrics["logloss"] < metrics["baseline_logloss"]
    assert Scorer.load(out).meta.training_data_sha256 == metrics["training_data_sha256"]


def test_train_names_a_bad_option_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["train", "--impressions", "10", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "bidsim: error: --impressions must be at least 1000, got 10"
    )


def test_train_reports_an_unreadable_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["train", "--logs", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)]) == 2
    assert "cannot read the log" in capsys.readouterr().err


def test_profiles_load_writes_the_profiles_of_the_streams_users(
    tmp_path: Path, aws_endpoint: str
) -> None:
    stream = tmp_path / "s.jsonl.gz"
    generate(stream, requests=200, seed=5)
    table = f"profiles-{uuid.uuid4().hex[:8]}"
    argv = ["profiles", "load", "--aws-endpoint", aws_endpoint, "--table", table]
    assert _run([*argv, "--stream", str(stream)]) == 0
    store = ProfileTable(aws_client("dynamodb", aws_endpoint), table)
    keys = sorted(set(stream_user_keys(stream)))
    stored: dict[str, Profile | None] = {}
    for start in range(0, len(keys), MAX_BATCH_KEYS):
        stored.update(store.get_many(keys[start : start + MAX_BATCH_KEYS]))
    known = {k for k in keys if synth_profile(k, 0) is not None}
    # About 80% of users have a profile: the stream has both kinds, so an empty read (or
    # a load that wrote nothing, or everything) cannot match.
    assert len(keys) >= 50 and 0 < len(known) < len(keys)
    assert {k for k, p in stored.items() if p is not None} == known


def test_profiles_load_reports_an_unreachable_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stream = tmp_path / "s.jsonl"
    generate(stream, requests=5, seed=5)
    argv = ["profiles", "load", "--aws-endpoint", "http://127.0.0.1:9", "--stream", str(stream)]
    assert _run(argv) == 2
    assert "ensure_table" in capsys.readouterr().err
