"""The Lua scripts: read once, called by EVALSHA, reloaded on NOSCRIPT.

Each script is ``fcap/lua/_lib.lua`` (shared helpers) followed by its own file, so
the window math exists once in Lua. The SHA is computed locally: no round trip to
register. A server that has not seen the script (fresh, restarted, flushed, or a
new Cluster node) answers NOSCRIPT; then ``SCRIPT LOAD`` (on every primary of a
Cluster) and one more EVALSHA. Nothing else is retried here.

Two ways to call: ``Script.__call__`` through a redis-py client, or
``Script.evalsha`` and ``Script.reload`` on a ``bidder.adapters.valkey_pipelined``
connection, where the EVALSHA is sent before anything is awaited (``FcapStore``).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

from bidder.adapters.valkey_pipelined import PipelinedConnection, pack

_LUA = Path(__file__).parent / "lua"


class Script:
    def __init__(self, name: str) -> None:
        self.name = name
        self.body = (_LUA / "_lib.lua").read_text() + "\n" + (_LUA / f"{name}.lua").read_text()
        self.sha = hashlib.sha1(self.body.encode()).hexdigest()

    async def __call__(
        self, client: Any, keys: Sequence[str], args: Sequence[str | int], loading: asyncio.Lock
    ) -> Any:
        """Run on the node owning ``keys`` (all in one slot).

        ``loading`` serializes the reloads of one client: a burst of NOSCRIPT answers
        (a fresh server under load) must not become a burst of SCRIPT LOADs, which
        redis-py fans out to every Cluster primary.
        """
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            async with loading:
                await client.script_load(self.body)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def evalsha(self, keys: Sequence[str], args: Sequence[str | int]) -> bytes:
        """The EVALSHA command for ``keys`` and ``args``, encoded."""
        return pack(b"EVALSHA", self.sha, len(keys), *keys, *args)

    async def reload(
        self, connection: PipelinedConnection, until: float, loading: asyncio.Lock
    ) -> None:
        """SCRIPT LOAD on ``connection``'s server, after a NOSCRIPT (serialized by
        ``loading`` as in ``__call__``)."""
        async with loading:
            await connection.send(pack(b"SCRIPT", b"LOAD", self.body), until)


CHECK = Script("check")
COUNT = Script("count")
RELEASE = Script("release")
ALL = (CHECK, COUNT, RELEASE)
