"""The servers ``bench_http.py`` measures, each its own process tree started here: the
echo app and ``bidsim serve`` of a checkout; and the CPU a tree has used, from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bidder.replay.client import HttpPool
from bidder.stack.child import held_port

ROOT = Path(__file__).resolve().parents[1]
BANNER = ROOT.parent / "shared/external/openrtb/requests/001_iab26_spec-6.2.1-simple-banner.json"
BID_PATH = "/openrtb2/bid"
HEADERS = {"Content-Type": "application/json", "X-Openrtb-Version": "2.6", "X-Ssp": "ssp-alpha"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    name: str
    port: int
    pid: int
    """The root of the server's process tree."""


def tree_cpu_s(root: int) -> float:
    """utime + stime of ``root`` and every live descendant, in seconds."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{entry}/stat").read_text()
            fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
            stats[int(entry)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += int(stats[pid][11]) + int(stats[pid][12])  # utime, stime
        todo += children.get(pid, [])
    return total / CLOCK_TICKS


def start(
    name: str, bidders: dict[str, tuple[Path, int]]
) -> contextlib.AbstractAsyncContextManager[Server]:
    """The server called ``name``: the echo app or one of ``bidders``."""
    if name == "echo":
        return echo_server()
    tree, workers = bidders[name]
    return bidder_server(name, tree, workers)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[Server]:
    port = held_port()
    script = str(ROOT / "scripts/echo_server.py")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, script, "--port", str(port), stdout=asyncio.subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)  # type: ignore[union-attr]
        if line.strip() != b"ready":
            raise SystemExit("bench_http: the echo server did not start")
        yield Server("echo", port, proc.pid)
    finally:
        proc.terminate()
        await proc.wait()


@contextlib.asynccontextmanager
async def bidder_server(name: str, tree: Path, workers: int) -> AsyncIterator[Server]:
    """``bidsim serve`` of the checkout ``tree`` (its own .venv), on its own stack."""
    port = held_port()
    python = tree / ".venv/bin/python"
    if not python.exists():
        raise SystemExit(f"bench_http: {tree} has no .venv (run make venv there)")
    command = [str(python), "-m", "bidder", "serve", "--port", str(port)]
    command += ["--admin-port", "0", "--workers", str(workers)]
    command += ["--campaigns", str(tree / "fixtures/openrtb/campaigns.json")]
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=tree,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await _wait_for_line(proc, b"bidding at", name)
        server = Server(name, port, proc.pid)
        await check_full_path(server)
        yield server
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def _wait_for_line(proc: asyncio.subprocess.Process, marker: bytes, name: str) -> None:
    assert proc.stderr is not None
    async with asyncio.timeout(120):
        while marker not in (line := await proc.stderr.readline()):
            if not line:
                raise SystemExit(f"bench_http: {name} exited before it served")


async def check_full_path(server: Server, attempts: int = 40) -> None:
    """The banner request must be bid on (the full path), once leases are in."""
    pool = HttpPool("127.0.0.1", server.port)
    try:
        for _ in range(attempts):
            answer = await pool.request(
                "POST", BID_PATH, BANNER.read_bytes(), HEADERS, timeout_s=5.0
            )
            if answer.status == 200:
                return
            await asyncio.sleep(0.5)
    finally:
        await pool.close()
    reason = answer.headers.get("x-nbr-reason", "?")
    raise SystemExit(f"bench_http: {server.name} answered {answer.status} ({reason}), not a bid")
