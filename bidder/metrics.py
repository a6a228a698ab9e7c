"""Prometheus metrics of the bid and notice paths.

Label children are resolved once here, not per request, because ``labels()``
costs a dict lookup and a lock on every call. With several worker processes the
supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` before the workers start, and the
admin port aggregates their files (see ``bidder.admin``).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from bidder.nobid import NoBid

BIDS = Counter("bidsim_bids", "Bid responses (HTTP 200) sent.")
NOBIDS = Counter("bidsim_nobids", "No-bid answers (HTTP 204) by reason.", ["reason"])
# Requests received = bidsim_bid_latency_seconds_count: no separate counter to keep in step.
LATENCY = Histogram(
    "bidsim_bid_latency_seconds",
    "Time from receipt to the answer being handed to the server, bid path.",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.01, 0.02, 0.05),
)
NOTICES = Counter(
    "bidsim_notices", "Win and billing notices by kind and outcome.", ["kind", "outcome"]
)
CAMPAIGNS_ACTIVE = Gauge(
    "bidsim_campaigns_active", "Active campaigns in the worker's index.", multiprocess_mode="max"
)
CAMPAIGN_REFRESHES = Counter(
    "bidsim_campaign_refreshes", "Campaign refreshes from the store by outcome.", ["outcome"]
)
INTERNAL_ERRORS = Counter("bidsim_internal_errors", "Bugs caught on the bid path (answered 204).")

NOBID_BY_REASON = {reason: NOBIDS.labels(reason.value) for reason in NoBid}
