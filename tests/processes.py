"""Processes as the tests see them from outside: started to be killed, ended, waited for,
the tree under one."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_ENDED = (FileNotFoundError, ProcessLookupError)
"""What reading a process's /proc file raises once it has ended (ESRCH: as it was read)."""


def start_to_kill(argv: list[str], tmp_path: Path, **pipes: Any) -> subprocess.Popen[str]:
    """``argv`` started from the repository, text mode, ``pipes`` as ``Popen`` takes them.
    Its temp dirs go under ``tmp_path``: a process killed with SIGKILL cannot remove
    them, and pytest does."""
    return subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)}, text=True, **pipes
    )


def gone(pid: int) -> bool:
    """No such process, or a zombie: it has ended, and an orphan's reaper may never
    reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except _ENDED:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def reaped(pid: int) -> bool:
    """No such process: it has ended and its parent has waited for it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether ``condition`` came true within ``timeout_s``, polled every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def descendants(pid: int) -> set[int]:
    """Every process under ``pid``: its children, theirs, and so on."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except _ENDED:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found
