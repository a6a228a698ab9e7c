"""The chaos suite's short form: each scenario, on its own stack, must pass.

One test module per scenario (``test_<name>.py``, beside the mirror of
``bidder/chaos/scenarios/``), so the test processes share the suite out. Each test calls
the same scenario function ``scripts/chaos.py`` runs, with ``short=True`` (small
streams, a few seconds of replay), and asserts it passed; a failure message lists the
failing checks (name, expected, measured). Every feature the scenarios need exists in
this tree, so a scenario reporting itself *pending* (feature absent) fails here too: it
would mean a regression, not a skip. What each scenario injects and checks is in its
module's docstring (``bidder/chaos/scenarios/``); the full-run figures are in
docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bidder.chaos import SCENARIOS, ScenarioOptions
from bidder.chaos.result import PENDING


def passes(name: str, tmp_path: Path) -> None:
    """Run scenario ``name``'s short form in ``tmp_path``; fail with its explanation and
    its figures (what a failure on a loaded machine is diagnosed from)."""
    result = SCENARIOS[name](ScenarioOptions(tmp_path, short=True))
    assert result.status != PENDING, f"{name} is pending: {result.explain()}"
    figures = orjson.dumps(result.figures, default=str).decode()
    assert result.passed, f"{name} failed:\n{result.explain()}\nfigures: {figures}"
