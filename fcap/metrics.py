"""Prometheus counters of frequency capping (registered once, at import)."""

from __future__ import annotations

from bidder.core.published_metrics import Counter

CHECKS = Counter("bidsim_fcap_checks", "Frequency-cap checks that went to Valkey.")
CAPPED = Counter(
    "bidsim_fcap_capped", "Candidates found over a frequency cap, by source.", ["source"]
)
STORE_ERRORS = Counter(
    "bidsim_fcap_store_errors", "Frequency-cap store calls that failed or timed out.", ["op"]
)
CACHE_HITS = Counter(
    "bidsim_fcap_cache_hits", "Candidates answered 'capped' by the local negative cache."
)

CAPPED_BY_STORE = CAPPED.labels("store")
CAPPED_BY_CACHE = CAPPED.labels("cache")
CHECK_ERRORS = STORE_ERRORS.labels("check")
COUNT_ERRORS = STORE_ERRORS.labels("count")
RELEASE_ERRORS = STORE_ERRORS.labels("release")
