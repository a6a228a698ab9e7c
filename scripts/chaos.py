"""The chaos suite: ``scripts/chaos.py [--only NAME ...] [--short] [--json OUT] [--rate R]``.

Runs the scenarios of ``bidder.chaos`` one after the other (each on its own embedded
stack), prints a table, writes the JSON (a list, one object per scenario) and exits 1
if any scenario failed (a pending one, whose feature is absent, does not fail the
run); 2 on bad arguments. See docs/reliability.md.
"""

from __future__ import annotations

from bidder.chaos.cli import main

if __name__ == "__main__":  # workers are spawned: they import this module again
    raise SystemExit(main())
