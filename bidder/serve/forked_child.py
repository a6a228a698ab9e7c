"""A supervised child forked from the fork server that has the libraries loaded.

For a Python child whose start-up is mostly imports the fork server already made (the
reconciler: about 0.5 s of CPU as a fresh interpreter, 0.1 s forked), with the ways of
``bidder.stack.child.ChildProcess``: its output appended to a log file, its own session
(a terminal's Ctrl-C reaches only the supervisor, which then stops it in order), a stop
that resumes it, asks, then kills after a grace, and no life beyond the process that
started it.

Theory of operation. ``ForkedChild(name, entry, args, log_path)`` has the fork server
(``bidder.serve.worker_start``) fork a process that runs ``_begin``: it leaves the
supervisor's session, points its standard output and error at the log, watches the
supervisor (``bidder.stack.child.die_with``: its parent is the fork server, so the
kernel's parent-death signal can't carry the supervisor's death), and exits with
``entry(args)``'s status. The supervisor signals it through a pidfd taken at the
start, so a signal never reaches another process that took the pid after it ended;
it signals the process alone, not a group, since a forked child starts no helpers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bidder.serve import worker_start
from bidder.stack.child import Supervised, die_with, stop_leftovers

Entry = Callable[[Any], int]
"""A child's main function: its arguments in, its exit status out."""


# At the interpreter's exit ``multiprocessing`` joins the processes it started (its own
# exit hook, registered as it was imported, which ``worker_start`` did above): a child
# its owner forgot to stop would hold the exit forever. Exit hooks run last registered
# first, so this one stops what is left before that join.
atexit.register(stop_leftovers)


class ForkedChild(Supervised):
    """A child forked from the fork server and supervised (module docstring)."""

    def __init__(self, name: str, entry: Entry, args: Any, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        log_path.touch()
        self.proc, receiver = worker_start.start(_begin, (entry, args, str(log_path)))
        receiver.close()
        pid = self.proc.pid
        assert pid is not None  # started
        self._pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # already ended and reaped: nothing left to signal
            self._pidfd = -1
        self._track()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def running(self) -> bool:
        return self.proc.is_alive()

    def wait(self, timeout_s: float | None = None) -> int | None:
        self.proc.join(timeout_s)
        code = self.proc.exitcode
        if code is not None and self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        return code

    def _signal(self, sig: int) -> None:
        if self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)


def _begin(payload: tuple[Entry, Any, str], supervisor_pid: int, conn: Connection) -> None:
    """The child's first code, from ``worker_start.enter``."""
    entry, args, log_path = payload
    conn.close()
    os.setsid()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    if sys.stdout is not None:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    die_with(supervisor_pid)
    raise SystemExit(entry(args))
