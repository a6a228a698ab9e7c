"""A real bidder app served from a background thread, for synchronous tests.

Tests that send raw bytes (bad gzip, huge bodies, hypothesis-generated junk)
talk to it with ``http.client`` over loopback, exactly as an exchange would.
``stages`` lets a test put its own stage into the pipeline (the test hook for
"a stage made artificially slow"). The supervisor's duties come first
(``prepare_resources``: campaigns, spend stream, archive bucket, profile table),
a real reconciler process runs beside it when the settings ask for one (so
campaigns hold pacing leases), and the worker's background jobs (lease and
campaign refreshes, id lease renewal, ledger shipping) run as in a real worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from bidder.chaos.harness import chaos_settings
from bidder.core.nobid import NoBid
from bidder.pipeline.runner import Context, Stage
from bidder.pipeline.stages import PacingStage
from bidder.serve.app import BidderState
from bidder.serve.assemble import build_state
from bidder.serve.reconciler_process import running_reconciler
from bidder.serve.server import prepare_resources
from bidder.serve.settings import Settings
from bidder.serve.worker import DRAIN_S, start_background, start_site, stop_background
from bidder.stack.child import Supervised
from bidder.stack.local import LocalStack

REPO = Path(__file__).resolve().parents[2]
CAMPAIGNS = REPO / "fixtures" / "openrtb" / "campaigns.json"

StagesHook = Callable[[BidderState], Sequence[Stage]]


class DeadlineProbe:
    """A stage that records the time it is given, from the request's receipt to its
    deadline."""

    def __init__(self) -> None:
        self.budgets_s: list[float] = []

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        self.budgets_s.append(deadline - ctx.received)
        return None


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def reason(self) -> str | None:
        return self.headers.get("x-nbr-reason")


class LiveBidder:
    def __init__(self, settings: Settings, stages: StagesHook | None = None):
        self.settings = settings
        self._stages = stages
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="live-bidder", daemon=True)
        self.state: BidderState | None = None
        self.reconciler: Supervised | None = None
        self._processes = contextlib.ExitStack()

    def __enter__(self) -> LiveBidder:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"live bidder did not start: {self._error!r}")
        if self.settings.reconciler:
            self.reconciler = self._processes.enter_context(running_reconciler(self.settings))
            self._wait_for_leases()
        return self

    def _wait_for_leases(self) -> None:
        """Until this bidder's own pacer holds a lease. The bound covers the reconciler
        process's start-up on a loaded machine (imports, its first tick), not how fast
        leases come: the wait ends at the first lease."""
        assert self.state is not None
        pacer = next(s.pacer for s in self.state.stages if isinstance(s, PacingStage))
        campaigns = [c.id for c in self.state.book.index.campaigns]
        deadline = time.monotonic() + max(30.0, 3 * self.settings.pacing_tick_s)
        while time.monotonic() < deadline:
            if pacer.available and any(pacer.remaining(c) is not None for c in campaigns):
                return
            time.sleep(0.05)
        raise RuntimeError("the live bidder got no pacing leases from its reconciler")

    def __exit__(self, *exc: object) -> None:
        self._processes.close()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post(self, body: bytes, headers: dict[str, str] | None = None) -> Answer:
        return self.request("POST", "/openrtb2/bid", body, headers)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        conn = http.client.HTTPConnection(self.settings.host, self.settings.port, timeout=10)
        try:
            sent = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=body, headers=sent)
            resp = conn.getresponse()
            data = resp.read()
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def _run(self) -> None:
        loop = uvloop.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        settings = self.settings
        await asyncio.to_thread(prepare_resources, settings)
        state = await build_state(settings)
        if self._stages is not None:
            state.stages = self._stages(state)
        self.state = state
        site = await start_site(state)
        background = await start_background(state)
        # As a worker does after start-up (bidder.serve.worker), and more needed here: this
        # process also holds the whole test session's heap, and a full collection over
        # it while the bidder serves is a loop stall long enough to be shed as overload.
        gc.freeze()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            gc.unfreeze()
            await site.close(DRAIN_S)
            await stop_background(state, background)


def stack_settings(stack: LocalStack, tmp_path: Path, **changes: Any) -> Settings:
    """Settings of a full bidder on a test's own stack (``chaos_settings``: the bundled
    campaigns, a 1 s pacing tick, the spool in ``tmp_path``), with the supervisor's own
    reconciler; then ``changes``."""
    return chaos_settings(stack, tmp_path, **{"reconciler": True, **changes})


def own_aws_resources() -> dict[str, str]:
    """Settings naming AWS resources no other test uses, so a test on the session's moto
    server starts with its own empty spend stream, tables and archive bucket."""
    tag = uuid.uuid4().hex[:10]
    names = ("campaigns_table", "spend_stream", "spend_table", "profiles_table", "archive_bucket")
    return {name: f"test-{name.replace('_', '-')}-{tag}" for name in names}
