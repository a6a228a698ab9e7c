"""Lua scripts on Valkey: read once, called by EVALSHA, loaded on NOSCRIPT.

The SHA is computed locally: no round trip to register. A server that has not seen
a script (fresh, restarted, flushed, or a new Cluster node) answers NOSCRIPT; the
script is then loaded (``SCRIPT LOAD``, which redis-py's Cluster client sends to
every primary) and called once more. Nothing else is retried here.

A burst of NOSCRIPT answers (a fresh server under load) must not become a burst of
SCRIPT LOADs: the callers of one client share a ``loading`` lock, and whoever gets
it after the first finds the script there and loads nothing.

Three ways to call, one script object: ``run`` on a redis-py asyncio client,
``run_sync`` and ``run_pipelined`` on a synchronous one, and ``evalsha`` plus
``reload`` on a ``bidder.adapters.valkey_pipelined`` connection, where the EVALSHA
is sent before anything is awaited.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

from bidder.adapters.valkey_pipelined import PipelinedConnection, pack

Keys = Sequence[str]
Args = Sequence[str | int | bytes]


class LuaScript:
    """One script: its body and SHA1."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.sha = hashlib.sha1(body.encode()).hexdigest()

    @classmethod
    def read(cls, *files: Path) -> LuaScript:
        """The script made of ``files``, in order (shared helpers first)."""
        return cls("\n".join(file.read_text(encoding="utf-8") for file in files))

    async def run(self, client: Any, keys: Keys, args: Args, loading: asyncio.Lock) -> Any:
        """Run through a redis-py asyncio ``Redis`` or ``RedisCluster`` on the node
        owning ``keys`` (all in one slot). ``loading``: one lock per client."""
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            async with loading:
                try:  # another caller may have loaded it while this one waited
                    return await client.evalsha(self.sha, len(keys), *keys, *args)
                except NoScriptError:
                    await client.script_load(self.body)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def run_sync(self, client: Any, keys: Keys, args: Args) -> Any:
        """Run through a synchronous redis-py ``Redis`` or ``RedisCluster``."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.body)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    def run_pipelined(self, client: Any, calls: Sequence[tuple[Keys, Args]]) -> list[Any]:
        """Run every call in one pipeline of a synchronous single-server ``Redis``.

        After a NOSCRIPT the script is loaded and every call sent again, so the calls
        must be idempotent.
        """
        try:
            return self._pipeline(client, calls)
        except NoScriptError:
            client.script_load(self.body)
            return self._pipeline(client, calls)

    def _pipeline(self, client: Any, calls: Sequence[tuple[Keys, Args]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(self.sha, len(keys), *keys, *args)
        result: list[Any] = pipe.execute()
        return result

    def evalsha(self, keys: Keys, args: Args) -> bytes:
        """The EVALSHA command for ``keys`` and ``args``, encoded for a pipelined
        connection."""
        return pack(b"EVALSHA", self.sha, len(keys), *keys, *args)

    async def reload(
        self, connection: PipelinedConnection, until: float, loading: asyncio.Lock
    ) -> None:
        """Load the script on ``connection``'s server after a NOSCRIPT, unless another
        caller holding ``loading`` just did."""
        async with loading:
            exists = await connection.send(pack(b"SCRIPT", b"EXISTS", self.sha), until)
            if not exists[0]:
                await connection.send(pack(b"SCRIPT", b"LOAD", self.body), until)
