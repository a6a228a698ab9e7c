"""The admin port, served by the supervisor: ``/metrics`` and ``/healthz``.

Metrics are aggregated across worker processes from the Prometheus
multi-process directory. Health is "ok" when every worker is alive and Valkey
answers a PING within 200 ms, "degraded" otherwise (HTTP 503, so a load
balancer stops sending).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from bidder.adapters.valkey import AsyncValkey, connect_async

_PING_TIMEOUT_S = 0.2


def build_admin_app(
    metrics_dir: str,
    workers_alive: Callable[[], int],
    workers: int,
    valkey_url: str | None,
    valkey_cluster: bool = False,
    collectors: Sequence[Collector] = (),
) -> web.Application:
    """``valkey_cluster``: ``valkey_url`` is a Valkey Cluster node; the PING then goes
    to the client's default node (health asks "can we reach the cluster", not each
    primary). ``collectors``: the supervisor's own metrics, beside the workers'."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)
    for collector in collectors:
        registry.register(collector)
    valkey = (
        connect_async(valkey_url, cluster=valkey_cluster, timeout_s=_PING_TIMEOUT_S)
        if valkey_url
        else None
    )

    async def metrics(_: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        alive = workers_alive()
        valkey_ok = await _pings(valkey)
        ok = alive == workers and valkey_ok is not False
        report = {"status": "ok" if ok else "degraded", "workers": workers, "workers_alive": alive}
        report["valkey"] = "absent" if valkey_ok is None else "ok" if valkey_ok else "down"
        return web.json_response(report, status=200 if ok else 503)

    async def close_valkey(_: web.Application) -> None:
        if valkey is not None:
            await valkey.aclose()

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.on_cleanup.append(close_valkey)
    return app


async def _pings(valkey: AsyncValkey | None) -> bool | None:
    if valkey is None:
        return None
    try:
        return bool(await asyncio.wait_for(valkey.ping(), _PING_TIMEOUT_S))
    except Exception:  # any failure to answer is "down", whatever its kind
        return False
