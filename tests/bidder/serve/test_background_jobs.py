"""A worker's background jobs are kept running (``bidder.serve.worker.keep_running``):
a failure nobody handled is logged with its traceback, counted, and the job started
again; a job that returns ends; a cancel (shutdown) stops it."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import pytest

from bidder.core import metrics
from bidder.core.tasks import cancel_and_wait
from bidder.serve.worker import keep_running


class Job:
    """Fails ``failures`` times, then runs until cancelled (or returns, ``ends``)."""

    def __init__(self, failures: int, ends: bool = False) -> None:
        self.failures, self.ends = failures, ends
        self.runs = 0
        self.running = asyncio.Event()

    async def __call__(self) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise KeyError(f"slot {self.runs}")  # what a Cluster client's map can raise
        if self.ends:
            return
        self.running.set()
        await asyncio.Event().wait()


def _restarts(name: str) -> float:
    return metrics.BACKGROUND_RESTARTS.labels(name).value


@pytest.mark.asyncio
async def test_a_failing_job_is_logged_counted_and_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = Job(failures=2)
    before = _restarts("Job")
    with caplog.at_level(logging.ERROR, logger="bidder.serve.worker"):
        kept = asyncio.create_task(keep_running(job, first_s=0.0))
        await asyncio.wait_for(job.running.wait(), timeout=10)
        await cancel_and_wait(kept)
    assert job.runs == 3
    assert _restarts("Job") - before == 2
    failures = [r for r in caplog.records if "background job Job failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info is not None and r.exc_info[0] is KeyError for r in failures)
    assert kept.cancelled()


@pytest.mark.asyncio
async def test_a_job_that_returns_is_not_started_again() -> None:
    job = Job(failures=1, ends=True)
    await asyncio.wait_for(keep_running(job, first_s=0.0), timeout=10)
    assert job.runs == 2


@pytest.mark.asyncio
async def test_a_partial_is_named_for_its_function() -> None:
    async def refresh(_interval: float) -> None:
        raise OSError("unforeseen")

    name = refresh.__qualname__
    before = _restarts(name)
    kept = asyncio.create_task(keep_running(partial(refresh, 1.0), first_s=0.0))
    for _ in range(1000):
        if _restarts(name) > before:
            break
        await asyncio.sleep(0)
    await cancel_and_wait(kept)
    assert _restarts(name) > before
