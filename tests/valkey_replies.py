"""Waiting, in a test, for a resumed Valkey to answer what a connection owes it."""

from __future__ import annotations

import asyncio

from bidder.adapters.valkey_pipelined import PipelinedConnection


async def caught_up(connection: PipelinedConnection, bound_s: float = 10.0) -> None:
    """Until ``connection`` owes no reply: a server resumed after SIGSTOP has answered the
    calls made while it was stopped. Until then a call fails at once (``ServerSilent``)
    if the server has been silent for ``silent_s``, as a test's paused call can make it.
    Fails the test past ``bound_s``."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + bound_s
    while connection.pending:
        assert loop.time() < give_up, f"{connection.pending} replies owed after {bound_s} s"
        await asyncio.sleep(0.001)
