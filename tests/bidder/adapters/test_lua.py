"""``bidder.adapters.lua.LuaScript`` on the real server: EVALSHA, loaded on NOSCRIPT,
once however many callers meet the NOSCRIPT together."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from bidder.adapters.lua import LuaScript
from bidder.adapters.valkey_pipelined import PipelinedConnection


def echo_script() -> LuaScript:
    """A script no other test has loaded: its key and argument back."""
    return LuaScript(f"-- {secrets.token_hex(8)}\nreturn {{KEYS[1], ARGV[1]}}")


@pytest.fixture
def sync_client(valkey_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(valkey_url) as client:
        yield client


@pytest_asyncio.fixture
async def client(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    async with aioredis.Redis.from_url(valkey_url) as client:
        yield client


def script_loads(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_script|load", {"calls": 0})
    return int(stats["calls"])


@pytest.mark.asyncio
async def test_a_script_runs_after_a_flush(
    client: aioredis.Redis, sync_client: redis.Redis
) -> None:
    script = echo_script()
    assert await script.run(client, ["k"], [1], asyncio.Lock()) == [b"k", b"1"]
    sync_client.script_flush()
    assert await script.run(client, ["k"], [2], asyncio.Lock()) == [b"k", b"2"]


@pytest.mark.asyncio
async def test_callers_meeting_noscript_together_load_the_script_once(
    client: aioredis.Redis, sync_client: redis.Redis
) -> None:
    script, loading = echo_script(), asyncio.Lock()
    before = script_loads(sync_client)
    answers = await asyncio.gather(*(script.run(client, ["k"], [n], loading) for n in range(20)))
    assert answers == [[b"k", str(n).encode()] for n in range(20)]
    assert script_loads(sync_client) == before + 1


@pytest.mark.asyncio
async def test_a_pipelined_connection_reloads_once_after_noscript(
    pipelined: PipelinedConnection, sync_client: redis.Redis
) -> None:
    script, loading = echo_script(), asyncio.Lock()
    with pytest.raises(NoScriptError):
        await pipelined.send(script.evalsha(["k"], ["v"]))
    before = script_loads(sync_client)
    until = asyncio.get_running_loop().time() + 5.0
    await asyncio.gather(*(script.reload(pipelined, until, loading) for _ in range(5)))
    assert script_loads(sync_client) == before + 1
    assert await pipelined.send(script.evalsha(["k"], ["v"])) == [b"k", b"v"]


def test_a_synchronous_client_loads_on_noscript(sync_client: redis.Redis) -> None:
    script = echo_script()
    assert script.run_sync(sync_client, ["k"], ["v"]) == [b"k", b"v"]
    sync_client.script_flush()
    assert script.run_sync(sync_client, ["k"], ["w"]) == [b"k", b"w"]


def test_a_pipeline_of_calls_is_sent_again_after_noscript(sync_client: redis.Redis) -> None:
    script = echo_script()
    calls = [(["a"], [1]), (["b"], [2])]
    assert script.run_pipelined(sync_client, calls) == [[b"a", b"1"], [b"b", b"2"]]
    sync_client.script_flush()
    assert script.run_pipelined(sync_client, calls) == [[b"a", b"1"], [b"b", b"2"]]
