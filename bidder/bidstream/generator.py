"""``bidsim gen``: a realistic, reproducible bidstream (model in docs/bidstream.md).

The stream is one simulated day of supply compressed into ``requests / mean_rate``
seconds of send time. Generation runs in three steps:

1. plan: the sequence of auction events, each a single request, a duplicate group
   (one auction sent through 2-3 SSPs within a few ms, sharing ``source.tid``) or a
   malformed body; group sizes add up to exactly ``requests``;
2. vectorized draws: an arrival instant per event on the diurnal curve and a user
   per event from the Zipf audience (numpy);
3. per event, the SSP-independent auction (``_draw``) rendered once per SSP
   (``_render``), encoded, and released in ``t_ms`` order through a small heap (copies
   lag their event by at most a few ms), so memory stays flat for any stream length.

Determinism: one ``random.Random(seed)`` and one ``numpy.random.default_rng(seed)``,
drawn in a fixed order; no wall clock, no salted ``hash()``, no set iteration; the
stream writer sorts keys and fixes the gzip header. Same arguments, same bytes.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bidder.bidstream import inventory as inv
from bidder.bidstream._diurnal import day_fractions
from bidder.bidstream._draw import Auction, draw_auction
from bidder.bidstream._malformed import KINDS as MALFORMED_KINDS
from bidder.bidstream._malformed import malformed_body
from bidder.bidstream._render import render, without_ids
from bidder.bidstream.population import POPULATION, User, population
from bidder.bidstream.stream import encode_record, write_stream
from bidder.bidstream.summary import GenSummary, Tally

DEFAULT_DAY_START = datetime(2026, 1, 5, tzinfo=UTC)
MALFORMED_SHARE = 0.02
"""Share of auction events sent as a malformed body (about 1.9% of requests)."""
DUPLICATE_SHARE = 0.05
"""Default share of auction events sent through several SSPs (``duplicate_share``)."""
DUPLICATE_SIZES: inv.Weighted[int] = inv.Weighted([(2, 70.0), (3, 30.0)])
MAX_DUPLICATE_LAG_MS = 4
_DAY_MS = 86_400_000
_MALFORMED = -1


def generate(
    out: Path,
    requests: int,
    seed: int,
    mean_rate: float = 400.0,
    day_start: datetime = DEFAULT_DAY_START,
    ssp_boost: Mapping[str, float] | None = None,
    heavy_users: int = 0,
    heavy_share: float = 0.0,
    duplicate_share: float = DUPLICATE_SHARE,
    multi_id: bool = False,
    anonymous_share: float = 0.0,
) -> GenSummary:
    """Write a ``requests``-line bidstream to ``out`` and describe it.

    ``duplicate_share``: the share of auction events sent through 2-3 SSPs (sharing
    ``source.tid``); at most ``1 - MALFORMED_SHARE``. The default keeps the bytes of
    streams generated before the option existed.

    ``heavy_users`` / ``heavy_share``: a share of the auction events comes from the N
    most active users, evenly (``heavy_users=10, heavy_share=0.3``: ten users send
    about 30% of the stream), so frequency caps bite within a short replay.

    ``ssp_boost`` multiplies SSPs' weights (``{"ssp-delta": 10}``: delta sends 10x its
    usual share). ``requests`` and ``mean_rate`` stay totals, so to keep the other SSPs'
    rates unchanged scale both by ``boost_scale(ssp_boost)``.

    ``multi_id``: people use 1-3 devices or browsers, each with its own ids
    (``Population.faces``); each auction comes from one of them at random. Off, every
    person has one face and the stream's bytes are those of streams made without it.

    ``anonymous_share``: about that share of faces (a fixed draw per face, so the
    same ones in every stream) send requests without any id, only their household's
    IP (``Population``); 0 keeps the bytes of streams made without the option.
    """
    _check_args(requests, seed, mean_rate, day_start)
    _check_heavy(heavy_users, heavy_share)
    _check_duplicate_share(duplicate_share)
    if not 0.0 <= anonymous_share <= 1.0:
        raise ValueError(f"anonymous_share must be 0-1 (got {anonymous_share})")
    shares = _boosted(ssp_boost or {})
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    plan = _plan(rng, requests, duplicate_share)
    fractions = day_fractions(np_rng, len(plan))
    users = population().sample(np_rng, len(plan))
    users = population().with_heavy_users(np_rng, users, heavy_users, heavy_share)
    faces = np_rng.random(len(plan)).tolist() if multi_id else [0.0] * len(plan)
    span_s = requests / mean_rate
    tally = Tally()
    emit = _Emitter(rng, int(day_start.timestamp() * 1000), tally, shares, anonymous_share)
    events = _events(plan, fractions, list(zip(users, faces, strict=True)), span_s, emit)
    write_stream(out, _in_time_order(events))
    return tally.summary(requests, len(plan), seed, span_s)


@dataclass(frozen=True, slots=True)
class SentRequest:
    """One auction as one SSP sent it: when, through whom, and the OpenRTB request."""

    ts_ms: int
    ssp: str
    doc: dict[str, Any]


def day_of_requests(
    rng: random.Random, np_rng: np.random.Generator, start_ms: int, count: int, first: int
) -> Iterator[SentRequest]:
    """``count`` auctions over the simulated day from ``start_ms``, in draw order (not
    time order), each rendered as the request of one SSP picked by its share, with the
    inventory's base floors; request numbers start at ``first``. No duplicates and no
    malformed bodies. Lazy: each auction is drawn when asked for, so a caller drawing
    from ``rng`` between auctions gets the same sequence every time."""
    pop = population()
    fractions = day_fractions(np_rng, count).tolist()
    users = pop.sample(np_rng, count)
    for n, (fraction, user) in enumerate(zip(fractions, users, strict=True)):
        ts = start_ms + int(fraction * _DAY_MS)
        auction = draw_auction(rng, pop.user(user))
        ssp = inv.SSP_SHARE.pick(rng)
        doc = render(auction, ssp, rng, ts, first + n, start_ms // 100, own_floor=False)
        yield SentRequest(ts, ssp.name, doc)


def slot_floors(rng: random.Random, np_rng: np.random.Generator, count: int) -> Iterator[float]:
    """The base floor (CPM, 0 for none) of one slot picked at random in each of
    ``count`` auctions drawn for users of the audience; lazy like ``day_of_requests``."""
    pop = population()
    for user in pop.sample(np_rng, count):
        yield rng.choice(draw_auction(rng, pop.user(user)).imps).floor


def _check_args(requests: int, seed: int, mean_rate: float, day_start: datetime) -> None:
    problems = []
    if requests < 1:
        problems.append(f"requests must be at least 1 (got {requests})")
    if seed < 0:
        problems.append(f"seed must be non-negative (got {seed})")
    if not mean_rate > 0:
        problems.append(f"mean_rate must be positive (got {mean_rate})")
    if day_start.tzinfo is None:
        problems.append("day_start must be timezone-aware (UTC)")
    if problems:
        raise ValueError("; ".join(problems))


def _check_heavy(heavy_users: int, heavy_share: float) -> None:
    problems = []
    if not 0 <= heavy_users <= POPULATION:
        problems.append(f"heavy_users must be 0-{POPULATION} (got {heavy_users})")
    if not 0.0 <= heavy_share <= 1.0:
        problems.append(f"heavy_share must be 0-1 (got {heavy_share})")
    elif heavy_share > 0 and heavy_users == 0:
        problems.append("heavy_share needs heavy_users of at least 1")
    if problems:
        raise ValueError("; ".join(problems))


def _check_duplicate_share(share: float) -> None:
    if not 0.0 <= share <= 1.0 - MALFORMED_SHARE:
        raise ValueError(f"duplicate_share must be 0-{1.0 - MALFORMED_SHARE:g} (got {share})")


def parse_ssp_boost(specs: Sequence[str]) -> dict[str, float]:
    """``["ssp-delta=10"]`` -> ``{"ssp-delta": 10.0}``; raises ValueError naming each problem."""
    names = {ssp.name for ssp in inv.SSPS}
    boost: dict[str, float] = {}
    problems = []
    for spec in specs:
        name, _, factor = spec.partition("=")
        try:
            value = float(factor)
        except ValueError:
            value = -1.0
        if name not in names:
            problems.append(f"{spec!r}: unknown SSP (one of {', '.join(sorted(names))})")
        elif not 0 < value < 1000:
            problems.append(f"{spec!r}: expected SSP=FACTOR with 0 < FACTOR < 1000")
        else:
            boost[name] = value
    if problems:
        raise ValueError("; ".join(problems))
    return boost


def boost_scale(ssp_boost: Mapping[str, float]) -> float:
    """Total traffic with ``ssp_boost`` over total without it (valid requests)."""
    weights = dict(zip(inv.SSP_SHARE.values, inv.SSP_SHARE.shares(), strict=True))
    return sum(share * ssp_boost.get(ssp.name, 1.0) for ssp, share in weights.items())


class _Shares:
    """The SSP weights of one run: normal and malformed traffic."""

    def __init__(self, valid: inv.Weighted[inv.Ssp], malformed: inv.Weighted[inv.Ssp]) -> None:
        self.valid, self.malformed = valid, malformed


def _boosted(ssp_boost: Mapping[str, float]) -> _Shares:
    if not ssp_boost:
        return _Shares(inv.SSP_SHARE, inv.MALFORMED_SSP_SHARE)
    return _Shares(_scale(inv.SSP_SHARE, ssp_boost), _scale(inv.MALFORMED_SSP_SHARE, ssp_boost))


def _scale(weighted: inv.Weighted[inv.Ssp], boost: Mapping[str, float]) -> inv.Weighted[inv.Ssp]:
    pairs = zip(weighted.values, weighted.shares(), strict=True)
    return inv.Weighted([(ssp, share * boost.get(ssp.name, 1.0)) for ssp, share in pairs])


def _plan(rng: random.Random, requests: int, duplicate_share: float) -> list[int]:
    """Event sizes (``_MALFORMED`` counts one request) adding up to ``requests``."""
    plan: list[int] = []
    left = requests
    while left > 0:
        draw = rng.random()
        if draw < MALFORMED_SHARE:
            size = _MALFORMED
        elif draw < MALFORMED_SHARE + duplicate_share:
            size = min(DUPLICATE_SIZES.pick(rng), left)
        else:
            size = 1
        plan.append(size)
        left -= abs(size)
    return plan


Line = tuple[int, int, bytes]
"""(t_ms, order, encoded line): heap entries; ``order`` breaks ties deterministically."""


def _events(
    plan: list[int],
    fractions: np.ndarray,
    users: list[tuple[int, float]],
    span_s: float,
    emit: _Emitter,
) -> Iterator[list[Line]]:
    """Per event (in arrival order), its encoded lines; ``users``: (person, face draw)."""
    pop = population()
    for size, fraction, (user, face) in zip(plan, fractions.tolist(), users, strict=True):
        t_ms, ts = int(fraction * span_s * 1000), emit.day_ms + int(fraction * _DAY_MS)
        yield emit.event(size, pop.face_of(user, face), t_ms, ts)


class _Emitter:
    """Turns auction events into encoded lines; holds the run's rng, day and tally."""

    def __init__(
        self,
        rng: random.Random,
        day_ms: int,
        tally: Tally,
        shares: _Shares,
        anonymous_share: float = 0.0,
    ) -> None:
        self.rng, self.day_ms, self.tally, self.shares = rng, day_ms, tally, shares
        self.anonymous_share = anonymous_share
        self.day_ds = day_ms // 100
        self.order = 0
        """Lines made so far: a tie-breaker, and ssp-delta's request sequence number."""

    def event(self, size: int, user: User, t_ms: int, ts: int) -> list[Line]:
        auction = draw_auction(self.rng, user)
        if size == _MALFORMED:
            lines = [self._malformed(auction, t_ms, ts)]
        else:
            ssps = _pick_ssps(self.rng, size, self.shares.valid)
            lines = [self._request(auction, ssp, n, t_ms, ts) for n, ssp in enumerate(ssps)]
        self.order += len(lines)
        return lines

    def _request(self, a: Auction, ssp: inv.Ssp, copy: int, t_ms: int, ts: int) -> Line:
        # Copies of a duplicated auction reach us 1-4 ms after the first SSP's request.
        lag = self.rng.randint(1, MAX_DUPLICATE_LAG_MS) if copy else 0
        order = self.order + copy
        doc = render(a, ssp, self.rng, ts + lag, order, self.day_ds, own_floor=copy > 0)
        if a.user.anonymous_draw < self.anonymous_share:
            doc = without_ids(doc)
        self.tally.request(a, ssp, doc, t_ms + lag, copy)
        return (t_ms + lag, order, encode_record(t_ms + lag, ts + lag, ssp.name, request=doc))

    def _malformed(self, a: Auction, t_ms: int, ts: int) -> Line:
        ssp = self.shares.malformed.pick(self.rng)
        kind = MALFORMED_KINDS.pick(self.rng)
        doc = render(a, ssp, self.rng, ts, self.order, self.day_ds, own_floor=False)
        body = malformed_body(kind, doc, self.rng)
        self.tally.malformed(ssp, kind, t_ms)
        return (t_ms, self.order, encode_record(t_ms, ts, ssp.name, raw=body))


def _pick_ssps(rng: random.Random, count: int, share: inv.Weighted[inv.Ssp]) -> list[inv.Ssp]:
    """``count`` distinct SSPs, weighted by their share of supply."""
    chosen: list[inv.Ssp] = []
    while len(chosen) < count:
        ssp = share.pick(rng)
        if ssp not in chosen:
            chosen.append(ssp)
    return chosen


def _in_time_order(events: Iterator[list[Line]]) -> Iterator[bytes]:
    """Lines sorted by ``t_ms``: an event's lines are never earlier than the event."""
    pending: list[Line] = []
    for lines in events:
        start = lines[0][0]
        while pending and pending[0][0] <= start:
            yield heapq.heappop(pending)[2]
        for line in lines:
            heapq.heappush(pending, line)
    while pending:
        yield heapq.heappop(pending)[2]
