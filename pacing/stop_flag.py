"""A stop flag a signal handler may set.

``threading.Event.set`` takes the Event's lock. A signal handler runs in the main
thread between two bytecodes, so a second SIGTERM arriving while the first handler is
inside ``set`` runs a second handler there, which waits on the lock its own thread
holds: forever. Two stop signals together are the ordinary case for a supervised child
(its supervisor's SIGTERM, and the one it sends itself on seeing the supervisor die,
``bidder.stack.child.die_with``, when the supervisor is killed). This flag takes no
lock: ``set`` stores a bool and writes a byte to a pipe, and ``wait`` sleeps in
``select`` on that pipe.
"""

from __future__ import annotations

import contextlib
import os
import select
from typing import Protocol


class Stop(Protocol):
    """What a loop that runs until told to stop needs: ``threading.Event`` fits."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class SignalStop:
    """``is_set``/``wait``/``set`` like ``threading.Event``, ``set`` safe in a signal
    handler. For the life of the process (its pipe is never closed)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._set = False

    def set(self) -> None:
        self._set = True
        with contextlib.suppress(BlockingIOError):  # a full pipe already wakes the waiter
            os.write(self._write, b"\0")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Until set or ``timeout`` seconds; whether it is set."""
        if not self._set:
            select.select([self._read], [], [], timeout)
        return self._set
