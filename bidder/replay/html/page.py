"""The HTML report: one self-contained page built from a replay's JSON report.

Everything the page shows is inline: the plots are SVG elements (``plots``), the style
is one ``<style>`` block, and there is no script. Nothing is fetched when it opens, so
it reads the same offline, from a CI artefact or from a mail attachment. Built from the
JSON report (``bidder.replay.report.to_json``), not from the live result, so a saved
report can be rendered again and the replay's send path never waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from hdrh.histogram import HdrHistogram

from bidder.replay.load_shed import render_shed
from bidder.replay.pacing_figures import KEYS as PACING_KEYS
from bidder.replay.pacing_figures import admitted_text, limits_text, supply_text

SECTIONS = (
    ("summary", "Summary"),
    ("latency", "Latency percentiles"),
    ("timeline", "Requests and answers per second"),
    ("no-bids", "No-bid reasons"),
    ("ssps", "Per SSP"),
    ("campaigns", "Per campaign"),
    ("pacing", "Pacing day"),
    ("duplicates", "Duplicate auctions"),
    ("exchange", "Exchange pushback and viewability"),
    ("slowest", "Slowest answers"),
)
"""(element id, heading) of every section, in page order."""

_STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 0.9em; }
"""


def render_page(report: Mapping[str, Any], title: str = "bidsim replay") -> str:
    from bidder.replay.html import plots  # matplotlib: only when a page is rendered

    bodies = {
        "summary": _summary(report),
        "latency": _latency(report, plots),
        "timeline": plots.timeline(report["timeline"]),
        "no-bids": _no_bids(report, plots),
        "ssps": _ssps(report["ssps"]),
        "campaigns": _campaigns(report, plots),
        "pacing": _pacing(report, plots),
        "duplicates": _duplicates(report),
        "exchange": _exchange(report),
        "slowest": _slowest(report.get("slowest_answers")),
    }
    return document(title, [(key, heading, bodies[key]) for key, heading in SECTIONS])


def document(title: str, sections: Iterable[tuple[str, str, str]]) -> str:
    """The page around its sections, each (element id, heading, HTML body)."""
    body = "\n".join(
        f'<section id="{key}">\n<h2>{escape(heading)}</h2>\n{html}\n</section>'
        for key, heading, html in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def _summary(report: Mapping[str, Any]) -> str:
    corrected = report["latency_ms"]["corrected"]
    auction = report["auction"]
    return _pairs(
        [
            ("requests (measured)", f"{report['requests']:,}"),
            ("warm-up requests", f"{report['warmup_requests']:,}"),
            ("achieved rate (req/s)", f"{report['rate_rps']:,.1f}"),
            ("p50 / p99 / max (ms, corrected)", _ms(corrected, "p50", "p99", "max")),
            (
                f"within the {report['deadline_ms']:g} ms deadline",
                f"{report['within_deadline_share']:.2%}",
            ),
            (
                "timeouts / transport errors",
                f"{report['timeouts']:,} / {report['transport_errors']:,}",
            ),
            ("bids / wins", f"{auction['bids']:,} / {auction['wins']:,}"),
            ("spend (USD)", f"{auction['spend_micros'] / 1_000_000:,.6f}"),
        ]
    )


def _latency(report: Mapping[str, Any], plots: Any) -> str:
    histograms = {
        name: HdrHistogram.decode(encoded) for name, encoded in report["latency_histograms"].items()
    }
    rows = [
        [name.replace("_", "."), *(f"{report['latency_ms'][k][name]:.3f}" for k in histograms)]
        for name in ("p50", "p90", "p99", "p99_9", "max")
    ]
    note = (
        ""
        if report["p99_9_reliable"]
        else ('<p class="note">p99.9 from fewer than 100,000 samples: unreliable.</p>')
    )
    return (
        plots.latency_percentiles(histograms, report["deadline_ms"])
        + table(["ms", *histograms], rows)
        + note
    )


def _no_bids(report: Mapping[str, Any], plots: Any) -> str:
    reasons = report["nbr_reasons"]
    if not reasons:
        return '<p class="note">No 204 answers.</p>'
    total = sum(reasons.values())
    rows = [[name, f"{n:,}", f"{n / total:.2%}"] for name, n in reasons.items()]
    return plots.no_bid_reasons(reasons) + table(["reason", "204s", "share"], rows)


def _ssps(ssps: Mapping[str, Mapping[str, Any]]) -> str:
    rows = [
        [
            name,
            f"{s['requests']:,}",
            f"{s['no_bid_share']:.2%}",
            f"{s['throttled']:,}",
            f"{s['timeouts']:,}",
            _ms(s["latency_ms"]["corrected"], "p50"),
            _ms(s["latency_ms"]["corrected"], "p99"),
            _ms(s["latency_ms"]["corrected_204"], "p99"),
        ]
        for name, s in ssps.items()
    ]
    head = ["SSP", "requests", "204s", "throttled", "timeouts", "p50 ms", "p99 ms", "204 p99 ms"]
    return table(head, rows)


def _campaigns(report: Mapping[str, Any], plots: Any) -> str:
    campaigns = report["campaigns"]
    rows = [
        [
            name,
            f"{c['bids']:,}",
            f"{c['wins']:,}",
            f"{c['win_rate']:.2%}",
            f"{c['spend_micros'] / 1_000_000:,.6f}",
            _share(c["spend_share_of_budget"]),
            _share(c["spend_vs_target"]),
            f"{c['ecpm_usd']:.4f}",
            f"{c['avg_bid_cpm_usd']:.4f}",
            _count(c.get("requests_eligible")),
            _count(c.get("capped_no_bids")),
            "-" if c.get("avg_shading") is None else f"{c['avg_shading']:.4f}",
            _count(c.get("over_cap")),
            _count(c.get("clicks")),
            _share(c.get("ctr")),
        ]
        for name, c in campaigns.items()
    ]
    head = ["campaign", "bids", "wins", "win rate", "spend USD", "of budget", "vs target",
            "eCPM", "avg bid CPM", "eligible", "capped", "shading", "over cap",
            "clicks (recorded model)", "CTR"]  # fmt: skip
    sources = _pairs(report["campaign_sources"].items())
    return (
        table(head, rows)
        + '<p class="note">Where each figure comes from:</p>'
        + sources
        + plots.spend_curves(campaigns)
    )


def _pacing(report: Mapping[str, Any], plots: Any) -> str:
    """The pacing settings the bidder ran with and, on the stream's clock, the day's
    spend per hour against the target with the live and offline figures."""
    settings, day = report.get("pacing"), report.get("pacing_day")
    parts = [
        _pairs((k, _setting(v)) for k, v in settings.items())
        if settings
        else '<p class="note">Pacing settings: set by the bidder at --target.</p>'
    ]
    if report.get("pacing_day_settings"):
        parts.append('<p class="note">On the stream\'s clock (simulated time):</p>')
        parts.append(_pairs((k, _setting(v)) for k, v in report["pacing_day_settings"].items()))
    if not day:
        parts.append(
            '<p class="note">No pacing day: the replay ran on the real clock, or no'
            " campaign's target covers the whole simulated day.</p>"
        )
        return "".join(parts)
    rows = [
        [
            name,
            "-" if entry.get("supply_ratio") is None else f"{entry['supply_ratio']:.2f}x",
            *(_day_cell(entry, key) for key in PACING_KEYS),
            _offline_eod_range(entry),
            admitted_text(entry),
            limits_text(entry.get("limits") or {}).removeprefix("limits: "),
        ]
        for name, entry in day.items()
    ]
    head = ["campaign", "supply", "EOD spend", "max cum error", "hours in band",
            "offline EOD range", "offline on the supply live let through", "limits"]  # fmt: skip
    parts.append(
        '<p class="note">Spend per simulated hour (bars) against the pacing target (steps),'
        " and the offline simulator's spend on the same day where it ran (dashed).</p>"
    )
    parts.append(plots.pacing_day(day))
    parts.append(table(head, rows))
    parts.append(
        '<p class="note">Each figure: live | offline simulator (docs/pacing.md). Supply:'
        f" {escape(supply_text(day))}.</p>"
    )
    lines = render_shed(report.get("pacing_day_shed") or {}).splitlines()
    shed = "; ".join(line.strip() for line in lines)
    parts.append(f'<p class="note">{escape(shed)}.</p>')
    return "".join(parts)


def _offline_eod_range(entry: Mapping[str, Any]) -> str:
    """The least and greatest EOD spend of the simulated days."""
    bounds = (entry.get("offline_range") or {}).get("eod_spend_ratio")
    return f"{bounds[0]:.1%}-{bounds[1]:.1%}" if bounds else "-"


def _setting(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _day_cell(entry: Mapping[str, Any], key: str) -> str:
    offline = entry.get("offline") or {}
    live = f"{entry['live'][key]:.1%}"
    return f"{live} | {offline[key]:.1%}" if key in offline else f"{live} | -"


def _duplicates(report: Mapping[str, Any]) -> str:
    latency = report["latency_ms"]
    rows = [
        [label, _ms(latency[key], "p50"), _ms(latency[key], "p99")]
        for label, key in (
            ("every bid", "corrected_200"),
            ("bids that held their claim", "corrected_200_held"),
            ("bids that did not", "corrected_200_not_held"),
        )
    ]
    return _pairs(report["duplicate_auctions"].items()) + table(
        ["bid latency (corrected)", "p50 ms", "p99 ms"], rows
    )


def _exchange(report: Mapping[str, Any]) -> str:
    """The response-rate rule's effect and the viewable wins (absent from older reports)."""
    pushback, views = report.get("pushback"), report.get("viewability")
    parts = []
    if pushback is None or not pushback["enabled"]:
        parts.append('<p class="note">Pushback off: every scheduled request was sent.</p>')
    else:
        lost = pushback["estimated_spend_lost_micros"]
        parts.append(
            _pairs(
                [
                    ("requests withheld", f"{pushback['requests_withheld']:,}"),
                    ("lowest share sent", f"{pushback['min_share_sent']:.0%}"),
                    ("share sent at the end", f"{pushback['final_share_sent']:.0%}"),
                    ("estimated spend lost (USD)", f"{lost / 1_000_000:,.6f}"),
                ]
            )
            + f'<p class="note">Spend lost: {escape(pushback["spend_lost_estimate"])}.</p>'
        )
    if views is not None:
        rows = [
            [fmt or "unknown", f"{n:,}", f"{views['viewable'].get(fmt, 0):,}"]
            for fmt, n in views["wins"].items()
        ]
        parts.append(table(["format", "wins", "viewable"], rows))
        parts.append(
            _pairs(
                [
                    (
                        "view notices ok / failed",
                        f"{views['notices_ok']:,} / {views['notices_failed']:,}",
                    )
                ]
            )
        )
    return "".join(parts)


def _slowest(slowest: Mapping[str, Any] | None) -> str:
    if not slowest or not slowest["answers"]:
        return '<p class="note">No answer carried the bidder\'s stage times.</p>'
    rows = [
        [
            a["request_id"],
            a["ssp"],
            a["outcome"],
            f"{a['corrected_ms']:.3f}",
            f"{a['outside_handler_ms']:.3f}",
            ", ".join(f"{name} {us:,.0f}" for name, us in a["stages_us"].items()),
        ]
        for a in slowest["answers"]
    ]
    head = ["request id", "SSP", "outcome", "ms", "outside the handler ms", "stages (µs)"]
    return table(head, rows) + (
        f'<p class="note">Of {slowest["timed_answers"]:,} answers with stage times.</p>'
    )


def _pairs(items: Iterable[tuple[str, object]]) -> str:
    return table([], [[str(k).replace("_", " "), str(v)] for k, v in items])


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    header = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>" if head else ""
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table>{header}{body}</table>"


def _ms(summary: Mapping[str, float], *names: str) -> str:
    return " / ".join(f"{summary[name]:.3f}" for name in names)


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.3g}%"
