"""bidder.serve.worker_start: a worker forked from the fork server runs with the
supervisor's environment of its own start and finds the heavy libraries loaded."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from bidder.serve import worker_start
from tests.processes import REPO

VARIABLE = "BIDSIM_TEST_WORKER_START"


def _report(out: str, supervisor_pid: int, conn: Connection) -> None:
    """A worker entry point: writes what it found to ``out``."""
    found = {
        "variable": os.environ.get(VARIABLE),
        "supervisor": supervisor_pid,
        "preloaded": sorted(m for m in worker_start.PRELOADED if m in sys.modules),
        "prometheus_loaded_before_entry": "prometheus_client" in sys.modules,
        "frozen": gc.get_freeze_count(),
    }
    Path(out).write_text(json.dumps(found))
    conn.send(("ready", os.getpid()))


def _start(out: Path, entry: Callable[[str, int, Connection], None] = _report) -> Any:
    """What the worker running ``entry`` wrote to ``out``, once it ended well."""
    proc, receiver = worker_start.start(entry, str(out))
    assert receiver.poll(60) and receiver.recv()[0] == "ready"
    proc.join(30)
    assert proc.exitcode == 0
    return json.loads(out.read_text())


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


def test_a_worker_finds_the_fork_servers_heap_frozen_after_every_preload(tmp_path: Path) -> None:
    """Its first collection then walks only what it made itself (``fork_warmup``)."""
    assert worker_start.PRELOADED[-1] == "bidder.serve.fork_warmup"
    assert _start(tmp_path / "found.json")["frozen"] > 100_000


def _files_read(out: str, supervisor_pid: int, conn: Connection) -> None:
    """A worker entry point: builds a client of each service workers and the reconciler
    call, writes the files botocore read to build them."""
    from botocore.loaders import JSONFileLoader

    from bidder.adapters.aws import load_models

    read: list[str] = []
    load_file = JSONFileLoader.load_file

    def recorded(loader: JSONFileLoader, path: str) -> Any:
        read.append(path)
        return load_file(loader, path)

    JSONFileLoader.load_file = recorded  # type: ignore[method-assign]
    load_models(_called_services())
    Path(out).write_text(json.dumps(read))
    conn.send(("ready", os.getpid()))


def test_a_worker_builds_its_aws_clients_without_reading_their_models(tmp_path: Path) -> None:
    assert _start(tmp_path / "read.json", _files_read) == []


def test_the_warmed_services_are_the_ones_workers_and_the_reconciler_call() -> None:
    from bidder.serve import fork_warmup  # not at the top: a worker imports this module

    assert _called_services() == set(fork_warmup.SERVICES)


def _called_services() -> set[str]:
    called: set[str] = set()
    for module in ("bidder/serve/_loads.py", "pacing/reconciler.py"):
        called |= set(re.findall(r'aws_client\("(\w+)"', (REPO / module).read_text()))
    return called


_UNDER_LONG_TMPDIR = """
from pathlib import Path
from tests.bidder.serve.test_worker_start import _start
print(_start(Path(__import__("sys").argv[1]))["variable"])
"""


def test_a_tmpdir_too_long_for_the_fork_servers_socket_still_starts_workers(
    tmp_path: Path,
) -> None:
    long_dir = tmp_path / ("d" * 100)
    long_dir.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", _UNDER_LONG_TMPDIR, str(tmp_path / "found.json")],
        env={**os.environ, "TMPDIR": str(long_dir), VARIABLE: "long"},
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, "long\n", "")


_MAIN_LOADING_PROMETHEUS = """
import os, sys, tempfile
import prometheus_client  # at the top: a worker imports this script before its own code
from bidder.serve import worker_start

def entry(settings, supervisor_pid, conn):
    conn.send(("ready", os.getpid()))

def start():
    proc, receiver = worker_start.start(entry, None)
    answer = receiver.recv() if receiver.poll(60) else ("none", "")
    proc.join(30)
    return answer[0], proc.exitcode

if __name__ == "__main__":
    for name in ("first", "second"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix=name)
        print(*start())
"""


def test_a_main_module_that_loads_prometheus_fails_the_second_bidders_worker_clearly(
    tmp_path: Path,
) -> None:
    script = tmp_path / "two_bidders.py"
    script.write_text(_MAIN_LOADING_PROMETHEUS)
    out = subprocess.run(
        [sys.executable, str(script)], env={**os.environ, "TMPDIR": str(tmp_path)},
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # The first worker shares the fork server's directory; the second would not.
    assert out.stdout.splitlines() == ["ready 0", "error 3"], out.stderr
