"""The replay's HTML report: ``write_html(report_json, path)``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bidder.replay.html.page import SECTIONS, render_page

__all__ = ["SECTIONS", "render_page", "write_html"]


def write_html(report: Mapping[str, Any], path: Path) -> None:
    """Render the JSON report (``bidder.replay.report.to_json``) to one HTML file."""
    path.write_text(render_page(report), encoding="utf-8")
