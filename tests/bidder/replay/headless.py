"""Open a page in headless Chromium and report what it loaded, over the DevTools protocol.

Chromium's ``--dump-dom`` shows the page but not what failed to load, so the page is
opened in a browser started with ``--remote-debugging-port=0`` (it prints the port it
took) and driven over its WebSocket with aiohttp's client: network events say which
requests went out and which failed, and a script run in the page reads its sections.
Every host name resolves to nothing (``--host-resolver-rules``), so a page that
reaches for the network fails to load it, even on a machine that has a network.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium")
"""The Debian package's browser; None where it is not installed."""

_LISTENING = re.compile(rb"DevTools listening on ws://127\.0\.0\.1:(\d+)/")
_SECTIONS_JS = """JSON.stringify([...document.querySelectorAll("section")].map(s => ({
  id: s.id, heading: s.querySelector("h2")?.textContent ?? "",
  svgs: s.querySelectorAll("svg").length, rows: s.querySelectorAll("tr").length})))"""


@dataclass
class PageLoad:
    requested: list[str] = field(default_factory=list)
    """Every URL the page asked for, itself first."""
    failed: list[str] = field(default_factory=list)
    """The error text of every request that failed."""
    sections: list[dict[str, Any]] = field(default_factory=list)


async def load(page: Path, profile_dir: Path) -> PageLoad:
    """Open ``page`` (an absolute path) and return what happened; needs ``CHROMIUM``."""
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed")
    browser = await asyncio.create_subprocess_exec(
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--remote-debugging-port=0", f"--user-data-dir={profile_dir}",
        "--host-resolver-rules=MAP * ~NOTFOUND", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert browser.stderr is not None
    drain: asyncio.Task[bytes] | None = None
    try:
        port = await _devtools_port(browser.stderr)
        # Keep reading its log, or a full pipe would block the browser.
        drain = asyncio.create_task(browser.stderr.read())
        async with aiohttp.ClientSession() as session:
            return await _open(session, port, page.as_uri())
    finally:
        browser.terminate()
        await browser.wait()
        if drain is not None:
            await drain


async def _devtools_port(log: asyncio.StreamReader) -> int:
    async for line in log:
        found = _LISTENING.search(line)
        if found:
            return int(found.group(1))
    raise RuntimeError("chromium exited before it listened for DevTools")


async def _open(session: aiohttp.ClientSession, port: int, url: str) -> PageLoad:
    async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
        targets = await answer.json()
    ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
    result = PageLoad()
    async with session.ws_connect(ws_url, max_msg_size=0) as ws:
        calls = _Calls(ws)
        await calls.send("Network.enable")
        await calls.send("Page.enable")
        await calls.send("Page.navigate", url=url)
        async for event in calls.events():
            method, params = event["method"], event.get("params", {})
            if method == "Network.requestWillBeSent":
                result.requested.append(params["request"]["url"])
            elif method == "Network.loadingFailed":
                result.failed.append(params.get("errorText", "failed"))
            elif method == "Page.loadEventFired":
                break
        value = await calls.send("Runtime.evaluate", expression=_SECTIONS_JS, returnByValue=True)
        result.sections = json.loads(value["result"]["value"])
    return result


class _Calls:
    """Numbered DevTools calls on one WebSocket; events in between are kept in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws, self._next, self._events = ws, 0, asyncio.Queue[dict[str, Any]]()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        call_id = self._next
        await self._ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = await self._ws.receive_json()
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._events.put_nowait(message)

    async def events(self) -> Any:
        while True:
            if not self._events.empty():
                yield self._events.get_nowait()
            else:
                yield await self._ws.receive_json()
