"""``bidsim serve`` killed with SIGKILL: nothing it started outlives it (its workers, the
embedded Valkey and moto server: ``PR_SET_PDEATHSIG``, ``bidder.stack.child``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bidder.stack.child import free_port
from tests.bidder.live import CAMPAIGNS, REPO


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except FileNotFoundError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def _gone(pid: int) -> bool:
    """No such process, or a zombie left to a reaper that may never reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_every_process_of_a_killed_supervisor_ends(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bidder", "serve", "--workers", "2", "--no-reconciler"]
    argv += ["--port", str(free_port()), "--admin-port", str(free_port())]
    argv += ["--campaigns", str(CAMPAIGNS)]
    supervisor = subprocess.Popen(
        argv,
        cwd=REPO,
        # The killed supervisor cannot remove its temp dirs; put them where pytest cleans up.
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert supervisor.stderr is not None
        for line in supervisor.stderr:
            if "bidding at" in line:
                break
        started = _descendants(supervisor.pid)
        # Valkey, moto and the two workers at least.
        assert len(started) >= 4, started
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait()
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline and not all(_gone(pid) for pid in started):
            time.sleep(0.05)
        assert [pid for pid in started if not _gone(pid)] == []
    finally:
        supervisor.kill()
        supervisor.communicate()
