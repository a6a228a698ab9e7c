"""The pacing settings file: written by tune, read by serve, replay and the reconciler."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bidder.cli import main
from bidder.pipeline.stages import PacingStage
from bidder.serve.settings import Settings, SettingsError
from bidder.stack.local import LocalStack
from pacing.cli import add_commands
from pacing.config_file import (
    PacingFileError,
    load_pacing_file,
    settings_in_force,
    settings_line,
)
from pacing.curves import STANDARD
from pacing.lease import chunk_micros
from tests.bidder.live import LiveBidder, own_aws_resources, stack_settings
from tests.cli import run_commands

pytestmark = pytest.mark.long(20)

BIDSIM = Path(sys.executable).parent / "bidsim"
CAMPAIGN = "brightleaf-remnant-mrec"
"""In the bundled campaign file: $1,500 a day on the ``default`` curve."""
BUDGET = 1_500_000_000
PERIODS = 1000
"""Neither the default 288 nor a divisor of it, so the chunk shows which one ran."""


def _run(argv: list[str]) -> int:
    return run_commands(add_commands, argv)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tuned") / "pacing.json"
    setting = f"0.05,0.002,0,{PERIODS}"
    argv = ["pacing", "tune", "--setting", setting, "--scenario", "light-day", "--out", str(out)]
    assert _run(argv) == 0
    return out


def _write(tmp_path: Path, tuned: Path, **changes: object) -> Path:
    doc = {**orjson.loads(tuned.read_bytes()), **changes}
    path = tmp_path / "edited.json"
    path.write_bytes(orjson.dumps(doc))
    return path


def test_the_file_tune_writes_holds_the_chosen_setting_and_curve(tuned: Path) -> None:
    settings = load_pacing_file(tuned)
    assert (settings.gains.kp, settings.gains.ki, settings.gains.kd) == (0.05, 0.002, 0.0)
    assert settings.chunk_periods_per_day == PERIODS
    assert settings.curve.weights == STANDARD.weights
    assert orjson.loads(tuned.read_bytes())["tuned"]["scenarios"]["light-day"]["meets"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kp": "hot"}, "field kp: expected a number"),
        ({"ki": -0.1}, "field ki: must be a finite number >= 0"),
        ({"chunk_periods_per_day": 0}, "field chunk_periods_per_day"),
        ({"curve": {"weights": [1, 2]}}, "a curve needs 24 hourly weights, got 2"),
        ({"format": "other"}, "field format"),
    ],
)
def test_a_bad_field_is_named_with_the_file(
    tmp_path: Path, tuned: Path, changes: dict[str, object], field: str
) -> None:
    path = _write(tmp_path, tuned, **changes)
    with pytest.raises(PacingFileError, match=str(path)) as caught:
        load_pacing_file(path)
    assert field in str(caught.value)


def test_serve_and_replay_refuse_a_bad_file_in_one_message(tmp_path: Path, tuned: Path) -> None:
    path = _write(tmp_path, tuned, kd=None)
    with pytest.raises(SettingsError) as caught:
        Settings(pacing_config=path).validate()
    assert f"--pacing-config: {path}: field kd: expected a number" in str(caught.value)


def test_the_reconciler_refuses_a_bad_file_in_one_message(
    tmp_path: Path, tuned: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, tuned, chunk_periods_per_day="many")
    argv = ["reconciler", "--valkey", "redis://127.0.0.1:1", "--aws-endpoint"]
    assert _run([*argv, "http://127.0.0.1:1", "--pacing-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bidsim: error: {path}: field chunk_periods_per_day")
    assert "Traceback" not in err


def test_a_report_shows_the_settings_a_run_used(tuned: Path) -> None:
    line = settings_line(settings_in_force(tuned, 1.0))
    assert line == (
        "pacing: kp 0.05, ki 0.002/s, kd 0 s, chunk budget/nodes/1000, default curve standard,"
        f" tick 1 s ({tuned})"
    )
    assert settings_in_force(None, 5.0)["source"] == "built-in defaults"


@pytest.fixture(scope="module")
def stack(aws_endpoint: str) -> Iterator[LocalStack]:
    """A private Valkey: this test's bidder is the only live node its reconciler sees."""
    with LocalStack(aws_endpoint=aws_endpoint) as private:
        yield private


def test_a_live_bidder_runs_with_the_file_tune_wrote(
    stack: LocalStack, tmp_path: Path, tuned: Path
) -> None:
    settings = stack_settings(stack, tmp_path, pacing_config=tuned, **own_aws_resources())
    with LiveBidder(settings) as bidder:
        assert bidder.state is not None and bidder.reconciler is not None
        pacer = next(s.pacer for s in bidder.state.stages if isinstance(s, PacingStage))
        chunk = pacer.remaining(CAMPAIGN)
        log = bidder.reconciler.log_tail()
    assert chunk == chunk_micros(BUDGET, 1, PERIODS)
    assert chunk != chunk_micros(BUDGET, 1)
    assert f"pacing settings from {tuned}" in log and "'kp': 0.05" in log


def test_a_replay_reports_the_settings_its_bidder_ran_with(tmp_path: Path, tuned: Path) -> None:
    stream, report = tmp_path / "s.jsonl.gz", tmp_path / "report.json"
    assert main(["gen", "--out", str(stream), "--requests", "200", "--seed", "5"]) == 0
    replay = [str(BIDSIM), "replay", str(stream), "--rate", "200", "--no-progress"]
    done = subprocess.run(
        [*replay, "--pacing-config", str(tuned), "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    pacing = orjson.loads(report.read_bytes())["pacing"]
    assert pacing == {**load_pacing_file(tuned).summary(), "tick_s": 5.0}
    assert settings_line(pacing) in done.stdout


def test_replay_refuses_a_bad_file_before_it_starts(
    tmp_path: Path, tuned: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, tuned, curve={"name": "x", "weights": [0] * 24})
    stream = tmp_path / "s.jsonl"
    stream.write_text("")
    assert main(["replay", str(stream), "--pacing-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--pacing-config: {path}: field curve.weights" in err and "Traceback" not in err
