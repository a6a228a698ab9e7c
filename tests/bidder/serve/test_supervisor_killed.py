"""``bidsim serve`` killed with SIGKILL: nothing it started outlives it (its workers and
reconciler, forked from the fork server, watch it: ``bidder.stack.child.die_with``; the
embedded Valkey and moto server get ``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from bidder.stack.child import held_port
from tests.bidder.live import CAMPAIGNS
from tests.processes import descendants, gone, start_to_kill, wait_until


def test_every_process_of_a_killed_supervisor_ends(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bidder", "serve", "--workers", "2", "--no-reconciler"]
    argv += ["--port", str(held_port()), "--admin-port", "0"]
    argv += ["--campaigns", str(CAMPAIGNS)]
    supervisor = start_to_kill(argv, tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert supervisor.stderr is not None
        for line in supervisor.stderr:
            if "bidding at" in line:
                break
        started = descendants(supervisor.pid)
        # Valkey, moto and the two workers at least.
        assert len(started) >= 4, started
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait()
        wait_until(lambda: all(gone(pid) for pid in started), timeout_s=15.0)
        assert [pid for pid in started if not gone(pid)] == []
    finally:
        supervisor.kill()
        supervisor.communicate()
