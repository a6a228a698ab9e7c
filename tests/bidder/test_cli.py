"""``bidsim`` from a user's seat: clear one-line errors, reproducible output, the main job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from bidder.cli import main
from tests.bidder.conftest import CAMPAIGNS

pytestmark = pytest.mark.long(15)

BIDSIM = Path(sys.executable).parent / "bidsim"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_a_valid_campaign_file_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["campaigns", "check", str(CAMPAIGNS)]) == 0
    assert "all valid" in capsys.readouterr().out


def test_a_bad_campaign_file_names_the_campaign_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = orjson.loads(CAMPAIGNS.read_bytes())
    doc["campaigns"][0]["daily_budget_micros"] = -5
    bad = tmp_path / "campaigns.json"
    bad.write_bytes(orjson.dumps(doc))
    code, err = _run(capsys, "campaigns", "check", str(bad))
    first_id = doc["campaigns"][0]["id"]
    assert code == 2
    assert first_id in err and "daily_budget_micros" in err
    assert "Traceback" not in err


def test_a_missing_campaign_file_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = _run(capsys, "campaigns", "check", str(tmp_path / "nope.json"))
    assert code == 2 and "nope.json" in err and "Traceback" not in err


def test_invalid_serve_options_are_all_reported(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(
        capsys, "serve", "--workers", "0", "--deadline-ms", "0", "--public-url", "ftp://x"
    )
    assert code == 2
    assert "--workers" in err and "--deadline-ms" in err and "--public-url" in err


def test_replaying_a_missing_stream_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = _run(
        capsys, "replay", str(tmp_path / "none.jsonl.gz"), "--target", "http://127.0.0.1:9"
    )
    assert code == 2 and "none.jsonl.gz" in err and "Traceback" not in err


def test_replaying_a_corrupt_stream_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stream = tmp_path / "bad.jsonl"
    stream.write_text('{"t_ms": 0, "ssp": "a", "request": {}}\n{"t_ms": "soon"}\n')
    code, err = _run(capsys, "replay", str(stream), "--target", "http://127.0.0.1:9")
    assert code == 2 and "bad.jsonl:2" in err and "t_ms" in err


def test_gen_with_the_same_seed_writes_the_same_bytes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        assert main(["gen", "--out", str(tmp_path / name), "--requests", "300", "--seed", "7"]) == 0
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_gen_refuses_a_non_positive_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = _run(capsys, "gen", "--out", str(tmp_path / "x.jsonl"), "--requests", "0")
    assert code == 2 and "--requests" in err


def test_the_main_job_replays_a_stream_through_the_full_stack(tmp_path: Path) -> None:
    stream, report, page = tmp_path / "s.jsonl.gz", tmp_path / "report.json", tmp_path / "r.html"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    assert (
        main(["gen", "--out", str(stream), "--requests", "600", "--seed", "3", "--rate", "300"])
        == 0
    )
    done = subprocess.run(
        [
            BIDSIM,
            "replay",
            stream,
            "--json",
            report,
            "--html",
            page,
            "--no-progress",
            "--audit-ledger",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp)},  # where this run keeps its spool
    )
    assert done.returncode == 0, done.stderr
    result = orjson.loads(report.read_bytes())
    assert result["requests"] == 600
    assert result["status"].get("5xx", 0) == 0
    assert result["status"]["200"] > 0 and result["status"]["204"] > 0
    assert result["auction"]["wins"] > 0
    assert "p99" in done.stdout
    for figure in ("bids", "wins", "spend_micros"):
        per_campaign = sum(c[figure] for c in result["campaigns"].values())
        assert per_campaign == result["auction"][figure]
    # The book's first position of each imp is the bid sent, in the same auction.
    first: dict[str, int] = {}
    for orders in result["supply_book"]:
        for entry in orders:
            cid = entry["order"][0]
            first[cid] = first.get(cid, 0) + entry["spend_micros"][0]
    spent = {cid: c["spend_micros"] for cid, c in result["campaigns"].items() if c["spend_micros"]}
    assert {cid: micros for cid, micros in first.items() if micros} == spent and spent
    ledger = result["ledger"]
    assert ledger["lost_entries"] == 0 and ledger["ledger_equals_spend_totals"], ledger
    assert ledger["acknowledged_bills"] > 0
    assert f"{ledger['acknowledged_bills']:,} bills acknowledged" in done.stdout
    assert f"HTML report written to {page}" in done.stdout
    assert '<section id="campaigns">' in page.read_text()
    # Every entry shipped and archived, the spool of this run's own moto is gone.
    assert list((tmp / "bidsim-spool").iterdir()) == []


def _processes_with(env_entry: str) -> list[int]:
    """Pids of the processes whose environment holds ``env_entry``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if env_entry.encode() in environ.split(b"\0"):
            found.append(int(pid))
    return found


def _segments(tmp: Path) -> list[Path]:
    """The ledger spool segments of the workers of the replay marked by ``tmp``."""
    return list(tmp.glob("bidsim-spool/*/*.seg"))


def _billed(tmp: Path) -> bool:
    """A bill is spooled: requests were answered and notices sent."""
    return any(seg.stat().st_size for seg in _segments(tmp))


def _started(tmp: Path) -> bool:
    """Each worker opens its segment as it starts."""
    return bool(_segments(tmp))


# While sending: the signal once a bill is spooled. While starting: the workers are
# ready about a second after they open their segments; the reconciler's first tick
# leases to them, and the bidder then gives each worker 1.5 refresh intervals to read
# its leases, 90 s with a 60 s refresh (the longest allowed), before it serves. The
# signal 3 s after the segments appear lands inside start-up, in that wait at the latest.
_WHILE_SENDING = ((), _billed, 0.0)
_WHILE_STARTING = (
    ("--clock", "real", "--pacing-tick-s", "120", "--lease-refresh-s", "60"),
    _started,
    3.0,
)


@pytest.mark.parametrize(
    ("options", "reached", "then_s"),
    [_WHILE_SENDING, _WHILE_STARTING],
    ids=["sending", "starting"],
)
def test_sigterm_stops_a_replay_as_ctrl_c_does_and_leaves_nothing_running(
    tmp_path: Path, options: tuple[str, ...], reached: Callable[[Path], bool], then_s: float
) -> None:
    stream, tmp = tmp_path / "s.jsonl.gz", tmp_path / "tmp"
    tmp.mkdir()
    # A minute of sends: the replay is still sending when the signal comes.
    assert main(["gen", "--out", str(stream), "--requests", "6000", "--rate", "100"]) == 0
    replay = subprocess.Popen(
        [BIDSIM, "replay", stream, "--no-progress", *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},  # this run's servers and files are marked
    )
    try:
        deadline = time.monotonic() + 60
        while not reached(tmp) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reached(tmp), "the replay never reached the moment to stop it"
        time.sleep(then_s)
        replay.send_signal(signal.SIGTERM)
        # Start-up would last past this timeout if a stop did not end it.
        _, err = replay.communicate(timeout=60)
    finally:
        replay.kill()
    assert replay.returncode == 130, err
    assert "bidsim: interrupted" in err and "Traceback" not in err
    assert "failed, kept" not in err  # every worker archived its ledger
    assert _processes_with(f"TMPDIR={tmp}") == []
    assert not [p.name for p in tmp.iterdir() if p.name != "bidsim-spool"]
    # Every worker archived its segment, and the spool of the run's own moto went with it.
    assert list((tmp / "bidsim-spool").iterdir()) == []


def test_a_ledger_audit_of_a_bidder_elsewhere_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stream = tmp_path / "s.jsonl"
    stream.write_text("")
    code, err = _run(
        capsys, "replay", str(stream), "--target", "http://127.0.0.1:9", "--audit-ledger"
    )
    assert code == 2 and "--audit-ledger" in err and "--target" in err
    assert "Traceback" not in err


def test_a_report_into_a_missing_directory_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stream = tmp_path / "s.jsonl"
    stream.write_text("")
    out = str(tmp_path / "nowhere" / "r.html")
    code, err = _run(capsys, "replay", str(stream), "--target", "http://127.0.0.1:9", "--html", out)
    assert code == 2 and "nowhere" in err and "Traceback" not in err
