"""Frequency capping on Valkey: pure cap rules, three Lua scripts, a local cache.

Build subjects once per campaign book (``build_subjects``), check all candidates of a
request in one round trip (``FrequencyCapper.check``, or ``begin`` then ``finish``
to send the read before awaiting it), count wins on the notice path
(``FrequencyCapper.count``), release unused reserve-at-bid slots (``release``).
The rules (``fcap.rules``) import no I/O. See docs/fcap.md.
"""

from __future__ import annotations

from fcap.cache import CountCache, NegativeCache
from fcap.capper import FrequencyCapper, PendingCheck, Verdict
from fcap.check_read import CheckResult, Reservation
from fcap.rules import Rule, Subject, build_subjects, subject_for
from fcap.store import CountOutcome, FcapStore, FcapUnavailable, connect

__all__ = [
    "CheckResult",
    "CountCache",
    "CountOutcome",
    "FcapStore",
    "FcapUnavailable",
    "FrequencyCapper",
    "NegativeCache",
    "PendingCheck",
    "Reservation",
    "Rule",
    "Subject",
    "Verdict",
    "build_subjects",
    "connect",
    "subject_for",
]
