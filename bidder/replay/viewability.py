"""Viewability in the replay's exchange model: which won impressions become viewable. Pure.

The MRC standard: an impression is viewable when half of its pixels were on screen for
one continuous second (two for video). The exchange model draws that for each win with
a rate per format (``DEFAULT_RATES``, about what the industry measures for display,
video and native; audio has no pixels and is never viewable), from a hash of the market
seed and the win's notice URL, so the same bids get the same draws whatever the order
their answers come back in. A viewable impression's notice (``view_url``: the win's
token at ``/notice/view``) is sent once the dwell time of its format has passed after
its win and billing notices.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit, urlunsplit

import orjson

VIEW_PATH = "/notice/view"
DEFAULT_RATES: Mapping[str, float] = {"banner": 0.7, "video": 0.8, "native": 0.65, "audio": 0.0}
DWELL_S: Mapping[str, float] = {"video": 2.0}
"""MRC dwell time per format; 1 s for any format not named."""
FORMATS = ("video", "native", "audio", "banner")
"""The order an impression's format is read in: a video imp may also carry a companion
banner, and the video is what it sells."""


@dataclass(slots=True)
class ViewTally:
    """Measured wins drawn, those viewable (per format), and their view notices."""

    drawn: dict[str, int] = field(default_factory=dict)
    viewable: dict[str, int] = field(default_factory=dict)
    notices_ok: int = 0
    notices_failed: int = 0

    def count(self, fmt: str, viewable: bool) -> None:
        self.drawn[fmt] = self.drawn.get(fmt, 0) + 1
        self.viewable[fmt] = self.viewable.get(fmt, 0) + viewable


def imp_formats(request_body: bytes) -> dict[str, str]:
    """Each imp id's format ('banner', 'video', 'native', 'audio'; '' when none)."""
    try:
        request = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return {}
    imps = request.get("imp") if isinstance(request, dict) else None
    return {
        str(imp["id"]): next((f for f in FORMATS if isinstance(imp.get(f), dict)), "")
        for imp in (imps if isinstance(imps, list) else ())
        if isinstance(imp, dict) and "id" in imp
    }


def is_viewable(seed: int, notice_url: str, fmt: str, rates: Mapping[str, float]) -> bool:
    """The draw for one win: viewable with the format's rate."""
    digest = hashlib.blake2b(f"{seed}/view/{notice_url}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2**64 < rates.get(fmt, 0.0)


def view_url(notice_url: str) -> str | None:
    """The view notice of the bid whose win (or billing) notice is ``notice_url``: its
    token at ``/notice/view``; None when the URL carries no token."""
    parts = urlsplit(notice_url)
    tokens = [v for k, _, v in (p.partition("=") for p in parts.query.split("&")) if k == "t"]
    if not tokens:
        return None
    return urlunsplit((parts.scheme, parts.netloc, VIEW_PATH, urlencode({"t": tokens[0]}), ""))


def dwell_s(fmt: str) -> float:
    return DWELL_S.get(fmt, 1.0)


def view_json(tally: ViewTally) -> dict[str, object]:
    """The ``viewability`` object of the replay report's JSON."""
    return {
        "wins": dict(sorted(tally.drawn.items())),
        "viewable": dict(sorted(tally.viewable.items())),
        "notices_ok": tally.notices_ok,
        "notices_failed": tally.notices_failed,
    }


def render_views(tally: ViewTally) -> str:
    wins, viewable = sum(tally.drawn.values()), sum(tally.viewable.values())
    share = f"{100 * viewable / wins:.2f}%" if wins else "-"
    by_format = "  ".join(
        f"{fmt or 'unknown'} {tally.viewable[fmt]:,}/{n:,}"
        for fmt, n in sorted(tally.drawn.items())
    )
    return "\n".join(
        [
            f"viewability     {viewable:,} of {wins:,} wins viewable ({share})  {by_format}",
            f"  view notices  ok {tally.notices_ok:,}  failed {tally.notices_failed:,}",
        ]
    )
