"""The check's read: one HMGET, sent the short way through the client's own pool.

A read-only check (no reserve-at-bid subject on the side) is one HMGET of one hash:
atomic on its own, so it needs no script. ``Redis.execute_command`` costs a good
part of a round trip in Python for things this read does not need: packing every
argument again, the retry wrapper, response callbacks (HMGET has none), redis-py's
own operation metrics. ``Reader.hmget`` takes a connection from the same client's
pool, sends the command with the field names already packed (``plan.Period.packed``),
reads the answer with the same parser, and gives the connection back: the same
connections, timeouts, error mapping and reconnects as any command of that client.

On a failure or cancellation mid-command (a socket timeout; the store's own check
timeout does not cancel, ``bidder.valkey_wait``), redis-py's connection drops
itself (``send_packed_command`` / ``read_response`` disconnect on any exception but
an error reply), so a connection never goes back to the pool with an answer
pending. Cluster clients and single-connection clients go the usual way
(``execute_command``): a Cluster routes the key to its node itself (to a replica of
the slot when the client was built with replica reads: ``fcap.connect``).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis


class Reader:
    def __init__(self, client: Any, *, lean: bool = True) -> None:
        """``lean=False``: every read through ``execute_command`` (a reference)."""
        self._client = client
        lean = lean and isinstance(client, Redis) and not client.single_connection_client
        self._pool = client.connection_pool if lean else None
        self._encode = self._pool.get_encoder().encode if self._pool is not None else None

    async def hmget(self, key: str, fields: tuple[str, ...], packed: bytes) -> list[Any]:
        """The values of ``fields`` (``packed``: the same as RESP bulk strings) of the
        hash ``key``, None for each absent one. Raises what the client raises."""
        pool = self._pool
        if pool is None or self._encode is None:
            values: list[Any] = await self._client.execute_command("HMGET", key, *fields)
            return values
        name = self._encode(key)
        command = b"*%d\r\n$5\r\nHMGET\r\n$%d\r\n%s\r\n%s" % (
            len(fields) + 2, len(name), name, packed
        )  # fmt: skip
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(command)
            answer: list[Any] = await connection.read_response()
            return answer
        finally:
            await pool.release(connection)
