"""A stopping worker ends even when a task will not: ``bidder.serve.worker.exit_within``."""

from __future__ import annotations

import signal
import subprocess
import sys

# A task that drops every cancel, as one can on Python 3.11 (``asyncio.wait_for``
# returning a result that arrived with the cancel), then keeps looping: the event
# loop's shutdown cancels it once and waits for it forever.
_STUBBORN = """
import asyncio, sys
from bidder.serve.worker import exit_within

async def stubborn():
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

async def main():
    asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0)
    if sys.argv[1] == "backstop":
        exit_within(0.5)

asyncio.run(main())
"""


def _run(mode: str, timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """The process's end, or None when it is still running after ``timeout_s``."""
    try:
        return subprocess.run(
            [sys.executable, "-c", _STUBBORN, mode],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        return None


def test_a_loop_held_by_a_task_that_drops_its_cancel_never_ends_on_its_own() -> None:
    assert _run("none", timeout_s=5) is None  # 0.5 s would have been enough


def test_the_backstop_ends_the_process_all_the_same() -> None:
    done = _run("backstop", timeout_s=30)
    assert done is not None and done.returncode == -signal.SIGALRM, done
    assert "Traceback" not in done.stderr
