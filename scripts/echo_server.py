"""The baseline of scripts/bench_http.py: a bare aiohttp + orjson + uvloop bidder.

It parses the request and answers a fixed one-bid response for the first imp,
with the same server setup as a bidder worker (SO_REUSEPORT, no access log), so
the benchmark's ratio is the cost of bidsim's decisions, not of the framework.

    python scripts/echo_server.py --port 9000
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
import uvloop
from aiohttp import web

_BID = {
    "id": "1",
    "price": 1.0,
    "crid": "cr",
    "cid": "c",
    "adomain": ["echo.example"],
    "adm": "<a/>",
}


async def bid(request: web.Request) -> web.Response:
    try:
        doc = orjson.loads(await request.read())
        bid = {**_BID, "impid": doc["imp"][0]["id"]}
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return web.Response(status=204)  # the sample stream's malformed bodies
    body = orjson.dumps({"id": doc["id"], "seatbid": [{"bid": [bid]}]})
    return web.Response(body=body, content_type="application/json")


async def serve(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_post("/openrtb2/bid", bid)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_port=True, backlog=4096).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port))
