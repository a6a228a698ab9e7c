"""How ``make test`` shares the test modules out: foreground lanes and a background lane.

Many modules run live servers and judge their timing (answers within the deadline, shed
shares, recovery times, throttles, timeouts): each uses part of a core and must get it
when it asks. Others only compute (parsers, the pacing maths, the simulator, reports),
and a slower run changes none of their verdicts: those are marked ``pure``. With
``BACKGROUND_FROM`` or more test processes (``--dist loadfile``), the last one is the
background lane: it runs at a lower CPU priority (``BACKGROUND_NICE``) and takes only
``pure`` modules, from the end of the queue. The others, the foreground lanes, take
modules from the front: the ``long`` ones first, longest first (``tests/conftest.py``),
then the rest, ``pure`` ones included. So the timed modules keep the cores when they
need them, and the background lane uses what they leave idle.

The scheduler runs in pytest-xdist's controller, which collects no tests: it reads a
module's marks from its source (the module-level ``pytestmark``).
"""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler.loadfile import LoadFileScheduling

BACKGROUND_FROM = 4
"""The fewest test processes of which one is the background lane."""
BACKGROUND_NICE = 10
"""The background lane's niceness: about a tenth of a core's time when it competes
with a foreground process for that core (Linux's weights for nice 10 and 0)."""
BACKGROUND_MARK = "pure"


def background_lane(worker_id: str, workers: int) -> bool:
    """Whether the test process ``worker_id`` (``gw0``, ``gw1``, ...) of ``workers`` is
    the background lane."""
    return workers >= BACKGROUND_FROM and worker_id == f"gw{workers - 1}"


@functools.cache
def module_marks(path: str) -> frozenset[str]:
    """The names of the ``pytest.mark.<name>`` marks in the module-level ``pytestmark``
    of the test module at ``path``."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):  # pytest reports it; a foreground lane takes it
        return frozenset()
    marks = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark"
            for target in statement.targets
        ):
            for node in ast.walk(statement.value):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "mark"
                ):
                    marks.add(node.attr)
    return frozenset(marks)


def next_scope(queue: Sequence[str], background: bool) -> str | None:
    """The module a lane takes next from ``queue`` (modules waiting, in order): a
    foreground lane the first, the background lane the last marked ``pure``; None when
    it may take none of them."""
    if not background:
        return queue[0] if queue else None
    return next((s for s in reversed(queue) if BACKGROUND_MARK in module_marks(s)), None)


class LaneScheduling(LoadFileScheduling):
    """``--dist loadfile`` with a background lane (module docstring)."""

    def _assign_work_unit(self, node: Any) -> None:
        background = background_lane(node.gateway.id, self.numnodes)
        scope = next_scope(list(self.workqueue), background)
        if scope is None:  # nothing this lane may take is left
            if not self._pending_of(self.assigned_work.get(node, {})):
                node.shutdown()
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        )


def make_scheduler(config: pytest.Config, log: Any) -> LaneScheduling | None:
    """The scheduler for ``--dist loadfile``; None (xdist's own) for any other."""
    if config.getoption("dist") != "loadfile":
        return None
    return LaneScheduling(config, log)


def enter_lane(config: pytest.Config) -> None:
    """In a test process: lower its priority if it is the background lane."""
    given = getattr(config, "workerinput", None)
    if given is not None and background_lane(given["workerid"], given["workercount"]):
        os.nice(BACKGROUND_NICE)
