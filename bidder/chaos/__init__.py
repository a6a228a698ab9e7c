"""The chaos suite: each scenario replays a stream through the whole embedded
stack while a fault is injected, and checks the design's behaviour with figures.

``run_scenarios(names, ScenarioOptions(workdir, short=...))`` runs them in order;
``SCENARIOS`` maps each name to its function (``ScenarioOptions -> ScenarioResult``).
``scripts/chaos.py`` is the operator's command; ``tests/bidder/chaos/scenarios/`` runs the
short form under ``make test``. Injectors (``faults``, ``rogue``), observations
(``observe``), money measurements (``ledger``) and the cap over-delivery audit
(``cap_audit``) are usable on their own.
"""

from bidder.chaos.harness import ScenarioOptions
from bidder.chaos.result import Check, ScenarioResult
from bidder.chaos.runner import SCENARIOS, UnknownScenario, any_failed, render_table, run_scenarios

__all__ = [
    "SCENARIOS",
    "Check",
    "ScenarioOptions",
    "ScenarioResult",
    "UnknownScenario",
    "any_failed",
    "render_table",
    "run_scenarios",
]
