"""Recorded logs in, bidstreams out: ``bidsim import openrtb`` and ``bidsim import ipinyou``.

Streaming: a line is read, converted, written and forgotten, so memory stays flat
whatever the size of the input (docs/bidstream.md, "Importing recorded logs").
"""

from bidder.bidstream.importers.errors import ImportInputError
from bidder.bidstream.importers.ipinyou import IpinyouFormat
from bidder.bidstream.importers.openrtb import OpenRtbFormat
from bidder.bidstream.importers.run import import_files
from bidder.bidstream.importers.tally import ImportTally

__all__ = ["ImportInputError", "ImportTally", "IpinyouFormat", "OpenRtbFormat", "import_files"]
