"""Supervised child processes: started in their own session, dying with us, always reaped.

Theory of operation. A ``ChildProcess`` runs a command with its output going to a log
file, and ``wait_ready`` polls a readiness check until it holds while the child still
runs. Stopping sends SIGCONT then SIGTERM to the child's process group (a paused
server can't exit), waits a short grace period, then SIGKILLs; the child is always
reaped. ``Supervised`` holds what it shares with the children forked from the bidder's
fork server (``bidder.serve.forked_child``).

Children must not outlive the process that started them, however it ends:
- normal exit, exceptions, Ctrl-C: the owner stops them. Each child runs in its own
  session so a terminal's Ctrl-C reaches only the parent, which then shuts down in order.
- ``kill -9`` of the parent: the kernel sends each child SIGTERM (``PR_SET_PDEATHSIG``).
  Linux delivers it when the *thread* that started the child exits, so start children
  from a thread that lives as long as they should (normally the main thread). A
  process whose parent is not the one it must die with (a bidder worker, forked from
  a fork server) watches that process instead (``die_with``).
- an interpreter exit that skipped the owner's stop: an ``atexit`` hook stops what is left.

Picking a port (bind port 0, read it, close) is racy: another process may take it
before the server binds. A server that loses that race exits at once, so
``retry_lost_port`` starts again on a new port a few times when a child exits before
it is ready (``ChildExited``); a child that is merely slow is not retried.
That race can't be seen on the bid port: its workers bind with ``SO_REUSEPORT``, and
a second server binding such a port with it too does not fail, the two share its
connections. ``held_port`` keeps such a port taken for the life of this process.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

START_TIMEOUT_S = 20.0
STOP_GRACE_S = 3.0
PORT_ATTEMPTS = 4
_POLL_S = 0.05
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_T = TypeVar("_T")


class Started:
    """A ``with`` block around ``start()`` and ``stop()``, for the local servers."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class StackError(Exception):
    """A server of the local stack could not be started or reached."""


class ChildExited(StackError):
    """A child exited before it was ready (a server may have lost its port's race)."""


def cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` so far, in seconds (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (racy: bind it soon, retry if lost)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_HELD: list[socket.socket] = []


def held_port() -> int:
    """A loopback TCP port taken until this process exits: for a bid port, or for an
    address where nothing may listen.

    It stays bound with ``SO_REUSEPORT`` and never listens: no other process binds it
    (without that option, or as another user), nothing connects to it (refused), and
    only the servers of this user that bind with the option (the bid workers) share it.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    port: int = sock.getsockname()[1]
    return port


@atexit.register
def _release_held_ports() -> None:
    while _HELD:
        _HELD.pop().close()


# Resolved in the parent: between fork and exec the child should do as little as it can.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A function that has the kernel SIGTERM its caller when ``parent_pid`` dies.

    Run it in the child, as ``preexec_fn``. If the parent is already gone by then, the
    child exits at once.
    """

    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        # The parent may have died between fork and prctl; then no signal would come.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def die_with(pid: int) -> None:
    """Have the kernel's word that process ``pid`` ended SIGTERM the calling process.

    For a process that must die with one that is not its parent: a daemon thread waits
    on a pidfd of ``pid`` (readable once it has exited) and then signals this process,
    whatever its event loop is doing. Exits at once if ``pid`` is already gone.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)

    def watch() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name=f"die-with-{pid}", daemon=True).start()


class Supervised:
    """A supervised child: a name, a log file, a readiness wait and an orderly stop.

    Subclasses say how the child was started and how to signal and wait for it:
    ``ChildProcess`` (a command run by ``subprocess``) and the children forked from
    the bidder's fork server (``bidder.serve.forked_child``).
    """

    name: str
    log_path: Path

    @property
    def pid(self) -> int:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        raise NotImplementedError

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The child's exit status once it has ended and been reaped; None if it still
        runs after ``timeout_s`` (None: wait as long as it takes)."""
        raise NotImplementedError

    def _signal(self, sig: int) -> None:
        """Send ``sig`` to the child, only while it has not been reaped (a reaped
        child's pid may belong to another process by now)."""
        raise NotImplementedError

    def _track(self) -> None:
        """Stop this child at the interpreter's exit if its owner has not (``atexit``)."""
        _live.add(self)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float) -> None:
        """Return once ``ready()`` holds while the child runs; else stop it and raise.

        ChildExited if it exited first, StackError if ``timeout_s`` passed first.
        """
        deadline = time.monotonic() + timeout_s
        try:
            while self.running and time.monotonic() < deadline:
                if ready() and self.running:
                    return
                time.sleep(_POLL_S)
        except BaseException:  # Ctrl-C while waiting leaves no child behind
            self.stop()
            raise
        exited = not self.running
        self.stop()
        if exited:
            raise ChildExited(f"{self.name} exited before answering; log tail:\n{self.log_tail()}")
        raise StackError(
            f"{self.name} did not answer within {timeout_s:g} s; log tail:\n{self.log_tail()}"
        )

    def terminate(self) -> None:
        """Ask the child to exit (it may be paused: it is resumed first)."""
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)

    def wait_or_kill(self, grace_s: float = STOP_GRACE_S) -> None:
        """Reap the child, SIGKILLing it if it is still running after ``grace_s``."""
        if self.wait(grace_s) is None:
            self._signal(signal.SIGKILL)
            self.wait()
        _live.discard(self)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        self.terminate()
        self.wait_or_kill(grace_s)

    def kill(self) -> None:
        """``kill -9`` (no shutdown, no last words), then reap it."""
        self._signal(signal.SIGKILL)
        self.wait()
        _live.discard(self)


class ChildProcess(Supervised):
    """One command run as a supervised child process, its output appended to ``log_path``."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self._track()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _signal(self, sig: int) -> None:
        # The child leads its own process group; signal the group so helpers it may
        # have forked go too.
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)


_live: set[Supervised] = set()


@atexit.register
def stop_leftovers() -> None:
    """Stop every child whose owner has not (at the interpreter's exit)."""
    for child in list(_live):
        child.stop()


def retry_lost_port(start: Callable[[], _T]) -> _T:
    """``start()`` (which picks free ports), again while its child exits before answering."""
    for _ in range(PORT_ATTEMPTS - 1):
        with contextlib.suppress(ChildExited):
            return start()
    return start()
