"""The replay's HTML pages: ``write_html`` (one report) and ``write_compare_html`` (two)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bidder.replay.compare import Comparison
from bidder.replay.html.compare_page import COMPARE_SECTIONS, render_compare_page
from bidder.replay.html.page import SECTIONS, render_page

__all__ = [
    "COMPARE_SECTIONS",
    "SECTIONS",
    "render_compare_page",
    "render_page",
    "write_compare_html",
    "write_html",
]


def write_html(report: Mapping[str, Any], path: Path) -> None:
    """Render the JSON report (``bidder.replay.report.to_json``) to one HTML file."""
    path.write_text(render_page(report), encoding="utf-8")


def write_compare_html(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    comparison: Comparison,
    threshold: float,
    path: Path,
) -> None:
    """Render a comparison (``bidder.replay.compare``) of two JSON reports to one file."""
    path.write_text(render_compare_page(base, new, comparison, threshold), encoding="utf-8")
