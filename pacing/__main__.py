"""``python -m pacing reconciler ...``: the reconciler alone, as ``bidsim serve`` and the
tests start it as a child process: the same command as ``bidsim reconciler``, without
loading the bidder's other commands (the model library among them), which cost about
a second of CPU at every start."""

import argparse
import logging

from pacing.cli import add_reconciler_command

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
parser = argparse.ArgumentParser(prog="bidsim")
add_reconciler_command(parser.add_subparsers(required=True, metavar="COMMAND"))
args = parser.parse_args()
raise SystemExit(args.command(args))
