"""A bounded per-process negative cache: who is capped for what, and until when.

A capped answer from the store comes with the instant the subject stops being
capped: the end of the fixed bucket, the moment the oldest counted sub-bucket of a
rolling window leaves it, the end of a recency gap. Counts can only grow until then
(other processes add, never subtract, except a reserve-at-bid release), so until that
instant the bidder can say "capped" without a round trip. Bounded: least recently
used entries go first. Times are the caller's clock (epoch ms), like the store's.

The same structure, a key held until an instant, is the count cache of cap classes
that tolerate stale counts (``FrequencyCapper.fresh``: "read under its caps, and
that read may stand until T").
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
