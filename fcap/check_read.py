"""A cap check's read, apart from the I/O: the commands a check sends, the check while
its replies are owed, and the decision made from the values read (``fcap.plan``).

``fcap.store`` sends and awaits; what is here is pure.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from fcap import keys, scripts
from fcap.plan import RESERVED, Period, Plan, decide, room
from fcap.rules import Subject


@dataclass(slots=True)
class Reservation:
    """A slot taken by a reserve-at-bid check; release it if the bid is not won."""

    subject: Subject
    at_ms: int
    sides: tuple[tuple[str, str], ...]
    """(keys.USER or keys.HOUSEHOLD, user or household key) of each side reserved."""
    released: bool = False


@dataclass(frozen=True, slots=True)
class CheckResult:
    capped: dict[Subject, int]
    """Capped subjects and the instant (caller ms) until which each stays capped."""
    unknown: frozenset[Subject]
    """Subjects with caps on a side whose key the request lacks (no user/household key)."""
    reservations: dict[Subject, Reservation] = field(default_factory=dict)
    room: dict[Subject, int] = field(default_factory=dict)
    """Subjects of classes that tolerate stale counts (``fcap.plan.room``): how many
    more impressions their caps allowed, by this read."""


# Not frozen: one is made for every cap read, and a frozen dataclass's __init__ sets
# each field through object.__setattr__ (about 1.2 µs for these fields, against 0.26).
@dataclass(slots=True)
class SentCheck:
    """A check begun (``FcapStore.begin``): its plan and, on the auto-pipelined
    connection, the commands already sent and their replies to come."""

    plan: Plan
    keyed: list[str | None]
    """Each side's user or household key, in the plan's order of sides."""
    periods: list[Period]
    now_ms: int
    limit: float
    """When the replies are due, on the loop's clock."""
    commands: list[bytes] | None = None
    """Sent on the auto-pipelined connection; None: the check is read through the client."""
    replies: list[asyncio.Future[Any]] = field(default_factory=list)
    result: CheckResult | None = None
    """Known without a read: no side had a key to read."""


def command(kind: str, key: str | None, period: Period, now_ms: int) -> bytes:
    """One side's read, encoded: EVALSHA check.lua, or HMGET with the plan's
    pre-encoded field names after a header built here."""
    hash_key = keys.counters(kind, key or "")
    if period.requests:
        return scripts.CHECK.evalsha((hash_key,), (now_ms, period.requests, *period.fields))
    name = hash_key.encode()
    return b"*%d\r\n$5\r\nHMGET\r\n$%d\r\n%s\r\n%s" % (
        len(period.fields) + 2, len(name), name, period.packed
    )  # fmt: skip


def decided(sent: SentCheck, answers: list[Any]) -> tuple[CheckResult, list[Reservation]]:
    """The check's result from its sides' answers, and the slots to give back: those
    reserved on one side of a subject the other side capped."""
    capped: dict[Subject, int] = {}
    taken: dict[Subject, list[tuple[str, str]]] = {}
    rooms: dict[Subject, int] = {}
    now_ms = sent.now_ms
    for side, key, period, answer in zip(
        sent.plan.sides, sent.keyed, sent.periods, answers, strict=True
    ):
        for subject, until in decide(period, answer, now_ms):
            if until == RESERVED:
                if key:
                    taken.setdefault(subject, []).append((side.kind, key))
            else:
                capped[subject] = max(until, capped.get(subject, 0))
        if period.stale:
            for subject, left in room(period, answer).items():
                rooms[subject] = min(left, rooms.get(subject, left))
    unknown = sent.plan.unknown
    if not taken:
        return CheckResult(capped, unknown, room=rooms), []
    reservations = {s: Reservation(s, now_ms, tuple(sides_)) for s, sides_ in taken.items()}
    given_back = [reservations.pop(s) for s in list(reservations) if s in capped]
    return CheckResult(capped, unknown, reservations, rooms), given_back
