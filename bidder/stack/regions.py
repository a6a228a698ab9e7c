"""Several regions on one machine: one Valkey server per region, on loopback.

``LocalRegions(("eu", "us"))`` starts a server per region (``ValkeyNode``: a
supervised child, stopped with the stack); ``urls`` maps each region to its server.
With ``replicator_args`` (e.g. ``["--delay-ms", "200"]``) it also starts the
replicators between them, as one child process (``python -m fcap.replicator_cli``,
the same as ``bidsim regions replicate``). Tests and measurements instead run
``fcap.replicate.mesh`` in their own loop, where they can cut and heal links.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bidder.stack.child import START_TIMEOUT_S, ChildProcess, StackError, Started
from bidder.stack.cluster import ValkeyNode

MAX_REGIONS = 3


class LocalRegions(Started):
    def __init__(
        self,
        names: tuple[str, ...],
        start_timeout_s: float = START_TIMEOUT_S,
        replicator_args: Sequence[str] | None = None,
    ) -> None:
        if not 2 <= len(names) <= MAX_REGIONS or len(set(names)) != len(names):
            raise StackError(f"a local stack runs 2 to {MAX_REGIONS} distinct regions, not {names}")
        self.names = names
        self._timeout_s = start_timeout_s
        self._nodes: dict[str, ValkeyNode] = {}
        self._replicator_args = replicator_args
        self.replicator: ChildProcess | None = None
        self._workdir: Path | None = None

    @property
    def urls(self) -> dict[str, str]:
        if not self._nodes:
            raise StackError("the regions are not started; use `with LocalRegions(...) as r:`")
        return {name: node.url for name, node in self._nodes.items()}

    def node(self, region: str) -> ValkeyNode:
        return self._nodes[region]

    def start(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="bidsim-regions-"))
        try:
            for name in self.names:
                self._nodes[name] = ValkeyNode.on_free_port(self._workdir, self._timeout_s)
            if self._replicator_args is not None:
                stores = [f"--store={name}={url}" for name, url in self.urls.items()]
                argv = [sys.executable, "-m", "fcap.replicator_cli", *stores]
                log = self._workdir / "replicator.log"
                self.replicator = ChildProcess("replicator", [*argv, *self._replicator_args], log)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.replicator is not None:
            self.replicator.stop()
            self.replicator = None
        for node in self._nodes.values():
            node.stop()
        self._nodes.clear()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
