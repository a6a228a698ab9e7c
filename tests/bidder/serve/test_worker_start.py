"""bidder.serve.worker_start: a worker forked from the fork server runs with the
supervisor's environment of its own start and finds the heavy libraries loaded."""

from __future__ import annotations

import json
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from bidder.serve import worker_start

VARIABLE = "BIDSIM_TEST_WORKER_START"


def _report(out: str, supervisor_pid: int, conn: Connection) -> None:
    """A worker entry point: writes what it found to ``out``."""
    found = {
        "variable": os.environ.get(VARIABLE),
        "supervisor": supervisor_pid,
        "preloaded": sorted(m for m in worker_start.PRELOADED if m in sys.modules),
        "prometheus_loaded_before_entry": "prometheus_client" in sys.modules,
    }
    Path(out).write_text(json.dumps(found))
    conn.send(("ready", os.getpid()))


def _start(out: Path) -> dict[str, object]:
    ctx = worker_start.context()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=worker_start.enter, args=worker_start.worker_args(_report, str(out), sender)
    )
    proc.start()
    sender.close()
    assert receiver.poll(60) and receiver.recv()[0] == "ready"
    proc.join(30)
    assert proc.exitcode == 0
    found: dict[str, object] = json.loads(out.read_text())
    return found


def test_each_worker_sees_the_environment_of_its_own_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VARIABLE, "first")
    first = _start(tmp_path / "first.json")
    monkeypatch.setenv(VARIABLE, "second")  # the fork server keeps the first
    second = _start(tmp_path / "second.json")
    monkeypatch.delenv(VARIABLE)
    third = _start(tmp_path / "third.json")
    assert [w["variable"] for w in (first, second, third)] == ["first", "second", None]
    assert {w["supervisor"] for w in (first, second, third)} == {os.getpid()}


def test_a_worker_finds_the_libraries_loaded_and_prometheus_not(tmp_path: Path) -> None:
    found = _start(tmp_path / "found.json")
    assert found["preloaded"] == sorted(worker_start.PRELOADED)
    # The test module that holds the entry point loads it, not the fork server.
    assert found["prometheus_loaded_before_entry"] is False
