"""The chaos suite's command line: ``scripts/chaos.py [--only NAME ...] [--short]
[--json OUT] [--rate R]``.

Runs the scenarios one after the other (each on its own embedded stack), prints a
table, writes the JSON (a list, one object per scenario) and exits 1 if any scenario
failed (a pending one, whose feature is absent, does not fail the run); 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import orjson

from bidder.chaos import (
    SCENARIOS,
    ScenarioOptions,
    ScenarioResult,
    UnknownScenario,
    any_failed,
    render_table,
    run_scenarios,
)
from bidder.chaos.runner import select


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chaos.py", description=__doc__.split("\n\n")[1])
    p.add_argument("--only", nargs="+", default=[], metavar="NAME",
                   help=f"run only these scenarios: {', '.join(SCENARIOS)}")  # fmt: skip
    p.add_argument("--short", action="store_true", help="the short form make test runs")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the results here")
    p.add_argument(
        "--rate", type=float, metavar="R",
        help="steady: replay rate (req/s); default: half of a saturation probe",
    )  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        select(args.only)
    except UnknownScenario as exc:
        parser.error(str(exc))
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be above 0")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: no such directory: {args.json.parent}")

    def report(result: ScenarioResult) -> None:
        print(f"{result.name}: {result.status} ({result.elapsed_s:.0f} s)", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="bidsim-chaos-") as workdir:
        options = ScenarioOptions(Path(workdir), short=args.short, rate=args.rate)
        results = run_scenarios(args.only, options, report)
    print(render_table(results))
    if args.json is not None:
        doc = [result.to_json() for result in results]
        args.json.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    return 1 if any_failed(results) else 0
