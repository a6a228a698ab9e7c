"""The chaos suite: ``scripts/chaos.py [--only NAME ...] [--short] [--json OUT] [--rate R]``.

Runs the scenarios of ``bidder.chaos`` one after the other (each on its own embedded
stack), prints a table, writes the JSON (a list, one object per scenario) and exits 1
if any scenario failed (a pending one, whose feature is absent, does not fail the
run); 2 on bad arguments. See docs/reliability.md.
"""

from __future__ import annotations

# Workers run this module again before their own code: the suite is imported
# only when it runs, so they do not load it (docs/decisions.md, "The `bidsim` entry
# point imports the command line only when it runs").
if __name__ == "__main__":
    from bidder.chaos.cli import main

    raise SystemExit(main())
