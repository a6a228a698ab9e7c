"""Every Valkey key fcap uses, built here and nowhere else.

All keys of one user share the hash tag ``{<user key>}`` (households likewise
``{<household key>}``), so every key one script touches lives in one slot and the
scripts run unchanged on Valkey Cluster:

    fu:{<user>}              hash: all counters of the user (one field per bucket)
    fu:{<user>}:d:<imp id>   string: the user side's dedup mark of one impression
    fh:{<household>}         hash: all household counters of the household
    fh:{<household>}:d:<imp id>
    fc:{counted}:<day>       bitmap: who had an impression counted that UTC day
                             (``fcap.counted``; one key, one slot, for the whole fleet)
    fr:log                   stream: regional mode's change log of one region's server

A user key and a household key are different tags, hence (on a Cluster) possibly
different slots and nodes: they are never touched by the same script call. The
prefixes keep a user and a household with equal key strings apart. Braces and ``%``
inside a key are percent-escaped, so a key can't end its own hash tag early.
"""

from __future__ import annotations

USER = "fu"
HOUSEHOLD = "fh"
CHANGE_LOG = "fr:log"
"""Regional mode (``fcap.regional``): the changes of the region's slots, for the
replicators. One per server, no hash tag: regional mode runs on single servers."""
_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def counters(kind: str, subject_key: str) -> str:
    """The counter hash of a user (``USER``) or household (``HOUSEHOLD``)."""
    return f"{kind}:{{{_tag(subject_key)}}}"


def dedup(kind: str, subject_key: str, impression_id: str) -> str:
    """The dedup mark of one impression on one side; same slot as ``counters``."""
    return f"{kind}:{{{_tag(subject_key)}}}:d:{impression_id}"


def counted(day: int) -> str:
    """The bitmap of keys counted on UTC day ``day`` (days since the epoch)."""
    return f"fc:{{counted}}:{day}"


def _tag(subject_key: str) -> str:
    if not subject_key:
        raise ValueError("an empty user or household key cannot be a hash tag")
    if "{" in subject_key or "}" in subject_key or "%" in subject_key:
        return subject_key.translate(_ESCAPES)
    return subject_key
