"""Cheap band benchmark: what rejecting junk costs next to the full path of a bid.

In-process, no HTTP: the same pure functions the bidder's stages call, with the bundled
campaigns and supply files.

* junk: every request of the bundled sample stream that dies in stages 1-4 (malformed
  body, throttled, consent/COPPA, eligibility, supply chain); its cost is parse + rate
  limit + consent + eligibility + supply check, per request;
* full path: the OpenRTB 2.6 spec's simple banner request, which the bundled campaigns
  bid on; its cost is the cheap band plus pricing and building the BidResponse.

Each round times every junk request once and the banner as many times; the figures are
medians over ``--rounds``. The last line printed is one JSON object;
``cheap_band_ratio`` is the junk median over the full-path median (goal < 0.1).

    .venv/bin/python scripts/bench_cheap_band.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

from bidder.campaigns import load_campaign_file
from bidder.clock import SystemClock
from bidder.consent import ConsentPolicy, evaluate
from bidder.eligibility import CampaignIndex, EligibilityPolicy, select
from bidder.nobid import NoBid
from bidder.openrtb import InvalidRequest, parse_bid_request
from bidder.pipeline import Context, PricedCandidate
from bidder.pricing import base_price
from bidder.ratelimit import RateLimiter, RateLimits
from bidder.replay.stream import read_stream
from bidder.response import NoticeUrls, build_response
from bidder.schain import apply_policy, verify
from bidder.supply_files import DirectorySource, load_files
from bidder.tokens import TokenSigner

ROOT = Path(__file__).resolve().parents[1]
BANNER = ROOT.parent / "shared/external/openrtb/requests/001_iab26_spec-6.2.1-simple-banner.json"
SAMPLE = ROOT / "fixtures/openrtb/sample-stream.jsonl.gz"
CAMPAIGNS = ROOT / "fixtures/openrtb/campaigns.json"
SUPPLY = ROOT / "fixtures/openrtb/supply"


class Band:
    """Stages 1-4 and the rest of the path, built from the bidder's pure functions."""

    def __init__(self) -> None:
        self.index = CampaignIndex(load_campaign_file(CAMPAIGNS))
        self.files, _ = load_files(DirectorySource(SUPPLY).items())
        self.limiter = RateLimiter(RateLimits(), SystemClock())  # no limit: measures the probe
        self.eligibility = EligibilityPolicy()
        self.consent = ConsentPolicy()
        snowflakes, bid_ids = itertools.count(1), itertools.count(1)
        signer = TokenSigner({"bench": b"k" * 32}, "bench")
        self.urls = NoticeUrls(
            "http://127.0.0.1:8080", signer, lambda: next(snowflakes), SystemClock()
        )
        self.next_bid_id = lambda: str(next(bid_ids))

    def cheap(self, body: bytes, ssp: str) -> Context | NoBid:
        try:
            request = parse_bid_request(body)
        except InvalidRequest:
            return NoBid.INVALID
        if not self.limiter.allow(ssp):
            return NoBid.THROTTLED
        privacy = evaluate(request, self.consent)
        if privacy.reason is not None:
            return privacy.reason
        candidates = select(request, self.index, self.eligibility)
        if isinstance(candidates, NoBid):
            return candidates
        verdict = verify(request.schain, request.domain, request.bundle, self.files)
        kept = apply_policy(candidates, verdict)
        if isinstance(kept, NoBid):
            return kept
        return Context(request=request, ssp=ssp, received=0.0, candidates=kept)

    def full(self, body: bytes, ssp: str) -> bytes | NoBid:
        ctx = self.cheap(body, ssp)
        if isinstance(ctx, NoBid):
            return ctx
        for candidate in ctx.candidates:
            price = base_price(candidate)
            if price is not None:
                ctx.priced.append(PricedCandidate(candidate, price))
        if not ctx.priced:
            return NoBid.FLOOR
        return build_response(ctx, "bidsim", self.urls, self.next_bid_id)


def per_request_us(fn: Callable[[bytes, str], object], work: list[tuple[bytes, str]]) -> float:
    start = time.perf_counter_ns()
    for body, ssp in work:
        fn(body, ssp)
    return (time.perf_counter_ns() - start) / len(work) / 1000


def _parse_only(body: bytes, ssp: str) -> object:
    try:
        return parse_bid_request(body)
    except InvalidRequest:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    band = Band()
    junk: list[tuple[bytes, str]] = []
    reasons: Counter[str] = Counter()
    for record in read_stream(SAMPLE):
        outcome = band.cheap(record.body, record.ssp)
        if isinstance(outcome, NoBid):
            junk.append((record.body, record.ssp))
            reasons[outcome.value] += 1
    banner = [(BANNER.read_bytes(), "ssp-alpha")] * len(junk)
    if not isinstance(band.full(*banner[0]), bytes):
        sys.exit("the bundled campaigns no longer bid on the spec's simple banner")
    gc.collect()
    gc.freeze()
    junk_us, full_us, parse_us = [], [], []
    for _ in range(args.rounds):
        junk_us.append(per_request_us(band.cheap, junk))
        full_us.append(per_request_us(band.full, banner))
        parse_us.append(per_request_us(_parse_only, junk))
    junk_median, full_median = statistics.median(junk_us), statistics.median(full_us)
    print(f"junk requests: {len(junk)} of the sample stream; by reason: {dict(reasons)}")
    print(f"cheap band per junk request, rounds (us): {[round(x, 2) for x in junk_us]}")
    print(f"full path per banner bid, rounds (us):   {[round(x, 2) for x in full_us]}")
    result = {
        "junk_requests": len(junk),
        "rounds": args.rounds,
        "cheap_band_junk_us": round(junk_median, 2),
        "junk_parse_only_us": round(statistics.median(parse_us), 2),
        "full_path_bid_us": round(full_median, 2),
        "cheap_band_ratio": round(junk_median / full_median, 3),
    }
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
