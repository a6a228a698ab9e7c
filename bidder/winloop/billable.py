"""What billing takes and what it answers: a verified notice to bill, and the outcome.

``Billable`` is all billing needs of a notice, now or after a replay; its bytes are
the deferred journal's record (``bidder.winloop.deferred``). A ``BillingOutcome``'s
value is the ``outcome`` label of the notice and deferred-replay counters.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass

import orjson

from bidder.core.tokens import NoticeClaims

_VERSION = 1
_CLAIM_FIELDS = frozenset(NoticeClaims.__dataclass_fields__)
_DEFAULTED_CLAIMS = frozenset({"caps_unchecked"})
"""Claims a journal line may leave out (their default applies)."""


class BillingOutcome(enum.Enum):
    """What became of a notice. The value is the metric label."""

    BILLED = "billed"
    DUPLICATE = "duplicate"
    """The impression was billed already (by this notice's other kind, or a retry)."""
    DEFERRED = "deferred"
    """Journaled, to be billed exactly once later (answered 202)."""
    BILLED_LATE = "billed_late"
    """A journaled notice billed after its dedup horizon (logged: see ``Biller.replay``)."""
    REJOURNALED = "rejournaled"
    """A journaled notice written again with the ledger id it lacked."""
    UNAVAILABLE = "unavailable"
    """Neither billed nor journaled (``BillingUnavailable``, a 503): never returned, only
    counted."""


class JournalFormatError(ValueError):
    """A journal record is unreadable; the message says why."""


@dataclass(frozen=True, slots=True)
class Billable:
    """A verified notice to bill: all that billing needs, now or after a replay."""

    claims: NoticeClaims
    kind: str
    price_cpm_micros: int
    accepted_ms: int
    """When the notice was verified and accepted: the ledger entry's ``ts_ms``."""
    ledger_id: int | None = None
    """The ledger id the first attempt took, if it got one."""

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "v": _VERSION,
                "kind": self.kind,
                "price": self.price_cpm_micros,
                "accepted_ms": self.accepted_ms,
                "ledger_id": self.ledger_id,
                "claims": asdict(self.claims),
            }
        )


def decode_billable(data: bytes) -> Billable:
    try:
        doc = orjson.loads(data)
        claims = doc["claims"]
        if doc["v"] != _VERSION or set(claims) | _DEFAULTED_CLAIMS != _CLAIM_FIELDS:
            raise JournalFormatError("unknown version or claim fields")
        billable = Billable(
            NoticeClaims(**claims), doc["kind"], doc["price"], doc["accepted_ms"], doc["ledger_id"]
        )
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise JournalFormatError(f"not a deferred notice: {exc!r}") from None
    if billable.kind not in ("win", "bill") or type(billable.price_cpm_micros) is not int:
        raise JournalFormatError(f"bad kind or price in {billable!r}")
    return billable
