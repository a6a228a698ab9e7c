"""Routed debits: a billed impression is charged to the lease of the node that bid.

Theory of operation. A node admits a bid only while its own lease account covers one
impression at the maximum bid (``pacing.node``), so its spend stays within its lease
only if the notices of *its* bids are debited to *its* account. Notices reach any
worker, so the worker that bills an impression reads the bidder's Snowflake worker
id from the bid id (``ids.snowflake.decode``): its own id, it debits its own account;
another's, it adds the cost to that worker's debits hash in Valkey (``send``), and
the bidder takes them on its next lease refresh (``take``: read and clear, one
script) and debits them to its current leases. A debit that cannot be sent, or whose
bidder has left, is charged to the sender's lease instead: some account of the fleet
always pays it.

A worker that shuts down takes its debits one last time before it returns its leases
(``take(leaving=True)``), so its remainders count them, and sets its ``gone`` marker in
the same script; from then on senders pay the debits of its bids themselves, as the
lease return's soundness needs (``pacing.lease``). The next holder of that worker id
clears the marker on its first take.

Keys: ``<prefix>:{worker:<id>}:debits``, hash, campaign id -> micros owed, living
``DEBITS_TTL_MS`` after its last write, and ``<prefix>:{worker:<id>}:gone`` (the
marker, as long). A bid made under an older lease is charged to the current one, as
a local debit is: conservative.

The bound this keeps: a node's spend from a lease is at most its amount plus what its
bids in flight and its debits not taken yet add (at most one refresh interval of its
wins), instead of whatever the other nodes' bids cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bidder.adapters.lua import LuaScript
from pacing.lease_store import PREFIX

DEBITS_TTL_MS = 60_000
_LUA = Path(__file__).with_name("lua")
TAKE_DEBITS = LuaScript.read(_LUA / "take_debits.lua")
SEND_DEBIT = LuaScript.read(_LUA / "send_debit.lua")


def debits_keys(worker: int, prefix: str = PREFIX) -> list[str]:
    """The worker's debits hash and its gone marker (one hash tag)."""
    return [f"{prefix}:{{worker:{worker}}}:debits", f"{prefix}:{{worker:{worker}}}:gone"]


def decode_debits(raw: list[Any]) -> dict[str, int]:
    """The flat HGETALL answer of a debits hash, as campaign id -> micros."""
    texts = [item.decode() if isinstance(item, bytes) else str(item) for item in raw]
    return {texts[i]: int(texts[i + 1]) for i in range(0, len(texts) - 1, 2)}


class DebitOutbox:
    """The billing worker's side: charge another worker's lease."""

    def __init__(self, client: Any, prefix: str = PREFIX) -> None:
        """``client``: a ``redis.asyncio.Redis`` (or ``RedisCluster``)."""
        self._client = client
        self._prefix = prefix
        self._loading = asyncio.Lock()

    async def send(self, worker: int, campaign_id: str, micros: int) -> bool:
        """Charge ``worker``'s lease; False when it has left (the caller pays)."""
        keys = debits_keys(worker, self._prefix)
        args: list[str | int] = [campaign_id, micros, DEBITS_TTL_MS]
        return bool(await SEND_DEBIT.run(self._client, keys, args, self._loading))


class DebitInbox:
    """The bidding worker's side: what the other workers charged to its leases."""

    def __init__(self, client: Any, worker: Callable[[], int | None], prefix: str = PREFIX) -> None:
        """``worker``: this process's Snowflake worker id now (None while it holds none)."""
        self._client = client
        self._worker = worker
        self._prefix = prefix
        self._loading = asyncio.Lock()

    async def take(self, leaving: bool = False) -> Mapping[str, int]:
        """What is owed, cleared in Valkey; ``leaving``: the last take before the worker
        returns its leases, after which senders pay for its bids themselves."""
        worker = self._worker()
        if worker is None:
            return {}
        keys = debits_keys(worker, self._prefix)
        args = [DEBITS_TTL_MS if leaving else 0]
        return decode_debits(await TAKE_DEBITS.run(self._client, keys, args, self._loading))
