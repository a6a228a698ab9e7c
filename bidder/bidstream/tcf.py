"""The generator's TCF v2 encoder: re-exported from ``bidder.openrtb.tcf``.

The bit layout lives in one place (``bidder.openrtb.tcf``) so the generator's encoder and the
bidder's decoder cannot drift apart.
"""

from __future__ import annotations

from bidder.openrtb.tcf import (
    MAX_VENDOR_ID,
    PURPOSES,
    SPECIAL_FEATURES,
    TCF_VERSION,
    TcfConsent,
    encode_tc_string,
)

__all__ = [
    "MAX_VENDOR_ID",
    "PURPOSES",
    "SPECIAL_FEATURES",
    "TCF_VERSION",
    "TcfConsent",
    "encode_tc_string",
]
