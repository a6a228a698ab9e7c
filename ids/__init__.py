"""Fleet-unique ids: Snowflake generator, worker-id leases, cheap per-process bid ids."""

from __future__ import annotations

from ids.bid_ids import bid_id_source
from ids.snowflake import (
    EPOCH_MS,
    ClockMovedBackwards,
    IdsUnavailable,
    LeaseLost,
    Snowflake,
    SnowflakeParts,
    compose,
    decode,
)

__all__ = [
    "EPOCH_MS",
    "ClockMovedBackwards",
    "IdsUnavailable",
    "LeaseLost",
    "Snowflake",
    "SnowflakeParts",
    "bid_id_source",
    "compose",
    "decode",
]
