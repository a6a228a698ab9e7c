"""bidder.winloop.group_commit: concurrent submits share a write; a failed one refuses its batch."""

from __future__ import annotations

import asyncio

import pytest

from bidder.winloop.group_commit import GroupCommit


class Refused(Exception):
    pass


class Disk:
    """A write function that records its batches and can be held or made to fail."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_on: set[str] = set()

    async def write(self, items: list[str]) -> None:
        await self.gate.wait()
        if self.fail_on & set(items):
            raise OSError("disk full")
        self.batches.append(items)


async def settle() -> None:
    """Let every ready task run until it waits (on the gate, or for its batch)."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_submits_during_a_write_share_the_next_write() -> None:
    disk = Disk()
    commits = GroupCommit(disk.write, Refused, "test")
    disk.gate.clear()
    first = asyncio.create_task(commits.submit("a"))
    await settle()  # the writer takes "a" and waits on the gate
    rest = [asyncio.create_task(commits.submit(item)) for item in ("b", "c", "d")]
    await settle()
    assert commits.backlog == 3
    disk.gate.set()
    await asyncio.gather(first, *rest)
    assert disk.batches == [["a"], ["b", "c", "d"]]
    assert commits.backlog == 0


@pytest.mark.asyncio
async def test_a_submit_returns_only_once_its_batch_is_written() -> None:
    disk = Disk()
    commits = GroupCommit(disk.write, Refused, "test")
    disk.gate.clear()
    waiter = asyncio.create_task(commits.submit("a"))
    await settle()
    assert not waiter.done()
    disk.gate.set()
    await waiter
    assert disk.batches == [["a"]]


@pytest.mark.asyncio
async def test_a_failed_write_refuses_every_item_of_its_batch_only() -> None:
    disk = Disk()
    commits = GroupCommit(disk.write, Refused, "test")
    disk.gate.clear()
    first = asyncio.create_task(commits.submit("a"))
    await settle()
    doomed = [asyncio.create_task(commits.submit(item)) for item in ("bad", "b")]
    disk.fail_on = {"bad"}
    disk.gate.set()
    await first
    for waiter in doomed:
        with pytest.raises(Refused, match="disk full"):
            await waiter
    await commits.submit("c")
    assert disk.batches == [["a"], ["c"]]


@pytest.mark.asyncio
async def test_a_cancelled_waiter_does_not_cancel_the_shared_write() -> None:
    disk = Disk()
    commits = GroupCommit(disk.write, Refused, "test")
    disk.gate.clear()
    gone = asyncio.create_task(commits.submit("a"))
    await settle()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    disk.gate.set()
    await commits.drain()
    assert disk.batches == [["a"]]


@pytest.mark.asyncio
async def test_drain_returns_once_every_submitted_item_is_written() -> None:
    disk = Disk()
    commits = GroupCommit(disk.write, Refused, "test")
    disk.gate.clear()
    waiters = [asyncio.create_task(commits.submit(item)) for item in ("a", "b")]
    await settle()
    disk.gate.set()
    await commits.drain()
    assert disk.batches == [["a", "b"]]
    await asyncio.gather(*waiters)
