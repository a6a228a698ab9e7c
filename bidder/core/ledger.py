"""The ledger entry: one billable impression, the unit of the spend stream.

The notice path writes one entry per billed impression (the first valid win or
billing notice of that impression; later ones are duplicates, not spend). The
reconciler applies entries to spend totals exactly once, keyed by ``ledger_id``
(a Snowflake id). Encoded as one compact JSON object per Kinesis record, with the
campaign id as partition key so one campaign's entries stay in order per shard.

Money: the exchange clears at a CPM (``price_cpm_micros``); one impression costs
a thousandth of that. ``cost_micros`` rounds that thousandth *up*, so the sum of
entries never understates what was spent (at most 1 micro per impression high).

``caps_unchecked`` carries the notice token's mark (``bidder.core.tokens``): the bid
was made without a frequency-cap check, so the impression is over-cap risk that
audits count rather than infer. Entries that leave it out have it false.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import orjson

KINDS = ("win", "bill")
_FIELDS = (
    "ledger_id", "kind", "campaign_id", "advertiser", "creative_id", "imp_id",
    "bid_id", "price_cpm_micros", "cost_micros", "node", "ts_ms", "caps_unchecked",
)  # fmt: skip
_OPTIONAL = {"caps_unchecked": False}


class LedgerFormatError(ValueError):
    """A record is not a ledger entry; the message says which field."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    ledger_id: int
    """Snowflake id: unique, time-ordered per node."""
    kind: str
    """Which notice billed it: 'win' (nurl) or 'bill' (burl)."""
    campaign_id: str
    advertiser: str
    creative_id: str
    imp_id: str
    bid_id: str
    """The bid's token id (unique per bid across the fleet)."""
    price_cpm_micros: int
    cost_micros: int
    node: int
    """Snowflake worker id of the process that billed it."""
    ts_ms: int
    """Epoch milliseconds when the notice was accepted."""
    caps_unchecked: bool = False
    """The bid was made without a frequency-cap check (fail-open)."""

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))


def cost_of(price_cpm_micros: int) -> int:
    """Cost of one impression in micros: the CPM's thousandth, rounded up."""
    return -(-price_cpm_micros // 1000)


def decode_entry(data: bytes) -> LedgerEntry:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise LedgerFormatError("not JSON") from None
    if not isinstance(doc, dict) or not set(_FIELDS) - set(_OPTIONAL) <= set(doc) <= set(_FIELDS):
        raise LedgerFormatError(f"fields must be exactly {', '.join(_FIELDS)}")
    return LedgerEntry(**{**_OPTIONAL, **{name: _field(doc, name) for name in doc}})


def _field(doc: dict[str, Any], name: str) -> Any:
    value = doc[name]
    if name in _OPTIONAL:
        if type(value) is not bool:
            raise LedgerFormatError(f"{name}: bad value {value!r}")
        return value
    want_int = name in ("ledger_id", "price_cpm_micros", "cost_micros", "node", "ts_ms")
    ok = (type(value) is int and value >= 0) if want_int else isinstance(value, str)
    if not ok or (name == "kind" and value not in KINDS):
        raise LedgerFormatError(f"{name}: bad value {value!r}")
    return value
