"""Supply-path dedup measured end to end, one hold after the other.

    .venv/bin/python -m bidder.replay._dedup_probe --requests 4000 --holds 0,3

For each ``--dedup-hold-ms`` value: a fresh local stack (Valkey + moto), the full
bidder (``running_bidder``, ``--workers`` processes, the reconciler), and a generated
duplicate-heavy stream replayed open-loop through a ``RecordingProxy``: a pass-through
between the replayer and the bidder that feeds every answer, with the request it
answered, to the report's duplicate-auctions tally (the replayer itself records no
request bodies). One JSON line per hold: how many duplicate groups were bid exactly
once, how many on their best-ranked path, and the bids' p50/p99 (proxy side: the
bidder's latency plus one loopback hop).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bidder.cli_options import DEFAULT_CAMPAIGNS
from bidder.replay.generator import generate
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult, latency_ms
from bidder.replay.stream import read_stream
from bidder.server import running_bidder
from bidder.settings import Settings
from bidder.stack import LocalStack, free_port

_PASSED_HEADERS = ("Content-Type", "X-Nbr-Reason", "X-Nbr", "X-Openrtb-Version")


class RecordingProxy:
    """``POST /openrtb2/bid`` forwarded to ``target``; each answer counted in ``result``."""

    def __init__(self, target: str, result: ReplayResult) -> None:
        self.target = f"{target}/openrtb2/bid"
        self.result = result
        self.port = free_port()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/openrtb2/bid"

    async def __aenter__(self) -> RecordingProxy:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        app = web.Application()
        app.router.add_post("/openrtb2/bid", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.Response:
        assert self._session is not None  # set on entry, before the site serves
        body, ssp = await request.read(), request.headers.get("X-Ssp", "")
        started = time.perf_counter_ns()
        headers = {"Content-Type": "application/json", "X-Ssp": ssp}
        async with self._session.post(self.target, data=body, headers=headers) as answer:
            data = await answer.read()
        took_us = (time.perf_counter_ns() - started) // 1000
        reason = answer.headers.get("X-Nbr-Reason")
        self._count(ssp, body, answer.status, reason, took_us)
        passed = {k: answer.headers[k] for k in _PASSED_HEADERS if k in answer.headers}
        return web.Response(status=answer.status, body=data or None, headers=passed)

    def _count(self, ssp: str, body: bytes, status: int, reason: str | None, us: int) -> None:
        result = self.result
        result.requests += 1
        result.status[status] += 1
        if status == 204:
            result.nbr_reasons[reason or "unlabelled"] += 1
        result.count_copy(ssp, body, status, reason, us)


def figures(result: ReplayResult) -> dict[str, Any]:
    """The dedup trade-off in one flat object."""
    d, bids = result.duplicates.summary(), latency_ms(result.corrected_200)
    bid_groups = d.groups_with_bid or 1
    return {
        "requests": result.requests,
        "bids": result.status[200],
        "groups": d.groups,
        "groups_with_bid": d.groups_with_bid,
        "groups_bid_more_than_once": d.groups_bid_more_than_once,
        "bid_once_share": round(d.groups_bid_once / bid_groups, 4),
        "best_bidding_path_share": round(d.groups_bid_on_best_bidding_copy / bid_groups, 4),
        "best_path_share": round(d.groups_bid_on_best_copy / bid_groups, 4),
        "duplicate_answers": d.duplicate_answers,
        "deadline_nobids": result.nbr_reasons["deadline"],
        "bids_p50_ms": bids["p50"],
        "bids_p99_ms": bids["p99"],
    }


async def replay_through_proxy(
    settings: Settings, stream: Path, result: ReplayResult
) -> ReplayResult:
    """Run the bidder of ``settings`` and replay ``stream`` through a recording proxy;
    returns the replayer's own result (``result`` holds the proxy's)."""
    records = list(read_stream(stream))
    async with running_bidder(settings) as bidder, RecordingProxy(bidder.bid_url, result) as proxy:
        return await replay(records, proxy.url, ReplayOptions(deadline_ms=settings.deadline_ms))


def _settings(stack: LocalStack, args: argparse.Namespace, hold_ms: float, tmp: Path) -> Settings:
    return Settings(
        port=free_port(),
        admin_port=free_port(),
        workers=args.workers,
        campaigns_path=DEFAULT_CAMPAIGNS,
        deadline_ms=args.deadline_ms,
        valkey_url=stack.valkey_url,
        aws_endpoint=stack.aws_endpoint,
        spool_dir=tmp / f"spool-{hold_ms:g}",
        dedup_hold_ms=hold_ms,
        pacing_tick_s=1.0,
        lease_refresh_s=0.2,
    ).validate()


def _measure(args: argparse.Namespace, stream: Path, hold_ms: float, tmp: Path) -> dict[str, Any]:
    with LocalStack() as stack:  # fresh counters and leases for every hold
        settings = _settings(stack, args, hold_ms, tmp)
        result = ReplayResult(args.deadline_ms)
        sent = asyncio.run(replay_through_proxy(settings, stream, result))
    client = {"timeouts": sent.timeouts, "transport_errors": sent.transport_errors}
    return {"hold_ms": hold_ms, **figures(result), **client}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bidder.replay._dedup_probe")
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--rate", type=float, default=400.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--duplicate-share", type=float, default=0.3)
    p.add_argument("--holds", default="0,3", metavar="MS,MS")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--deadline-ms", type=float, default=8.0)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bidsim-dedup-probe-"))
    stream = tmp / "stream.jsonl"
    generate(stream, args.requests, args.seed, args.rate, duplicate_share=args.duplicate_share)
    for hold_ms in (float(h) for h in args.holds.split(",")):
        print(orjson.dumps(_measure(args, stream, hold_ms, tmp)).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
