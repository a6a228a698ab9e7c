"""Prometheus metrics of the bid and notice paths.

Label children are resolved once here, not per request, because ``labels()``
costs a dict lookup and a lock on every call. With several worker processes the
supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` before the workers start, and the
admin port aggregates their files (see ``bidder.serve.admin``).
"""

from __future__ import annotations

from bidder.core.nobid import NoBid
from bidder.core.published_metrics import Counter, Gauge, Histogram

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
BACKGROUND_RESTARTS = Counter(
    "bidsim_background_restarts",
    "A worker's background jobs (lease refresher, ledger shipper, ...) started again after "
    "a failure they did not handle, by job.",
    ["job"],
)

NOBID_BY_REASON = {reason: NOBIDS.labels(reason.value) for reason in NoBid}

# Stage 5: the profile cache (bidder.decide.profile_cache). Hit rate = hit / (hit + miss).
PROFILE_LOOKUPS = Counter(
    "bidsim_profile_lookups", "Profile cache lookups on the bid path by result.", ["result"]
)
PROFILE_FILLS = Counter(
    "bidsim_profile_fills",
    "Background profile fills by outcome, in keys (found, absent, unanswered, error, dropped).",
    ["outcome"],
)
PROFILE_FILL_CALLS = Counter(
    "bidsim_profile_fill_calls",
    "BatchGetItem calls made by profile fills (keys per call = bidsim_profile_fills / this).",
)
PROFILE_FILL_LATENCY = Histogram(
    "bidsim_profile_fill_seconds",
    "Miss latency: from a cache miss to its background DynamoDB read finishing.",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)

# Stage 5: the identity cache (--identity-table; bidder.decide.identity_table).
IDENTITY_LOOKUPS = Counter(
    "bidsim_identity_lookups", "Identity cache lookups on the bid path by result.", ["result"]
)
IDENTITY_FILLS = Counter(
    "bidsim_identity_fills",
    "Background identity fills by outcome, in keys (found, absent, unanswered, error, dropped).",
    ["outcome"],
)
IDENTITY_FILL_CALLS = Counter(
    "bidsim_identity_fill_calls", "BatchGetItem calls made by identity fills."
)
IDENTITY_FILL_LATENCY = Histogram(
    "bidsim_identity_fill_seconds",
    "Identity miss latency: from a cache miss to its background DynamoDB read finishing.",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)

# --- ids, notices and the ledger ------------------------------------------
NOTICES_REJECTED = Counter(
    "bidsim_notices_rejected", "Notices refused with a 400, by kind and reason.", ["kind", "reason"]
)
CLOCK_BACKWARDS = Counter(
    "bidsim_clock_backwards", "Wall clock steps back seen by the id generator.", ["action"]
)
ID_LEASE_LOSSES = Counter("bidsim_id_lease_losses", "Snowflake worker id leases lost.")
IDS_UNAVAILABLE = Counter(
    "bidsim_ids_unavailable", "Bids dropped (204) because no Snowflake id could be issued."
)
LEDGER_ENTRIES = Counter(
    "bidsim_ledger_entries", "Ledger entries by stage: spooled, streamed, archived.", ["stage"]
)
SPOOL_DEPTH = Gauge(
    "bidsim_spool_depth",
    "Ledger entries on disk not yet accepted by the spend stream.",
    multiprocess_mode="livesum",
)
STREAM_ERRORS = Counter("bidsim_spend_stream_errors", "Failed spend stream puts (retried).")
ARCHIVE_ERRORS = Counter("bidsim_archive_errors", "Failed ledger archive uploads (retried).")
SINK_ERRORS = Counter(
    "bidsim_impression_sink_errors", "Errors raised by impression sinks (logged).", ["sink"]
)

# Stage 2: partner protection. ``ssp`` is a configured partner's name or "other".
PARTNER_REQUESTS = Counter(
    "bidsim_partner_requests", "Bid requests per partner by rate-limit outcome.", ["ssp", "outcome"]
)

# --- deferred notices: billing that waits for Valkey, the id lease or the spool --------
NOTICES_DEFERRED = Counter(
    "bidsim_notices_deferred",
    "Verified notices journaled for later billing (answered 202), by cause: ids, dedup, ledger.",
    ["cause"],
)
DEFERRED_DEPTH = Gauge(
    "bidsim_deferred_depth",
    "Journaled notices not yet settled (billed or found duplicate).",
    multiprocess_mode="livesum",
)
DEFERRED_REPLAYED = Counter(
    "bidsim_deferred_replayed",
    "Journaled notices settled by the replayer, by outcome: billed, billed_late, duplicate, "
    "rejournaled (given a ledger id first), unreadable.",
    ["outcome"],
)

# --- overload: shedding before the body is parsed -----------------------------
SHED = Counter("bidsim_shed", "Bid requests shed at once (204 overloaded), by cause.", ["cause"])
SHED_IN_FLIGHT = SHED.labels("in_flight")
SHED_LOOP_LAG = SHED.labels("loop_lag")
LOOP_LAG = Gauge(
    "bidsim_loop_lag_seconds",
    "How late the event-loop heartbeat fired, last sample.",
    multiprocess_mode="max",
)
SHED_PRESSURE = Gauge(
    "bidsim_shed_pressure",
    "How hard an overloaded worker pushes back, 0-1, learned from its deadlines"
    " (bidder.decide.overload.LagShedder), at the last heartbeat.",
    multiprocess_mode="max",
)
