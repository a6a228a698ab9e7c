"""The pacing commands, through their handlers."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pacing.cli import add_commands
from tests.cli import run_commands

pytestmark = pytest.mark.long(15)

REPO = Path(__file__).resolve().parents[2]
SAMPLE_STREAM = REPO / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
REQUIRED_KEYS = (
    "eod_spend_ratio", "max_cum_error_ratio", "hours_in_band_ratio",
    "stall_overspend_chunks_per_node", "late_tick_overspend_micros", "breaker_seconds",
    "asap_eod_hour", "sim_seconds",
)  # fmt: skip


RECONCILER = [
    "reconciler",
    "--valkey",
    "redis://127.0.0.1:1",
    "--aws-endpoint",
    "http://127.0.0.1:1",
]


def _run(argv: list[str]) -> int:
    return run_commands(add_commands, argv)


def test_simulate_writes_the_report_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert _run(["pacing", "simulate", "--json", str(out)]) == 0
    report = orjson.loads(out.read_bytes())
    assert all(key in report for key in REQUIRED_KEYS)
    assert 0.98 <= report["eod_spend_ratio"] <= 1.0
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["hourly_error.png", "pacing_rate.png", "spend_vs_target.png"]


def test_curve_from_a_stream_writes_24_weights(tmp_path: Path) -> None:
    out = tmp_path / "curve.json"
    assert _run(["pacing", "curve", str(SAMPLE_STREAM), "-o", str(out)]) == 0
    assert len(orjson.loads(out.read_bytes())["weights"]) == 24


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pacing", "simulate", "--curve", "nope"], "--curve"),
        (["pacing", "simulate", "--nodes", "0"], "--nodes"),
        (["pacing", "simulate", "--ledger-lag-ticks", "-1"], "--ledger-lag-ticks"),
        (["pacing", "simulate", "--ledger-lag-ticks", "nan"], "--ledger-lag-ticks must be 0-"),
        (["pacing", "curve", "/no/such/stream.jsonl"], "cannot open"),
        ([*RECONCILER, "--lag-threshold-s", "0"], "--lag-threshold-s must be at least 0.001"),
        ([*RECONCILER, "--sim-clock", "soon"], "--sim-clock must be START_MS:SPEED[:AT_MS]"),
        ([*RECONCILER, "--sim-clock", "0:-2"], "speed must be in (0, 100000], got -2"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_simulate_scores_each_named_day_against_what_its_supply_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "days.json"
    argv = ["pacing", "simulate", "--scenario", "half-outage", "--supply-ratio", "1.25"]
    assert _run([*argv, "--json", str(out)]) == 0
    day = orjson.loads(out.read_bytes())["scenarios"]["half-outage"]
    assert day["meets"] and day["paced"]["eod_vs_achievable"] >= 0.98
    assert len(day["paced"]["hourly_achievable_micros"]) == 24
    table = capsys.readouterr().out
    assert "half-outage (paced meets the acceptance)" in table and "ASAP" in table
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["half-outage-hourly.png"]


def test_simulate_runs_a_custom_day_from_the_transform_options(tmp_path: Path) -> None:
    out = tmp_path / "days.json"
    argv = ["pacing", "simulate", "--drop", "0-24:0.2", "--json", str(out)]
    assert _run(argv) == 0
    day = orjson.loads(out.read_bytes())["scenarios"]["custom"]
    assert day["paced"]["achievable_eod_ratio"] == pytest.approx(0.5, abs=0.001)


def test_tune_writes_the_settings_file_the_reconciler_reads(tmp_path: Path) -> None:
    from pacing.config_file import load_pacing_file

    out = tmp_path / "pacing.json"
    argv = ["pacing", "tune", "--setting", "0.05,0.002,0,1440", "--scenario", "light-day"]
    assert _run([*argv, "--out", str(out)]) == 0
    settings = load_pacing_file(out)
    assert (settings.gains.kp, settings.gains.ki, settings.chunk_periods_per_day) == (
        0.05, 0.002, 1440,
    )  # fmt: skip
    assert settings.curve_name == "standard"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pacing", "simulate", "--drop", "14:0.5"], "--drop: expected FIRST-END:KEEP"),
        (["pacing", "simulate", "--drop", "16-14:0.5"], "--drop: need 0 <= first < end"),
        (["pacing", "simulate", "--price-shift", "noon"], "--price-shift: expected HOUR:FACTOR"),
        (["pacing", "simulate", "--supply-scale", "0"], "--supply-scale: must be above 0"),
        (["pacing", "tune", "--setting", "1,2"], "--setting: expected KP,KI,KD,PERIODS"),
        (["pacing", "tune", "--out", "/no/such/dir/p.json"], "--out: no such directory"),
    ],
)
def test_bad_actual_day_options_are_one_message_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bidsim: error: ") and message in err and "Traceback" not in err
