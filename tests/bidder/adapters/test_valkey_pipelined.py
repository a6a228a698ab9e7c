"""bidder.adapters.valkey_pipelined on the real Valkey: one write per loop iteration, replies in
order, a time bound that leaves the connection healthy, and what a paused, full,
killed or restarted server does to it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as ValkeyConnectionError
from redis.exceptions import NoScriptError, ResponseError

from bidder.adapters.valkey import connect_pipelined
from bidder.adapters.valkey_pipelined import (
    Address,
    PipelinedConnection,
    ServerSilent,
    TooManyPending,
    pack,
)
from bidder.stack.child import free_port
from bidder.stack.cluster import ValkeyNode

args = st.lists(
    st.one_of(st.binary(max_size=64), st.text(max_size=32), st.integers(-(2**63), 2**63 - 1)),
    min_size=1,
    max_size=8,
)


def encoded(arg: bytes | str | int) -> bytes:
    return arg if isinstance(arg, bytes) else str(arg).encode()


@given(args)
def test_a_packed_command_parses_back_to_its_arguments(command: list[bytes | str | int]) -> None:
    reader = hiredis.Reader()
    reader.feed(pack(*command))
    assert reader.gets() == [encoded(arg) for arg in command]


# -- one server, shared by the tests that do not break it -----------------------------------


def echo(n: int | str) -> bytes:
    return pack(b"ECHO", f"reply-{n}")


def soon(seconds: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + seconds


@pytest.mark.asyncio
async def test_calls_made_in_one_loop_iteration_leave_in_one_write(
    pipelined: PipelinedConnection, valkey_url: str
) -> None:
    with redis.Redis.from_url(valkey_url) as admin:
        before = admin.info("stats")
        writes, commands = pipelined.writes, pipelined.commands
        replies = [pipelined.send(echo(n), soon()) for n in range(200)]
        answers = [await reply for reply in replies]
        after = admin.info("stats")
    assert answers == [f"reply-{n}".encode() for n in range(200)]
    assert (pipelined.writes - writes, pipelined.commands - commands) == (1, 200)
    # The server read them in one go too (the other read is the second INFO).
    assert after["total_reads_processed"] - before["total_reads_processed"] == 2


@pytest.mark.asyncio
async def test_each_caller_gets_its_own_reply_when_calls_interleave(
    pipelined: PipelinedConnection,
) -> None:
    async def caller(name: int) -> list[bytes]:
        got = []
        for n in range(20):
            got.append(await pipelined.send(echo(f"{name}-{n}"), soon()))
            if n % (name + 1) == 0:
                await asyncio.sleep(0)  # callers drift apart across loop iterations
        return got

    answers = await asyncio.gather(*(caller(name) for name in range(8)))
    assert answers == [[f"reply-{name}-{n}".encode() for n in range(20)] for name in range(8)]


@pytest.mark.asyncio
async def test_an_error_reply_fails_only_its_own_caller(
    pipelined: PipelinedConnection, valkey_url: str
) -> None:
    key = f"test-pipelined-{free_port()}"
    with redis.Redis.from_url(valkey_url) as admin:
        admin.set(key, "a string", px=60_000)
    replies = [
        pipelined.send(echo(1), soon()),
        pipelined.send(pack(b"HMGET", key, b"f"), soon()),  # wrong type
        pipelined.send(pack(b"EVALSHA", "0" * 40, 0), soon()),
        pipelined.send(echo(2), soon()),
    ]
    assert await replies[0] == b"reply-1"
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await replies[1]
    with pytest.raises(NoScriptError):
        await replies[2]
    assert await replies[3] == b"reply-2"


@pytest.mark.asyncio
async def test_a_call_whose_limit_has_passed_is_never_sent(
    pipelined: PipelinedConnection,
) -> None:
    commands = pipelined.commands
    with pytest.raises(TimeoutError):
        await pipelined.send(echo(1), asyncio.get_running_loop().time())
    assert await pipelined.send(echo(2), soon()) == b"reply-2"
    assert pipelined.commands == commands + 1


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 70_000), st.booleans()), min_size=1, max_size=40))
def test_replies_reach_the_callers_still_waiting_in_order(
    valkey_url: str, calls: list[tuple[int, bool]]
) -> None:
    """Property: whatever the sizes (replies split over many reads) and whichever
    callers give up (cancel) before their reply, every waiting caller gets exactly its
    own reply, and each given-up reply is dropped."""

    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        connection = connect_pipelined(valkey_url, connect_timeout_s=2.0)
        await connection.connect()
        try:
            payloads = [b"%d:" % n + b"x" * size for n, (size, _) in enumerate(calls)]
            replies = [connection.send(pack(b"ECHO", p), soon()) for p in payloads]
            for reply, (_, gives_up) in zip(replies, calls, strict=True):
                if gives_up:
                    reply.cancel()
            kept = [p for p, (_, gives_up) in zip(payloads, calls, strict=True) if not gives_up]
            got = [await r for r, (_, up) in zip(replies, calls, strict=True) if not up]
            await connection.send(echo("last"), soon())  # after every reply above
            return kept, got, connection.dropped
        finally:
            await connection.aclose()

    kept, got, dropped = asyncio.run(scenario())
    assert got == kept
    assert dropped == sum(gives_up for _, gives_up in calls)


@pytest.mark.asyncio
async def test_the_database_of_the_url_is_selected(valkey_url: str) -> None:
    key = f"test-pipelined-db-{free_port()}"
    connection = connect_pipelined(f"{valkey_url}/3", connect_timeout_s=2.0)
    try:
        await connection.connect()
        await connection.send(pack(b"SET", key, b"in db 3", b"PX", 60_000), soon())
    finally:
        await connection.aclose()
    with redis.Redis.from_url(f"{valkey_url}/3") as db3, redis.Redis.from_url(valkey_url) as db0:
        assert (db3.get(key), db0.get(key)) == (b"in db 3", None)


@pytest.mark.asyncio
async def test_a_closed_connection_fails_calls_at_once(valkey_url: str) -> None:
    connection = connect_pipelined(valkey_url, connect_timeout_s=2.0)
    await connection.connect()
    await connection.aclose()
    reply = connection.send(echo(1), soon())
    assert reply.done()
    with pytest.raises(ValkeyConnectionError):
        await reply


# -- a private server: paused, full, killed, restarted ----------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ValkeyNode]:
    server = ValkeyNode(tmp_path, free_port())
    server.start()
    try:
        yield server
    finally:
        if server.running:
            os.killpg(server.pid, signal.SIGCONT)
        server.stop()


async def connect_to(node: ValkeyNode, **options: Any) -> PipelinedConnection:
    connection = PipelinedConnection(Address.from_url(node.url), **options)
    await connection.connect()
    return connection


def pause(node: ValkeyNode) -> None:
    os.killpg(node.pid, signal.SIGSTOP)


def resume(node: ValkeyNode) -> None:
    os.killpg(node.pid, signal.SIGCONT)


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_a_late_reply_goes_to_nobody_and_the_connection_stays(node: ValkeyNode) -> None:
    connection = await connect_to(node, silent_s=60.0)  # "next" may go out before "late"'s reply
    try:
        with redis.Redis.from_url(node.url) as admin:
            before = admin.info("stats")["total_connections_received"]
            pause(node)
            try:
                with pytest.raises(TimeoutError):
                    await connection.send(echo("late"), soon(0.05))
            finally:
                resume(node)
            assert await connection.send(echo("next"), soon()) == b"reply-next"
            assert connection.dropped == 1
            assert admin.info("stats")["total_connections_received"] == before
    finally:
        await connection.aclose()


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_past_the_pending_cap_calls_fail_at_once_until_replies_come(
    node: ValkeyNode,
) -> None:
    connection = await connect_to(node, max_pending=4)
    try:
        pause(node)
        try:
            owed = [connection.send(echo(n), soon()) for n in range(4)]
            over = connection.send(echo("over"), soon())
            assert over.done()
            with pytest.raises(TooManyPending):
                await over
        finally:
            resume(node)
        assert [await reply for reply in owed] == [f"reply-{n}".encode() for n in range(4)]
        assert await connection.send(echo("after"), soon()) == b"reply-after"
    finally:
        await connection.aclose()


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_calls_to_a_silent_server_fail_at_once_unsent_until_it_answers(
    node: ValkeyNode,
) -> None:
    connection = await connect_to(node, silent_s=0.05)
    try:
        pause(node)
        try:
            owed = connection.send(echo("owed"), soon(10.0))
            beside = connection.send(echo("beside"), soon(10.0))  # silent for less: sent
            await asyncio.sleep(0.06)
            sent = connection.commands
            silenced = connection.send(echo("silenced"), soon(10.0))
            assert silenced.done()
            with pytest.raises(ServerSilent):
                await silenced
            assert (connection.commands, connection.silenced) == (sent, 1)
        finally:
            resume(node)
        assert (await owed, await beside) == (b"reply-owed", b"reply-beside")
        assert await connection.send(echo("after"), soon()) == b"reply-after"
        assert connection.connects == 1  # the same connection throughout
    finally:
        await connection.aclose()


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_a_stalled_connection_is_given_up_and_made_again(node: ValkeyNode) -> None:
    connection = await connect_to(node, stall_timeout_s=0.05)
    try:
        pause(node)
        try:
            waiting = connection.send(echo("waiting"), soon())
            with pytest.raises(TimeoutError):  # its timer finds the connection stalled
                await connection.send(echo("short"), soon(0.1))
            with pytest.raises(ValkeyConnectionError):
                await waiting
        finally:
            resume(node)
        await connection.connect()
        assert await connection.send(echo("again"), soon()) == b"reply-again"
        assert connection.connects == 2
    finally:
        await connection.aclose()


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_a_killed_server_fails_what_it_owed_and_calls_fail_fast_while_down(
    node: ValkeyNode,
) -> None:
    connection = await connect_to(node, reconnect_interval_s=60.0)
    try:
        pause(node)
        owed = connection.send(echo("owed"), soon())
        await asyncio.sleep(0)  # written before the kill
        node.kill()
        with pytest.raises(ValkeyConnectionError):
            await owed
        attempts = [connection.send(echo(n), soon()) for n in range(100)]
        assert all(reply.done() for reply in attempts)
        for reply in attempts:
            with pytest.raises(ValkeyConnectionError):
                await reply
        assert not connection.connected
    finally:
        await connection.aclose()


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_calls_work_again_once_a_restarted_server_is_back(
    node: ValkeyNode, tmp_path: Path
) -> None:
    connection = await connect_to(node)
    node.kill()
    again = ValkeyNode(tmp_path, node.port)
    try:
        with pytest.raises(ValkeyConnectionError):
            await connection.send(echo("lost"), soon())
        await asyncio.to_thread(again.start)
        with pytest.raises(ValkeyConnectionError):  # down: fails, starts a reconnect
            await connection.send(echo("first"), soon())
        await connection.connect()  # joins the reconnect that call started, if it did
        assert await connection.send(echo("back"), soon()) == b"reply-back"
        assert connection.connects == 2
    finally:
        await connection.aclose()
        again.stop()


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_a_password_logs_in_and_a_wrong_one_does_not_connect(node: ValkeyNode) -> None:
    with redis.Redis.from_url(node.url) as admin:
        admin.config_set("requirepass", "sesame")
    right = connect_pipelined(f"redis://:sesame@127.0.0.1:{node.port}", connect_timeout_s=2.0)
    wrong = connect_pipelined(f"redis://:nope@127.0.0.1:{node.port}", connect_timeout_s=2.0)
    try:
        await right.connect()
        assert await right.send(echo("in"), soon()) == b"reply-in"
        with pytest.raises(ValkeyConnectionError):
            await wrong.connect()
    finally:
        await right.aclose()
        await wrong.aclose()
