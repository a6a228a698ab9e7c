"""Two replay reports compared, as one self-contained page (the same rules as ``page``)."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from hdrh.histogram import HdrHistogram

from bidder.replay.compare import Comparison, render_comparison
from bidder.replay.html.page import document, table

COMPARE_SECTIONS = (
    ("verdict", "Latency against the noise"),
    ("latency", "Latency percentiles, base and new"),
    ("figures", "Every figure"),
)


def render_compare_page(
    base: Mapping[str, Any], new: Mapping[str, Any], comparison: Comparison, threshold: float
) -> str:
    from bidder.replay.html import plots  # matplotlib: only when a page is rendered

    verdict = render_comparison(comparison, threshold).rsplit("\n\n", 1)[-1]
    histograms = {
        f"{label} (corrected)": HdrHistogram.decode(report["latency_histograms"]["corrected"])
        for label, report in (("base", base), ("new", new))
        if report.get("latency_histograms")
    }
    latency = (
        plots.latency_percentiles(
            histograms, new["deadline_ms"], "Corrected latency by percentile, base and new"
        )
        if histograms
        else '<p class="note">The reports hold no histograms.</p>'
    )
    rows = [
        [f.name, _number(f.base), _number(f.new), _relative(f.relative)] for f in comparison.figures
    ]
    bodies = {
        "verdict": f"<pre>{escape(verdict)}</pre>",
        "latency": latency,
        "figures": table(["figure", "base", "new", "change"], rows),
    }
    return document(
        "bidsim report compare",
        [(key, heading, bodies[key]) for key, heading in COMPARE_SECTIONS],
    )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.6g}"


def _relative(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2%}"
