"""bidder.serve.forked_child: a child forked from the fork server keeps a supervised
child's ways: its output in its log, its own session, its exit status, a stop that
resumes, asks and then kills, and no life beyond the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bidder.serve.forked_child import ForkedChild
from tests.processes import gone, start_to_kill, wait_until

WAIT_S = 30.0
"""Bound on a child starting or ending; never reached when things work."""


def _say_and_exit(args: tuple[str, int]) -> int:
    """A child's main: prints, writes to stderr, exits with the given status."""
    text, status = args
    print(text)
    print(f"{text} on stderr", file=sys.stderr)
    print(f"session {os.getsid(0)}")
    return status


def _sleep(ignore_sigterm: bool) -> int:
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("up")
    time.sleep(WAIT_S * 2)
    return 0


def _started(tmp_path: Path, ignore_sigterm: bool = False) -> ForkedChild:
    child = ForkedChild("sleeper", _sleep, ignore_sigterm, tmp_path / "sleeper.log")
    child.wait_ready(lambda: "up" in child.log_tail(), WAIT_S)
    return child


def test_its_output_goes_to_its_log_and_its_status_comes_back(tmp_path: Path) -> None:
    child = ForkedChild("sayer", _say_and_exit, ("hello", 7), tmp_path / "sayer.log")
    assert child.wait(WAIT_S) == 7
    assert not child.running
    lines = child.log_tail().splitlines()
    assert lines[:2] == ["hello", "hello on stderr"]
    assert lines[2] == f"session {child.pid}"  # it leads a session of its own


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    child = _started(tmp_path, ignore_sigterm=True)
    child.stop(grace_s=0.2)
    assert child.wait(0) == -signal.SIGKILL


def test_a_paused_child_still_stops_on_sigterm(tmp_path: Path) -> None:
    child = _started(tmp_path)
    os.kill(child.pid, signal.SIGSTOP)
    child.stop(grace_s=WAIT_S)
    assert child.wait(0) == -signal.SIGTERM


def test_signals_after_the_end_reach_nobody(tmp_path: Path) -> None:
    child = _started(tmp_path)
    child.kill()
    assert child.wait(0) == -signal.SIGKILL
    child.stop()  # its pid may be another process's by now: nothing is sent
    child.kill()
    assert child.wait(0) == -signal.SIGKILL


_STARTER = """
import sys
from pathlib import Path
import bidder.stack.child  # first, as in the bidder: its exit hook before multiprocessing's
from bidder.serve.forked_child import ForkedChild
from tests.bidder.serve.test_forked_child import _sleep

if __name__ == "__main__":
    child = ForkedChild("sleeper", _sleep, False, Path(sys.argv[1]))
    child.wait_ready(lambda: "up" in child.log_tail(), 30)
    print(child.pid, flush=True)
    if sys.argv[2] == "wait":
        sys.stdin.read()
"""


def test_a_child_ends_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", _STARTER, str(tmp_path / "sleeper.log"), "wait"]
    starter = start_to_kill(argv, tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        assert not gone(pid)
        starter.kill()
        assert wait_until(lambda: gone(pid), WAIT_S)
    finally:
        starter.kill()
        starter.communicate()


def test_a_child_its_owner_forgot_is_stopped_when_the_interpreter_exits(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "-c", _STARTER, str(tmp_path / "sleeper.log"), "exit"]
    starter = start_to_kill(argv, tmp_path, stdout=subprocess.PIPE)
    try:
        out, _ = starter.communicate(timeout=WAIT_S)  # the child sleeps for 2 x WAIT_S
    finally:
        starter.kill()
    assert starter.returncode == 0
    assert gone(int(out))
