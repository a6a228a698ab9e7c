"""Propose each campaign's ``click_value_micros`` from the model and a bidstream.

A click value makes the campaign's value per impression click value x P(click) x
1000 (a CPM). This script sets it so the campaign's *median* value over the
requests it is eligible for in STREAM (scored as the bidder scores them, anonymous
users included) is ``--headroom`` times its base bid: then the model moves the bid
around the campaign's usual price instead of pushing typical requests under their
floors. Campaigns in ``--unscored`` (formats nobody clicks: CTV, audio) get no
click value and bid their base bid. Prints ``{campaign id: click value or null}``;
the values are then written into the campaign file by hand (it is hand-formatted).

    .venv/bin/python scripts/calibrate_click_values.py \\
        fixtures/openrtb/campaigns.json fixtures/openrtb/sample-stream.jsonl.gz
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from bidder.bidstream.stream import read_stream
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.clock import SystemClock
from bidder.decide.eligibility import CampaignIndex, EligibilityPolicy, select
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from models import features
from models.scorer import ModelHandle


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("campaigns", type=Path)
    p.add_argument("stream", type=Path)
    p.add_argument("--headroom", type=float, default=1.3)
    p.add_argument("--unscored", nargs="*", default=["northwind-ctv-us-ca", "evergreen-audio-us"])
    args = p.parse_args()
    index = CampaignIndex(load_campaign_file(args.campaigns))
    scorer = ModelHandle.load().current
    clock = SystemClock()
    p_clicks: dict[str, list[float]] = defaultdict(list)
    for record in read_stream(args.stream):
        try:
            request = parse_bid_request(record.body)
        except InvalidRequest:
            continue
        found = select(request, index, EligibilityPolicy())
        if not isinstance(found, list):
            continue
        rows = features.pack_rows(request, record.ssp, None, found, clock.wall_ms())
        for candidate, p_click in zip(found, scorer.predict(rows), strict=True):
            p_clicks[candidate.campaign.id].append(p_click)
    proposal: dict[str, int | None] = {}
    for campaign in index.campaigns:
        seen = p_clicks.get(campaign.id)
        if campaign.id in args.unscored or not seen:
            proposal[campaign.id] = None
            continue
        median_p = statistics.median(seen)
        value = campaign.base_bid_cpm_micros * args.headroom / (1000 * median_p)
        proposal[campaign.id] = round(value)
    json.dump(proposal, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
