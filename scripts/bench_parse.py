"""Benchmark stage 1, the bid request parser; prints one JSON line last.

    .venv/bin/python scripts/bench_parse.py [--rounds 31]

Two workloads, each parsed whole once per round:

``corpus``  every request of the public OpenRTB corpus (``../shared/external/openrtb/
            requests``), the INVALID ones included, ``CORPUS_PASSES`` times per round
``stream``  every body of the bundled sample bidstream (``fixtures/openrtb/
            sample-stream.jsonl.gz``), its deliberately malformed ones included

Figures per workload, medians of ``--rounds`` rounds in which the two runs alternate:

``parse_us``     CPU time (``time.process_time``) of ``bidder.openrtb.request.parse_bid_request``
                 per request (a refusal counts too)
``floor_us``     CPU time of ``orjson.loads`` alone per request: the floor of any parser
                 that decodes the whole body
``ratio``        parse_us / floor_us
``parse_wall_us``, ``floor_wall_us``, ``wall_ratio``: the same by the wall clock
``accepted``     requests the parser accepted (the rest it refused as invalid)

``code`` is the directory of the ``bidder`` package measured: set ``PYTHONPATH`` to
another checkout to measure its parser with this script.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

import bidder
from bidder.bidstream.stream import read_stream
from bidder.openrtb.request import InvalidRequest, parse_bid_request

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "external" / "openrtb" / "requests"
STREAM = ROOT / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
CORPUS_PASSES = 40
"""77 requests are too few for one CPU-time reading: 40 passes make a round of ~3,000."""


def _parse_all(bodies: Sequence[bytes]) -> int:
    accepted = 0
    for body in bodies:
        try:
            parse_bid_request(body)
        except InvalidRequest:
            continue
        accepted += 1
    return accepted


def _loads_all(bodies: Sequence[bytes]) -> None:
    for body in bodies:
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            continue


def _us_per_body(
    fn: Callable[[Sequence[bytes]], object], bodies: Sequence[bytes]
) -> tuple[float, float]:
    """(CPU, wall) microseconds per body of one run of ``fn``."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn(bodies)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / len(bodies) * 1e6, wall / len(bodies) * 1e6


def measure(bodies: Sequence[bytes], rounds: int) -> dict[str, Any]:
    """Alternating rounds of the parser and the floor over ``bodies``."""
    accepted = _parse_all(bodies)  # a warm-up, and the count
    parse, floor = [], []
    for _ in range(rounds):
        parse.append(_us_per_body(_parse_all, bodies))
        floor.append(_us_per_body(_loads_all, bodies))
    parse_us, parse_wall = (statistics.median(run[i] for run in parse) for i in (0, 1))
    floor_us, floor_wall = (statistics.median(run[i] for run in floor) for i in (0, 1))
    return {
        "requests": len(bodies),
        "accepted": accepted,
        "parse_us": round(parse_us, 3),
        "floor_us": round(floor_us, 3),
        "ratio": round(parse_us / floor_us, 3),
        "parse_wall_us": round(parse_wall, 3),
        "floor_wall_us": round(floor_wall, 3),
        "wall_ratio": round(parse_wall / floor_wall, 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args(argv)
    corpus = [path.read_bytes() for path in sorted(CORPUS.glob("*.json"))]
    stream = [record.body for record in read_stream(STREAM)]
    gc.collect()
    gc.freeze()  # as a bid worker does once it is ready
    result = {
        "code": str(Path(bidder.__file__).resolve().parents[1]),
        "rounds": args.rounds,
        "corpus": measure(corpus * CORPUS_PASSES, args.rounds),
        "stream": measure(stream, args.rounds),
    }
    for name in ("corpus", "stream"):
        figures = result[name]
        print(
            f"{name:7} {figures['requests']:5} requests ({figures['accepted']} accepted): "
            f"parse {figures['parse_us']:.2f} us, orjson.loads {figures['floor_us']:.2f} us, "
            f"ratio {figures['ratio']:.2f}"
        )
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
