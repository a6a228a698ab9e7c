"""Benchmark stage 9, the BidResponse; prints one JSON line last.

    .venv/bin/python scripts/bench_respond.py [--rounds 20000]

The banner workload of ``scripts/bench_score.py`` (the OpenRTB 2.6 spec's simple
banner against the bundled campaigns), priced by the real ``ScoreStage``, then
answered by ``build_response`` as the worker calls it: winners, bid ids, a Snowflake
id, the signed token, nurl and burl, the JSON. CPU and wall time per response, each
the median of ``ROUNDS`` blocks of ``--rounds`` / 5 responses interleaved with the
baseline: ``orjson.dumps`` of the same response as a dict (the parsed answer), fixed.

``stage9_cpu_us``, ``stage9_wall_us``, ``baseline_cpu_us``, ``stage9_ratio``
                     (stage9_cpu_us / baseline_cpu_us)
``sign_us``, ``verify_us``  ``TokenSigner.sign`` and ``verify`` of the bid's claims
``mac_us``, ``hmac_sha256_us``  the MAC alone over the bid's token body: the signer's,
                     and HMAC-SHA256 (a keyed state copied per token), for comparison
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import hmac
import statistics
from typing import Any, cast

import orjson
from bench_score import REPO, BannerBook, banner_context, blocks

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.clock import SystemClock
from bidder.core.tokens import TAG_BYTES, TokenSigner
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.response import NoticeUrls, build_response
from bidder.pipeline.stages import ScoreStage
from ids import Snowflake, bid_id_source
from models.scorer import ModelHandle
from models.serving import Pricer

ROUNDS = 7
KEY = b"k" * 32


def _macs(token: str, n: int) -> dict[str, float]:
    """The MAC alone over the token's body, keyed once and copied per tag."""
    kid, blob = token.split(".", 1)
    body = base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))[:-TAG_BYTES]
    prefix = kid.encode() + b"."
    keyed: dict[str, Any] = {
        "mac_us": hashlib.blake2b(prefix, key=KEY, digest_size=TAG_BYTES),
        "hmac_sha256_us": hmac.new(KEY, prefix, "sha256"),
    }

    def cost(base: Any) -> float:
        def tag() -> bytes:
            mac = base.copy()
            mac.update(body)
            return bytes(mac.digest()[:TAG_BYTES])

        return round(statistics.median(blocks(tag, n)[0] for _ in range(ROUNDS)), 3)

    return {name: cost(base) for name, base in keyed.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()

    clock = SystemClock()
    book = BannerBook(load_campaign_file(REPO / "fixtures" / "openrtb" / "campaigns.json"))
    ctx = banner_context(book)
    ScoreStage(Pricer(ModelHandle.load(), clock), cast(CampaignBook, book))(ctx, 0.0)
    signer = TokenSigner({"k1": KEY}, "k1")
    ids = Snowflake(clock, worker=1)
    urls = NoticeUrls("http://127.0.0.1:8080", signer, ids.next_id, clock, templates=book)
    next_bid_id = bid_id_source()

    def respond() -> bytes:
        return build_response(ctx, "bidsim", urls, next_bid_id)

    fixed = orjson.loads(respond())
    nurl = fixed["seatbid"][0]["bid"][0]["nurl"]
    token = nurl.split("t=", 1)[1].split("&", 1)[0]
    claims = signer.verify(token)

    gc.collect()
    stage_cpu, stage_wall, base_cpu = [], [], []
    n = max(args.rounds // 5, 1)
    for _ in range(ROUNDS):
        base_cpu.append(blocks(lambda: orjson.dumps(fixed), n)[0])
        cpu, wall = blocks(respond, n)
        stage_cpu.append(cpu)
        stage_wall.append(wall)
    sign = statistics.median(blocks(lambda: signer.sign(claims), n)[0] for _ in range(ROUNDS))
    verify = statistics.median(blocks(lambda: signer.verify(token), n)[0] for _ in range(ROUNDS))
    cpu_us, base_us = statistics.median(stage_cpu), statistics.median(base_cpu)
    result = {
        "bids": len(fixed["seatbid"][0]["bid"]),
        "response_bytes": len(respond()),
        "rounds": args.rounds,
        "stage9_cpu_us": round(cpu_us, 2),
        "stage9_wall_us": round(statistics.median(stage_wall), 2),
        "baseline_cpu_us": round(base_us, 2),
        "stage9_ratio": round(cpu_us / base_us, 3),
        "sign_us": round(sign, 2),
        "verify_us": round(verify, 2),
        **_macs(token, n),
    }
    print(f"answered the banner request with {result['bids']} bid(s)")
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
