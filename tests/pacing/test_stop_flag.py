"""The stop flag a signal handler may set (the reconciler's process stops on it)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from pacing.stop_flag import SignalStop

WAIT_S = 10.0
"""Bound on a wait that a set flag ends at once; never reached when things work."""


def test_a_new_flag_is_not_set_and_a_wait_on_it_times_out() -> None:
    stop = SignalStop()
    assert not stop.is_set()
    assert stop.wait(0.01) is False


def test_set_from_another_thread_ends_a_wait() -> None:
    stop = SignalStop()
    threading.Timer(0.01, stop.set).start()
    assert stop.wait(WAIT_S) is True
    assert stop.is_set()


def test_setting_it_again_and_again_never_blocks() -> None:
    stop = SignalStop()
    for _ in range(100_000):  # far more than a pipe buffer holds
        stop.set()
    assert stop.wait(0) is True


@pytest.fixture
def usr1_sets() -> Iterator[SignalStop]:
    stop = SignalStop()
    previous = signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    try:
        yield stop
    finally:
        # A signal caught after the default action is back is reported as "ignored due
        # to race condition": the ones already sent reach the handler first (a sleep
        # returns through the interpreter's check for caught signals).
        while signal.SIGUSR1 in signal.sigpending():
            time.sleep(0.001)
        time.sleep(0.001)
        signal.signal(signal.SIGUSR1, previous)


def test_a_burst_of_signals_whose_handler_sets_it_ends_a_wait(usr1_sets: SignalStop) -> None:
    # Signals arriving while a handler runs nest handlers in the main thread; with a
    # flag that takes a lock, a nested one would wait on its own thread forever.
    sender = threading.Thread(
        target=lambda: [os.kill(os.getpid(), signal.SIGUSR1) for _ in range(2_000)]
    )
    sender.start()
    assert usr1_sets.wait(WAIT_S) is True
    sender.join(WAIT_S)
    assert not sender.is_alive()
