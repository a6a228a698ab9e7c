"""Burst benchmark: one SSP sends 10x its traffic; the others' latency must hold.

Two streams from the same seed (``bidder.bidstream.generator.generate``):

* baseline: ``--requests`` (6,000) at ``--rate`` (400 req/s), the usual SSP mix;
* burst: ``ssp-delta`` boosted ``--boost`` times (10x), with the request count and the
  rate scaled by ``boost_scale`` so every other SSP sends at its baseline rate.

Each stream is replayed open-loop through the full embedded stack (a fresh LocalStack:
Valkey + moto, then ``running_bidder``: one worker, the reconciler, the bundled
campaigns), with the same rate limit on delta in both runs. Limits are per worker, so
one worker makes the configured figure the partner's limit.

The limit is read off the baseline stream: delta's "normal rate" is its rate in the
stream's busiest simulated hour (the diurnal peak, about 1.5x its mean), QPS is
``--limit-factor`` (1.5) times that, and BURST is one second of QPS. A limit set from
the mean would throttle delta's honest peak; from the peak, the baseline run throttles
nothing and the burst is cut to about QPS.

Runs alternate baseline, burst, ``--pairs`` times (each on a fresh stack, so caps and
spend of one run never reach the next); the first ``--warmup`` seconds of each replay
are sent but not measured. "Others" are every SSP but delta, their corrected
histograms merged. The last line printed is one JSON object: ``others_p99_ratio`` is
the median over pairs of burst / baseline others' corrected p99 (goal <= 1.5), with
delta's throttled share and its 204 p99 in the burst run, and every run's raw figures.

    .venv/bin/python scripts/bench_burst.py [--pairs 3 --requests 6000 --rate 400]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bidder.bidstream.generator import boost_scale, generate
from bidder.bidstream.stream import StreamRecord, read_stream
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import (
    ReplayResult,
    latency_ms,
    new_latency_histogram,
    status_classes,
)
from bidder.serve.cli_options import add_bidder_options, settings_from_args
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.child import free_port, held_port
from bidder.stack.local import LocalStack

BURST_SSP = "ssp-delta"
HOURS = 24


def delta_rates(records: Sequence[StreamRecord]) -> tuple[float, float]:
    """(mean, busiest simulated hour) request rate of ``BURST_SSP``, req/s of send time.

    The stream compresses a day into its span: a simulated hour is span / 24 of send time.
    """
    span_ms = max(records[-1].t_ms, 1)
    per_hour = [0] * HOURS
    for record in records:
        if record.ssp == BURST_SSP:
            per_hour[min(record.t_ms * HOURS // span_ms, HOURS - 1)] += 1
    return sum(per_hour) / (span_ms / 1000), max(per_hour) / (span_ms / HOURS / 1000)


def rate_limit_spec(peak_rps: float, factor: float) -> str:
    qps = math.ceil(factor * peak_rps)
    return f"{BURST_SSP}={qps}:{qps}"


def settings_for(limit: str, workers: int) -> Settings:
    """What ``bidsim replay STREAM --rate-limit LIMIT`` would run with (ports chosen later)."""
    parser = argparse.ArgumentParser()
    add_bidder_options(parser)
    args = parser.parse_args(["--rate-limit", limit, "--workers", str(workers)])
    return settings_from_args(args, held_port(), free_port())


def run(records: list[StreamRecord], settings: Settings, options: ReplayOptions) -> ReplayResult:
    """One replay through a fresh embedded stack."""
    with LocalStack() as stack:
        settings = settings.replace(
            valkey_url=stack.valkey_url,
            aws_endpoint=stack.aws_endpoint,
            port=held_port(),
            admin_port=free_port(),
        )

        async def go() -> ReplayResult:
            async with running_bidder(settings) as bidder:
                return await replay(records, f"{bidder.bid_url}/openrtb2/bid", options)

        return uvloop.run(go())


def figures(kind: str, result: ReplayResult) -> dict[str, Any]:
    """The raw figures of one run: others merged, delta on its own."""
    others = new_latency_histogram()
    for name, ssp in result.ssps.items():
        if name != BURST_SSP:
            others.add(ssp.corrected)
    delta = result.ssp(BURST_SSP)
    return {
        "kind": kind,
        "requests": result.requests,
        "rate_rps": round(result.rate_rps, 1),
        "others_requests": sum(s.requests for n, s in result.ssps.items() if n != BURST_SSP),
        "others_throttled": sum(s.throttled for n, s in result.ssps.items() if n != BURST_SSP),
        "others_latency_ms": latency_ms(others),
        "delta_requests": delta.requests,
        "delta_throttled": delta.throttled,
        "delta_throttled_share": round(delta.throttled / delta.requests, 4)
        if delta.requests
        else 0.0,
        "delta_latency_ms": latency_ms(delta.corrected),
        "delta_204_latency_ms": latency_ms(delta.corrected_204),
        "status": status_classes(result.status),
        "nbr_reasons": dict(result.nbr_reasons.most_common()),
        "within_deadline_share": round(result.within_deadline_share, 4),
        "timeouts": result.timeouts,
        "late_sends": result.late_sends,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--boost", type=float, default=10.0)
    parser.add_argument("--limit-factor", type=float, default=1.5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=2.0, metavar="S")
    args = parser.parse_args(argv)
    boost = {BURST_SSP: args.boost}
    scale = boost_scale(boost)
    with tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp:
        base_path, burst_path = Path(tmp) / "baseline.jsonl.gz", Path(tmp) / "burst.jsonl.gz"
        generate(base_path, args.requests, args.seed, args.rate)
        generate(
            burst_path, round(args.requests * scale), args.seed, args.rate * scale, ssp_boost=boost
        )
        streams = {"baseline": list(read_stream(base_path)), "burst": list(read_stream(burst_path))}
    mean_rps, peak_rps = delta_rates(streams["baseline"])
    limit = rate_limit_spec(peak_rps, args.limit_factor)
    settings = settings_for(limit, workers=1)
    options = ReplayOptions(warmup_s=args.warmup, deadline_ms=settings.deadline_ms)
    print(f"delta baseline: mean {mean_rps:.1f} req/s, peak hour {peak_rps:.1f}; limit {limit}")
    runs: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        for kind in ("baseline", "burst"):
            result = run(streams[kind], settings, options)
            runs.append({"pair": pair, **figures(kind, result)})
            print(orjson.dumps(runs[-1]).decode(), file=sys.stderr)
    print(orjson.dumps(summary(runs, args, limit, mean_rps, peak_rps, scale)).decode())
    return 0


def summary(
    runs: list[dict[str, Any]],
    args: argparse.Namespace,
    limit: str,
    mean_rps: float,
    peak_rps: float,
    scale: float,
) -> dict[str, Any]:
    base = [r for r in runs if r["kind"] == "baseline"]
    burst = [r for r in runs if r["kind"] == "burst"]
    ratios = [
        b["others_latency_ms"]["p99"] / a["others_latency_ms"]["p99"]
        for a, b in zip(base, burst, strict=True)
    ]
    return {
        "benchmark": "burst",
        "seed": args.seed,
        "pairs": args.pairs,
        "requests": {"baseline": args.requests, "burst": round(args.requests * scale)},
        "offered_rps": {"baseline": args.rate, "burst": round(args.rate * scale, 1)},
        "rate_limit": limit,
        "delta_baseline_rps": {"mean": round(mean_rps, 1), "peak_hour": round(peak_rps, 1)},
        "others_p99_ms": {
            "baseline": statistics.median(r["others_latency_ms"]["p99"] for r in base),
            "burst": statistics.median(r["others_latency_ms"]["p99"] for r in burst),
        },
        "others_p99_ratio": round(statistics.median(ratios), 3),
        "others_p99_ratios": [round(r, 3) for r in ratios],
        "others_throttled": sum(r["others_throttled"] for r in runs),
        "delta_throttled_share": {
            "baseline": statistics.median(r["delta_throttled_share"] for r in base),
            "burst": statistics.median(r["delta_throttled_share"] for r in burst),
        },
        "delta_204_p99_ms": statistics.median(r["delta_204_latency_ms"]["p99"] for r in burst),
        "runs": runs,
    }


if __name__ == "__main__":
    raise SystemExit(main())
