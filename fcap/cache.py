"""A bounded per-process negative cache: who is capped for what, and until when.

A capped answer from the store comes with the instant the subject stops being
capped: the end of the fixed bucket, the moment the oldest counted sub-bucket of a
rolling window leaves it, the end of a recency gap. Counts can only grow until then
(other processes add, never subtract, except a reserve-at-bid release), so until that
instant the bidder can say "capped" without a round trip. Bounded: least recently
used entries go first. Times are the caller's clock (epoch ms), like the store's.

``CountCache`` is the count cache of cap classes that tolerate stale counts
(``FrequencyCapper.fresh``): "read under its caps with room for N more, and that read
may stand until T for up to N of this worker's own bids".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

DEFAULT_MAX_ENTRIES = 100_000


class NegativeCache:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._until: OrderedDict[Hashable, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def capped(self, key: Hashable, now_ms: int) -> bool:
        until = self._until.get(key)
        if until is None:
            return False
        if now_ms >= until:
            del self._until[key]
            return False
        self._until.move_to_end(key)
        return True

    def put(self, key: Hashable, until_ms: int) -> None:
        self._until[key] = max(until_ms, self._until.get(key, 0))
        self._until.move_to_end(key)
        while len(self._until) > self.max_entries:
            self._until.popitem(last=False)

    def forget(self, key: Hashable) -> None:
        self._until.pop(key, None)


class CountCache:
    """Per (person, subject): until when a read that found it under its caps stands in
    for a new one, and how many of this worker's bids it still allows (the headroom the
    read found, less the bids made on it since). Bounded, least recently used first."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, list[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def passes(self, key: Hashable, now_ms: int) -> bool:
        """A read stands for ``key`` at ``now_ms`` and still allows a bid."""
        entry = self._live(key, now_ms)
        return entry is not None and entry[1] > 0

    def spent(self, key: Hashable, now_ms: int) -> bool:
        """A read stands for ``key`` at ``now_ms`` but its room is used up: read again."""
        entry = self._live(key, now_ms)
        return entry is not None and entry[1] <= 0

    def _live(self, key: Hashable, now_ms: int) -> list[int] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now_ms >= entry[0]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: Hashable, until_ms: int, room: int) -> None:
        self._entries[key] = [until_ms, room]
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def spend(self, key: Hashable) -> None:
        """One bid of this worker made on the read."""
        entry = self._entries.get(key)
        if entry is not None:
            entry[1] -= 1
