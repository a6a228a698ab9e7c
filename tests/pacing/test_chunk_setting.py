"""The lease chunk has one value per run: the settings file's, ``--chunk-periods``, or 288."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.cli import main
from bidder.serve.reconciler_process import reconciler_argv
from bidder.serve.settings import Settings, SettingsError
from pacing.cli import add_commands
from pacing.config_file import (
    PacingFileError,
    chunk_periods_in_force,
    pacing_doc,
    settings_in_force,
)
from pacing.curves import STANDARD
from pacing.lease import DEFAULT_CHUNK_PERIODS
from pacing.pid import PidGains
from tests.cli import run_commands

FILE_PERIODS = 1000
BOTH = "give one, not both"


@pytest.fixture
def settings_file(tmp_path: Path) -> Path:
    path = tmp_path / "pacing.json"
    doc = pacing_doc(PidGains(0.05, 0.002, 0.0), FILE_PERIODS, STANDARD, "standard", {})
    path.write_bytes(orjson.dumps(doc))
    return path


def test_without_file_or_option_the_chunk_is_the_default() -> None:
    assert chunk_periods_in_force(None, None) == DEFAULT_CHUNK_PERIODS
    assert Settings().lease_chunk_periods() == DEFAULT_CHUNK_PERIODS


@given(st.integers(min_value=1, max_value=86_400))
def test_the_option_alone_sets_the_chunk(periods: int) -> None:
    assert chunk_periods_in_force(periods, None) == periods
    assert settings_in_force(None, 5.0, periods)["chunk_periods_per_day"] == periods


def test_the_file_alone_sets_the_chunk(settings_file: Path) -> None:
    assert chunk_periods_in_force(None, settings_file) == FILE_PERIODS
    assert Settings(pacing_config=settings_file).lease_chunk_periods() == FILE_PERIODS


def test_both_are_refused_naming_both(settings_file: Path) -> None:
    with pytest.raises(PacingFileError, match=BOTH) as caught:
        chunk_periods_in_force(4, settings_file)
    assert f"--chunk-periods 4 and --pacing-config {settings_file}" in str(caught.value)
    with pytest.raises(SettingsError, match=BOTH):
        Settings(chunk_periods=4, pacing_config=settings_file).validate()


def test_a_report_without_file_shows_the_option_it_ran_with() -> None:
    summary = settings_in_force(None, 5.0, 4)
    assert summary["chunk_periods_per_day"] == 4
    assert summary["source"] == "built-in defaults, --chunk-periods 4"


def test_the_reconciler_process_gets_only_the_setting_given(settings_file: Path) -> None:
    base = Settings(valkey_url="redis://127.0.0.1:1", aws_endpoint="http://127.0.0.1:1")
    with_file = reconciler_argv(base.replace(pacing_config=settings_file))
    with_option = reconciler_argv(base.replace(chunk_periods=4))
    assert "--chunk-periods" not in with_file and "--pacing-config" in with_file
    assert with_option[with_option.index("--chunk-periods") + 1] == "4"
    assert "--pacing-config" not in with_option
    assert "--chunk-periods" not in reconciler_argv(base)


def test_replay_refuses_both_in_one_message(
    tmp_path: Path, settings_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = tmp_path / "s.jsonl"
    stream.write_text("")
    argv = ["replay", str(stream), "--chunk-periods", "4", "--pacing-config", str(settings_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bidsim: error:") and err.count(BOTH) == 1 and "Traceback" not in err


def test_the_reconciler_refuses_both_in_one_message(
    settings_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reconciler", "--valkey", "redis://127.0.0.1:1", "--aws-endpoint", "http://127.0.0.1:1"]
    both = ["--chunk-periods", "4", "--pacing-config", str(settings_file)]
    assert run_commands(add_commands, [*argv, *both]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bidsim: error: --chunk-periods 4 and --pacing-config {settings_file}")
    assert "Traceback" not in err
