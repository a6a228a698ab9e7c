"""Counters of frequency capping on the bid path (``bidder.core.published_metrics``)."""

from __future__ import annotations

from bidder.core.campaigns import CAP_CLASSES, CAP_FALLBACKS
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
READS = Counter(
    "bidsim_fcap_reads",
    "Candidates whose counters were read from Valkey, by cap class.",
    ["cap_class"],
)
FRESH_HITS = Counter(
    "bidsim_fcap_count_cache_hits",
    "Candidates passed on a recent read (the count cache of loose cap classes), by cap class.",
    ["cap_class"],
)
NEVER_COUNTED = Counter(
    "bidsim_fcap_never_counted_passes",
    "Candidates passed without a read because the counted bitmap showed their person was"
    " never counted today, by cap class.",
    ["cap_class"],
)
FALLBACK = Counter(
    "bidsim_fcap_fallback_checks",
    "Candidates whose user caps were checked under a fallback key (no usable user key),"
    " by fallback.",
    ["fallback"],
)

CAPPED_BY_STORE = CAPPED.labels("store")
CAPPED_BY_CACHE = CAPPED.labels("cache")
CAPPED_BY_COUNT_CACHE = CAPPED.labels("count_cache")
CHECK_ERRORS = STORE_ERRORS.labels("check")
COUNT_ERRORS = STORE_ERRORS.labels("count")
RELEASE_ERRORS = STORE_ERRORS.labels("release")
COUNTED_ERRORS = STORE_ERRORS.labels("counted")
READS_BY_CLASS = {name: READS.labels(name) for name in CAP_CLASSES}
FRESH_HITS_BY_CLASS = {name: FRESH_HITS.labels(name) for name in CAP_CLASSES}
NEVER_COUNTED_BY_CLASS = {name: NEVER_COUNTED.labels(name) for name in CAP_CLASSES}
FALLBACK_CHECKS = {name: FALLBACK.labels(name) for name in CAP_FALLBACKS if name != "none"}
