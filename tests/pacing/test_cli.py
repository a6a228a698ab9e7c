"""The pacing commands, through their handlers."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from pacing.cli import add_commands

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
    parser = argparse.ArgumentParser(prog="bidsim")
    add_commands(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    status: int = args.command(args)
    return status


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
