"""The HTML report: one self-contained page with every section, opened in a real browser."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from hdrh.histogram import HdrHistogram
from hypothesis import given
from hypothesis import strategies as st

from bidder.cli import main
from bidder.replay.campaign_outcomes import budgets_of
from bidder.replay.html import COMPARE_SECTIONS, SECTIONS, write_html
from bidder.replay.html.plots import percentile_curve
from bidder.replay.load_shed import Admission
from bidder.replay.offline_days import OfflineSettings
from bidder.replay.pacing_figures import admitted_text, pacing_section
from bidder.replay.replayer import replay
from bidder.replay.report import ReplayResult, new_latency_histogram, record_latency, to_json
from pacing.config_file import settings_in_force
from tests.bidder.replay import headless
from tests.bidder.replay.test_campaign_outcomes import KINDS, campaign
from tests.bidder.replay.test_compare import recorded_report
from tests.bidder.replay.test_replayer import FakeBidder, options, records

needs_chromium = pytest.mark.skipif(
    headless.CHROMIUM is None,
    reason="chromium is not installed (apt-get install -y chromium): "
    "the HTML report was not opened in a browser",
)

# Anything that would make a browser fetch: a src or href to another place, a CSS
# url() or @import that is not a data URI, a script.
_LOCAL = r"""(?:["'](?!data:|#)|(?!["'#]|data:))"""  # an opening quote or none, then not local
_EXTERNAL = re.compile(
    rf"\b(?:src|href)\s*=\s*{_LOCAL}|url\(\s*{_LOCAL}|@import|<script", re.IGNORECASE
)


@pytest_asyncio.fixture
async def report(aiohttp_server) -> AsyncIterator[dict[str, Any]]:
    fake = FakeBidder()
    server = await aiohttp_server(fake.app())
    fake.url = f"http://127.0.0.1:{server.port}"
    opts = options(budgets=budgets_of([campaign("k1"), campaign("k2")]))
    result = await replay(records(KINDS + ["nobid-geo", "slow"] * 3), fake.url, opts)
    yield to_json(result)
    fake.release.set()


@pytest.fixture
def page(report: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "report.html"
    write_html(report, path)
    return path


def with_a_pacing_day(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as if k1 had run a whole simulated day against a flat target."""
    k1 = {"target_by_hour": [1_000_000] * 24, "spend_by_hour": [900_000] * 24, "wins": 2_400}
    figures = {"k1": k1}
    offline = OfflineSettings(nodes=2, tick_s=360.0, chunk_periods=96, breaker_window_s=3600)
    supply = {"k1": {"spend_by_hour": [2_000_000] * 24, "ecpm_usd": 2.0}}
    admitted = Admission((1.0,) * 1440, (1.0,) * 24)
    budgets = budgets_of([campaign("k1", 24_000_000)])
    day = pacing_section(figures, budgets, supply, offline, None, admitted)
    return {
        **report,
        "pacing": settings_in_force(None, 0.0625),
        "pacing_day": day,
        "pacing_day_shed": {
            "live": 0.094,
            "calibration": 0.012,
            "hours_above_calibration": [{"hour": 7, "live": 0.31, "calibration": 0.012}],
        },
        "pacing_day_settings": {**offline.summary(), "speed": 5760.0},
    }


@pytest.fixture
def day_page(report: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "day.html"
    write_html(with_a_pacing_day(report), path)
    return path


def test_the_page_fetches_nothing_from_elsewhere(page: Path) -> None:
    html = page.read_text()
    assert _EXTERNAL.findall(html) == []
    assert html.count("<svg") == 4  # latency, timeline, no-bid reasons, spend curves


def _section(html: str, key: str) -> str:
    start = html.index(f'<section id="{key}">')
    return html[start : html.index("</section>", start)]


def test_the_pacing_day_section_plots_the_day_and_names_the_settings(day_page: Path) -> None:
    pacing = _section(day_page.read_text(), "pacing")
    assert pacing.count("<svg") == 1
    for shown in ("kp", "built-in defaults", "tick s", "0.0625", "speed", "90.0% | "):
        assert shown in pacing, shown


def test_the_pacing_day_section_shows_the_limits_the_offline_range_and_the_shed_share(
    day_page: Path,
) -> None:
    pacing = _section(day_page.read_text(), "pacing")
    entry = with_a_pacing_day({})["pacing_day"]["k1"]
    low, high = entry["offline_range"]["eod_spend_ratio"]
    for shown in (
        "offline EOD range",
        f"{low:.1%}-{high:.1%}",
        "offline on the supply live let through",
        admitted_text(entry),
        "supply allows 100.0% of the budget",
        "leases at the maximum bid can leave",
        "an hour&#x27;s spend varies",
        "load shed (overloaded, deadline): live 9.4%, calibration 1.2%",
        "spends less; hours in which live shed more",
        "07:00 31.0% against 1.2%",
    ):
        assert shown in pacing, shown


def test_without_a_pacing_day_the_section_says_why(page: Path) -> None:
    pacing = _section(page.read_text(), "pacing")
    assert "<svg" not in pacing
    assert "No pacing day: the replay ran on the real clock" in pacing


def test_the_external_reference_check_catches_a_font_a_script_and_an_image() -> None:
    for snippet in (
        '<link rel="stylesheet" href="https://fonts.example.com/a.css">',
        '<script src="app.js"></script>',
        "<img src=//cdn.example.com/a.png>",
        "<style>body { background: url(https://example.com/a.png) }</style>",
        '<image xlink:href="/a.png"/>',
    ):
        assert _EXTERNAL.search(snippet), snippet


def test_a_replay_that_measured_nothing_still_renders_every_section(tmp_path: Path) -> None:
    path = tmp_path / "empty.html"
    write_html(to_json(ReplayResult(deadline_ms=8.0)), path)
    html = path.read_text()
    assert all(f'<section id="{key}">' in html for key, _ in SECTIONS)
    assert "No 204 answers." in html


def test_every_section_is_on_the_page_in_order(page: Path) -> None:
    html = page.read_text()
    positions = [html.index(f'<section id="{key}">') for key, _ in SECTIONS]
    assert positions == sorted(positions)


@needs_chromium
@pytest.mark.asyncio
async def test_chromium_shows_every_section_and_loads_nothing_else(
    page: Path, tmp_path: Path
) -> None:
    loaded = await headless.load(page, tmp_path / "profile")
    assert loaded.requested == [page.as_uri()]
    assert loaded.failed == []
    assert [(s["id"], s["heading"]) for s in loaded.sections] == list(SECTIONS)
    shown = {s["id"]: s for s in loaded.sections}
    for key in ("latency", "timeline", "no-bids", "campaigns"):
        assert shown[key]["svgs"] == 1, key
    assert shown["campaigns"]["rows"] > 3  # a header and a row per campaign, at least


@needs_chromium
@pytest.mark.asyncio
async def test_chromium_shows_the_pacing_day_with_its_plot_and_settings(
    day_page: Path, tmp_path: Path
) -> None:
    loaded = await headless.load(day_page, tmp_path / "profile")
    assert (loaded.requested, loaded.failed) == ([day_page.as_uri()], [])
    shown = {s["id"]: s for s in loaded.sections}
    assert shown["pacing"]["heading"] == "Pacing day"
    assert shown["pacing"]["svgs"] == 1
    # 7 settings, 10 simulated-clock settings, a header and one campaign
    assert shown["pacing"]["rows"] == 7 + 10 + 2


@needs_chromium
@pytest.mark.asyncio
async def test_chromium_shows_the_comparison_page_and_loads_nothing_else(tmp_path: Path) -> None:
    base, new, out = tmp_path / "base.json", tmp_path / "new.json", tmp_path / "compare.html"
    base.write_bytes(orjson.dumps(recorded_report(1)))
    new.write_bytes(orjson.dumps(recorded_report(2, slowdown=1.3)))
    assert main(["report", "compare", str(base), str(new), "--html", str(out)]) == 1
    assert _EXTERNAL.findall(out.read_text()) == []
    loaded = await headless.load(out, tmp_path / "profile")
    assert (loaded.requested, loaded.failed) == ([out.as_uri()], [])
    assert [(s["id"], s["heading"]) for s in loaded.sections] == list(COMPARE_SECTIONS)
    shown = {s["id"]: s for s in loaded.sections}
    assert shown["latency"]["svgs"] == 1
    assert shown["figures"]["rows"] > 20


@needs_chromium
@pytest.mark.asyncio
async def test_chromium_reports_a_resource_that_fails_to_load(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text('<section id="a"><h2>A</h2><img src="http://example.invalid/a.png"></section>')
    loaded = await headless.load(page, tmp_path / "profile")
    assert "http://example.invalid/a.png" in loaded.requested
    assert loaded.failed != []


@given(st.lists(st.integers(1, 10_000_000), min_size=1, max_size=300))
def test_the_percentile_curve_rises_to_the_maximum(samples: list[int]) -> None:
    histogram: HdrHistogram = new_latency_histogram()
    for value in samples:
        record_latency(histogram, value)
    xs, ys = percentile_curve(histogram)
    assert all(a <= b for a, b in itertools.pairwise(xs))
    assert all(a <= b for a, b in itertools.pairwise(ys))
    assert ys[-1] == histogram.get_max_value() / 1000
    assert ys[0] == histogram.get_value_at_percentile(50) / 1000
