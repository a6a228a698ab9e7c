"""``Bid.id``: unique within a response (the design asks no more), as cheap as possible.

A per-process counter rendered as text: unique within the process, so unique within
any response it builds, and readable in logs. Fleet-wide identity of a bid is the
Snowflake id inside its signed notice token, not this.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable


def bid_id_source(start: int = 1) -> Callable[[], str]:
    """A callable returning "1", "2", ... on successive calls."""
    return map(str, itertools.count(start)).__next__
