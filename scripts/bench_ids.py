"""Id benchmark: Snowflake ids per second against uuid.uuid4() in the same run.

Both are timed in the same process, interleaved over ``--rounds`` rounds of ``--ids``
calls each; the best round of each counts (the least disturbed by other load on the
machine). The Snowflake generator runs on the system clock with a fixed worker id,
exactly the hot-path call (``Snowflake.next_id``) minus the lease, which costs
nothing per id. Also timed: signing one notice token, the per-bid cost the response
adds for its win/billing URLs. The last line printed is one JSON object with
``ids_per_s``, ``uuid4_per_s``, ``uuid4_ratio`` (goal >= 3) and ``sign_us``.

    .venv/bin/python scripts/bench_ids.py [--ids 1000000 --rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable

import orjson

from bidder.core.clock import SystemClock
from bidder.core.tokens import NoticeClaims, TokenSigner
from ids.snowflake import Snowflake


def _rate(call: Callable[[], object], count: int) -> float:
    loops = range(count)
    start = time.perf_counter()
    for _ in loops:
        call()
    return count / (time.perf_counter() - start)


def _sign_call() -> Callable[[], object]:
    signer = TokenSigner({"k1": b"k" * 32}, "k1")
    claims = NoticeClaims(
        bid_id=560_000_000_123_456_789,
        imp_id="1",
        campaign_id="harbor-bank-leaderboard",
        advertiser="harbor-bank",
        creative_id="hb-728x90-savings",
        user_key="b:6f1e2d3c4b5a69788796a5b4c3d2e1f0",
        household_key="h:4:203.0.113.7",
        max_price_cpm_micros=2_500_000,
        issued_ms=1_767_225_600_000,
    )
    return lambda: signer.sign(claims)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=1_000_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.ids < 1000 or args.rounds < 1:
        parser.error("--ids must be at least 1000 and --rounds at least 1")
    generator = Snowflake(SystemClock(), worker=1)
    sign = _sign_call()
    snowflake, uuid4, signing = [], [], []
    for n in range(args.rounds):
        snowflake.append(_rate(generator.next_id, args.ids))
        uuid4.append(_rate(uuid.uuid4, args.ids))
        signing.append(_rate(sign, args.ids // 10))
        print(f"round {n + 1}: snowflake {snowflake[-1]:,.0f}/s  uuid4 {uuid4[-1]:,.0f}/s  "
              f"sign {1e6 / signing[-1]:.2f} us", file=sys.stderr)  # fmt: skip
    ids_per_s, uuid4_per_s = max(snowflake), max(uuid4)
    result = {
        "ids_per_s": round(ids_per_s),
        "uuid4_per_s": round(uuid4_per_s),
        "uuid4_ratio": round(ids_per_s / uuid4_per_s, 2),
        "sign_us": round(1e6 / max(signing), 3),
        "ids_per_round": args.ids,
        "rounds": args.rounds,
    }
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
