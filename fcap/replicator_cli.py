"""``bidsim regions replicate``: run the replicators between regions' counter stores
until stopped (SIGINT or SIGTERM). Also ``python -m fcap.replicator_cli``, which is how
the local stack starts it (``bidder.stack.regions``).

    bidsim regions replicate --store eu=redis://127.0.0.1:7001 --store us=redis://127.0.0.1:7002 \\
        [--delay-ms 0] [--loss 0] [--lag-alert-s 5] [--metrics-port 9108]

One replicator per ordered pair of regions (``fcap.replicate.mesh``). Every few
seconds it logs each link's lag and changes applied; with ``--metrics-port`` the lag,
alert and applied metrics are served for Prometheus there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import Any

import prometheus_client

from bidder.adapters.valkey import VALKEY_FAILURES
from fcap.regions import name_problem
from fcap.replicate import Link, Replicator, mesh
from fcap.store import connect

log = logging.getLogger("bidsim.replicator")
REPORT_EVERY_S = 5.0


def add_commands(subparsers: Any) -> None:
    regions = subparsers.add_parser("regions", help="several regions: replicate counters")
    sub = regions.add_subparsers(required=True, metavar="COMMAND")
    replicate = sub.add_parser("replicate", help="run the replicators between regions' stores")
    add_options(replicate)
    replicate.set_defaults(command=cmd_replicate)


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store", action="append", default=[], metavar="NAME=URL", required=True,
        help="a region and its counter store's Valkey URL (repeat for each region)",
    )  # fmt: skip
    p.add_argument("--delay-ms", type=float, default=0.0, help="apply each change this late")
    p.add_argument("--loss", type=float, default=0.0, help="share of applies lost (retried)")
    p.add_argument("--lag-alert-s", type=float, default=Link().lag_alert_s)
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="serve /metrics here")


def stores(specs: list[str]) -> dict[str, str]:
    """``--store`` values by region; ValueError naming the first bad one."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        problem = name_problem(name) if sep and url else f"--store must be NAME=URL, got {spec!r}"
        if problem or name in out:
            raise ValueError(problem or f"--store names region {name} twice")
        out[name] = url
    if len(out) < 2:
        raise ValueError("replication needs at least two --store regions")
    return out


def cmd_replicate(args: argparse.Namespace) -> int:
    urls = stores(args.store)
    link = Link(delay_s=args.delay_ms / 1000, loss=args.loss, lag_alert_s=args.lag_alert_s)
    problems = link.problems()
    if problems:
        raise ValueError("; ".join(problems))
    if args.metrics_port is not None:
        prometheus_client.start_http_server(args.metrics_port, addr="127.0.0.1")
    asyncio.run(_replicate(urls, link))
    return 0


async def _replicate(urls: dict[str, str], link: Link) -> None:
    clients = {name: connect(url, socket_timeout_s=2.0) for name, url in urls.items()}
    replicators = mesh(clients, link)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(_keep_running(r)) for r in replicators]
    log.info("replicating %s", ", ".join(r.name for r in replicators))
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), REPORT_EVERY_S)
        for r in replicators:
            log.info(
                "%s: lag %.3f s, %d applied, %d lost and retried",
                r.name,
                r.lag_s,
                r.applied,
                r.lost,
            )
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in clients.values():
        await client.aclose()


async def _keep_running(replicator: Replicator) -> None:
    """A store that is down is waited for: the cursor stays, nothing is skipped."""
    while True:
        try:
            await replicator.run()
        except VALKEY_FAILURES as exc:
            log.warning("%s: %r; retrying in 1 s", replicator.name, exc)
            await asyncio.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    p = argparse.ArgumentParser(prog="replicator", description=__doc__.splitlines()[0])
    add_options(p)
    try:
        return cmd_replicate(p.parse_args(argv))
    except ValueError as exc:
        print(f"replicator: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
