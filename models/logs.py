"""Labelled impression logs with a known click response, and win/loss outcomes.

Impressions. The bidstream generator makes the supply
(``bidder.bidstream.generator.day_of_requests``): users from its Zipf audience, each
auction rendered as one SSP's OpenRTB request, arrival hours on its diurnal curve
(every ``_DAY`` auctions make one simulated day). Each request goes through the real
parser and eligibility (``bidder.decide.eligibility.select``) against the campaigns; a
request with candidates becomes one impression of one candidate picked at random
(our "win"), shown to the user whose profile is ``models.synth.synth_profile`` of the
request's user key, and clicked with ``models.synth.click_probability``. The true
probability is logged too, so a model can be compared with the best possible one.

Log file: JSON Lines (gzip when the name ends in .gz), one impression per line,
sorted keys, so the same impressions give the same bytes and the same data hash::

    {"campaign": .., "clicked": 0|1, "creative": .., "imp": "1", "p_true": 0.031,
     "profile": {...}|null, "request": {...}, "ssp": "ssp-alpha", "ts": 1767571224242}

Win outcomes. The replay's exchange model (``bidder.bidstream.auction``) decides wins:
for generated auctions' floors and a spread of our bids (log-uniform, 1x to 6x the
floor; 0.02-3 CPM where there is no floor), ``competing_bid`` draws the best other
bid and the exchange's rule applies (at least the floor, strictly above the other
bid). That is what ``models.win_rate`` learns P(win | bid, floor) from.
"""

from __future__ import annotations

import gzip
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import orjson

from bidder.bidstream.auction import Market, competing_bid
from bidder.bidstream.generator import DEFAULT_DAY_START, day_of_requests, slot_floors
from bidder.core.campaigns import Campaign
from bidder.core.nobid import NoBid
from bidder.decide.eligibility import CampaignIndex, Candidate, EligibilityPolicy, select
from bidder.decide.identity import identify
from bidder.decide.profiles import Profile, profile_from_doc, profile_to_doc
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.openrtb.view import BidRequest
from models.synth import click_probability, synth_profile

_DAY = 4_096
"""Auctions per simulated day."""
_DAY_MS = 86_400_000
DAY_START_MS = int(DEFAULT_DAY_START.timestamp() * 1000)


class LogError(ValueError):
    """A log file is unreadable or does not match the campaigns; names file and line."""


@dataclass(frozen=True, slots=True)
class Impression:
    ts: int
    ssp: str
    doc: dict[str, Any]
    """The request as sent (what the log keeps)."""
    request: BidRequest
    candidate: Candidate
    profile: Profile | None
    clicked: bool
    p_true: float


def impressions(count: int, seed: int, campaigns: Sequence[Campaign]) -> Iterator[Impression]:
    """``count`` labelled impressions, deterministic for (count, seed, campaigns)."""
    if count < 1:
        raise ValueError(f"the impression count must be at least 1 (got {count})")
    index = CampaignIndex(campaigns)
    if not index:
        raise ValueError("no active campaigns to show")
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    made, day = 0, 0
    while made < count:
        for impression in _one_day(index, rng, np_rng, day):
            yield impression
            made += 1
            if made == count:
                return
        day += 1


def _one_day(
    index: CampaignIndex, rng: random.Random, np_rng: np.random.Generator, day: int
) -> Iterator[Impression]:
    policy = EligibilityPolicy()
    day_ms = DAY_START_MS + day * _DAY_MS
    for sent in day_of_requests(rng, np_rng, day_ms, _DAY, day * _DAY):
        ts, ssp, doc = sent.ts_ms, sent.ssp, sent.doc
        try:
            request = parse_bid_request(orjson.dumps(doc))
        except InvalidRequest:
            continue
        found = select(request, index, policy)
        if isinstance(found, NoBid):
            continue
        candidate = rng.choice(found)
        key = identify(request, ssp).user_key
        profile = synth_profile(key, ts) if key is not None else None
        p = click_probability(request, candidate.imp, candidate.creative, profile, ts)
        yield Impression(ts, ssp, doc, request, candidate, profile, rng.random() < p, p)


# ------------------------------------------------------------------------------ log files


def encode(impression: Impression) -> bytes:
    """One log line (with newline); sorted keys, so equal impressions give equal bytes."""
    c = impression.candidate
    line = {
        "ts": impression.ts,
        "ssp": impression.ssp,
        "request": impression.doc,
        "imp": c.imp.id,
        "campaign": c.campaign.id,
        "creative": c.creative.id,
        "profile": profile_to_doc(impression.profile) if impression.profile else None,
        "clicked": int(impression.clicked),
        "p_true": impression.p_true,
    }
    return orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n"


def write_log(path: Path, items: Iterable[Impression]) -> int:
    count = 0
    with _open(path, "wb") as out:
        for impression in items:
            out.write(encode(impression))
            count += 1
    return count


def read_log(path: Path, campaigns: Sequence[Campaign]) -> Iterator[Impression]:
    """Impressions of a log file; raises LogError naming the line of a bad record."""
    by_id = {c.id: c for c in campaigns}
    try:
        with _open(path, "rb") as src:
            for lineno, line in enumerate(src, 1):
                if line.strip():
                    yield _decode(line, by_id, f"{path}:{lineno}")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise LogError(f"{path}: cannot read the log: {exc}") from exc


def _decode(line: bytes, campaigns: dict[str, Campaign], where: str) -> Impression:
    try:
        rec = orjson.loads(line)
        doc = rec["request"]
        request = parse_bid_request(orjson.dumps(doc))
        campaign = campaigns[rec["campaign"]]
        creative = next(c for c in campaign.creatives if c.id == rec["creative"])
        imp = next(i for i in request.imps if i.id == rec["imp"])
        profile = profile_from_doc(rec["profile"]) if rec["profile"] is not None else None
        return Impression(
            ts=int(rec["ts"]),
            ssp=str(rec["ssp"]),
            doc=doc,
            request=request,
            candidate=Candidate(imp, campaign, creative),
            profile=profile,
            clicked=bool(rec["clicked"]),
            p_true=float(rec["p_true"]),
        )
    except KeyError as exc:
        raise LogError(f"{where}: unknown or missing {exc} (log and campaigns disagree?)") from None
    except StopIteration:
        raise LogError(f"{where}: creative or imp id not found") from None
    except (orjson.JSONDecodeError, InvalidRequest, ValueError, TypeError) as exc:
        raise LogError(f"{where}: not a labelled impression: {exc}") from None


def _open(path: Path, mode: str) -> IO[bytes]:
    if path.suffix != ".gz":
        return open(path, mode)
    # mtime 0: the same impressions give the same file bytes.
    return cast(IO[bytes], gzip.GzipFile(path, mode, mtime=0))


# --------------------------------------------------------------------------- win outcomes


@dataclass(frozen=True, slots=True)
class Outcomes:
    bids_micros: np.ndarray
    floors_micros: np.ndarray
    won: np.ndarray
    """1.0 where the bid won."""


def win_outcomes(count: int, seed: int, market: Market | None = None) -> Outcomes:
    """``count`` (bid, floor, won) triples from the replay's exchange model (module doc)."""
    market = market or Market()
    rng = random.Random(seed)
    bids, floors, won = np.empty(count), np.empty(count), np.empty(count)
    for n, floor in enumerate(slot_floors(rng, np.random.default_rng(seed), count)):
        bid = floor * math.exp(rng.uniform(0.0, math.log(6.0))) if floor > 0 else _no_floor_bid(rng)
        other = competing_bid(market, floor, f"win/{seed}/{n}")
        bids[n], floors[n] = round(bid * 1e6), round(floor * 1e6)
        won[n] = 1.0 if bid >= floor and bid > other else 0.0
    return Outcomes(bids, floors, won)


def _no_floor_bid(rng: random.Random) -> float:
    return math.exp(rng.uniform(math.log(0.02), math.log(3.0)))
