"""People with several ids, capped with the identity graph off and on, per cap class.

A multi-id stream (``bidsim gen --multi-id``, heavy people so caps bite) is replayed
against a full bidder (two workers, the reconciler, a private Valkey) bidding for one
campaign per cap class, each with the same day cap, with the exchange's notices on;
once without an identity graph, once with the generator's ground truth as the graph
(``bidsim identity build --people``). The billed impressions (ledger in Kinesis,
joined with their signed tokens) are judged by ``fcap.audit`` per *person*: every user
key is mapped back to the person it belongs to by the ground truth, whatever key the
bidder capped under. A person is *over cap* for a class when one of its impressions
came when the person had already had the limit counting; *beyond bids in flight* when
the impressions already billed at that instant were at the limit too.

Fallback keys (``--fallback``): a stream where some faces send no id at all
(``gen --anonymous-share``) is replayed twice with the graph on, the class campaigns
first without a fallback, then with ``fallback: household``: anonymous requests are
then capped under their household key instead of bid on unchecked.

    .venv/bin/python scripts/identity_caps.py          # prints one JSON object
    .venv/bin/python scripts/identity_caps.py --fallback
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bidder.adapters.aws import aws_client
from bidder.bidstream.generator import generate
from bidder.bidstream.identity_truth import person_keys, truth_graph
from bidder.bidstream.stream import read_stream
from bidder.chaos.harness import chaos_settings
from bidder.core.campaign_docs import campaign_to_doc
from bidder.core.campaigns import CAP_CLASSES, Campaign, CapPolicy, Creative, FrequencyCap
from bidder.core.tokens import NoticeClaims, TokenSigner
from bidder.replay.admin_metrics import metric
from bidder.replay.ledger_audit import read_ledger
from bidder.replay.notice_recorder import NoticeRecorder
from bidder.replay.replayer import ReplayOptions, replay
from bidder.serve.server import running_bidder
from bidder.stack.local import LocalStack
from fcap.audit import cap_over_delivery, claims_from_notice_urls, counted_times
from fcap.rules import build_subjects

LIMIT = 2
WORKERS = 2
_KEY = "identity-caps-notice-key-" + "i" * 32
_SIGNER = TokenSigner({"k1": _KEY.encode()}, "k1")


@dataclass(frozen=True, slots=True)
class Plan:
    requests: int = 3_000
    rate: float = 300.0
    seed: int = 23
    heavy_people: int = 20
    heavy_share: float = 0.5
    graph_people: int = 3_000
    """People in the graph (and in the ground truth the audit maps keys by)."""
    anonymous_share: float = 0.0
    """Share of faces that send no id (``generate(..., anonymous_share=)``)."""
    limit: int = LIMIT
    """Each class campaign's day cap."""


Runs = Mapping[str, tuple[bool, str, tuple[str, ...]]]
"""Run name -> (identity graph on, the class campaigns' ``cap_policy.fallback``, the
classes whose campaigns are in the book)."""
GRAPH_RUNS: Runs = {
    "graph_off": (False, "none", tuple(CAP_CLASSES)),
    "graph_on": (True, "none", tuple(CAP_CLASSES)),
}
FALLBACK_RUNS: Runs = {
    "fallback_none": (True, "none", tuple(CAP_CLASSES)),
    "fallback_household": (True, "household", tuple(CAP_CLASSES)),
}
CLASS_RUNS: Runs = {name: (True, "none", (name,)) for name in CAP_CLASSES}
"""One class campaign alone per replay of the same stream: each class meets the same
requests and wins, so their reads and over-delivery compare."""


def campaign_id(name: str) -> str:
    """Strictest first: equal bids go to the smallest id, so each class bids on a person
    once the stricter ones have capped them, and a loose class does not take every bid."""
    return f"cap-{_STRICTEST_FIRST.index(name) + 1}-{name}"


_STRICTEST_FIRST = tuple(reversed(CAP_CLASSES))


def class_campaigns(fallback: str = "none", limit: int = LIMIT) -> list[Campaign]:
    """One broad banner campaign per cap class, each with a campaign day cap of ``limit``."""
    creative = Creative(
        id="mrec", format="banner", markup="<b/>", adomain=("caps.example",), w=300, h=250
    )
    return [
        Campaign(
            id=campaign_id(name),
            advertiser=f"Advertiser {name}",
            daily_budget_micros=10_000_000_000,
            base_bid_cpm_micros=5_000_000,
            max_bid_cpm_micros=10_000_000,
            creatives=(creative,),
            frequency_caps=(FrequencyCap("campaign", "fixed", 86_400, limit),),
            cap_policy=CapPolicy.of_class(name, fallback=fallback),
        )
        for name in CAP_CLASSES
    ]


async def measure(
    stack_of: Any, aws_endpoint: str, workdir: Path, plan: Plan, runs: Runs = GRAPH_RUNS
) -> dict[str, Any]:
    """Each run's figures; ``stack_of()``: a new private LocalStack context per run."""
    stream = workdir / "multi.jsonl.gz"
    generate(
        stream, plan.requests, plan.seed, plan.rate,
        heavy_users=plan.heavy_people, heavy_share=plan.heavy_share, multi_id=True,
        anonymous_share=plan.anonymous_share,
    )  # fmt: skip
    graph = workdir / "graph.json"
    graph.write_bytes(orjson.dumps(truth_graph(plan.graph_people).to_doc()))
    person_of = {key: f"person:{i}" for i in range(plan.graph_people) for key in person_keys(i)}
    figures = {}
    for name, (graph_on, fallback, classes) in runs.items():
        with stack_of() as stack:
            run_dir = workdir / name
            run_dir.mkdir()
            campaigns = run_dir / "campaigns.json"
            book = [c for c in class_campaigns(fallback, plan.limit) if _class_of(c) in classes]
            docs = [campaign_to_doc(c) for c in book]
            campaigns.write_bytes(orjson.dumps({"version": 1, "campaigns": docs}))
            graph_path = graph if graph_on else None
            figures[name] = await _run(
                stack, stream, campaigns, graph_path, run_dir, person_of, plan.limit
            )
    return figures


async def _run(
    stack: LocalStack,
    stream: Path,
    campaigns: Path,
    graph: Path | None,
    workdir: Path,
    person_of: Mapping[str, str],
    limit: int,
) -> dict[str, Any]:
    notices = NoticeRecorder()
    tag = uuid.uuid4().hex[:10]
    settings = chaos_settings(
        stack, workdir, reconciler=True, workers=WORKERS, deadline_ms=50.0,
        fcap_check_timeout_ms=25.0, public_url=notices.public_url,
        notice_keys=(("k1", _KEY),), campaigns_path=campaigns, identity_graph=graph,
        **{n: f"idcaps-{n.replace('_', '-')}-{tag}" for n in _RESOURCES},
    )  # fmt: skip
    notices.target = f"http://{settings.host}:{settings.port}"
    async with notices, running_bidder(settings) as bidder:
        result = await replay(
            list(read_stream(stream)),
            f"{bidder.bid_url}/openrtb2/bid",
            ReplayOptions(deadline_ms=settings.deadline_ms),
        )
        reads = {
            name: await metric(bidder.admin_url, "bidsim_fcap_reads_total", {"cap_class": name})
            for name in CAP_CLASSES
        }
        never_counted = await metric(
            bidder.admin_url, "bidsim_fcap_never_counted_passes_total", {"cap_class": "loose"}
        )
        errors = await metric(bidder.admin_url, "bidsim_fcap_store_errors_total", {"op": "check"})
        fallback_checks = await metric(
            bidder.admin_url, "bidsim_fcap_fallback_checks_total", {"fallback": "household"}
        )
    kinesis = aws_client("kinesis", stack.aws_endpoint, settings.aws_region)
    ledger = await asyncio.to_thread(read_ledger, kinesis, settings.spend_stream)
    claims = {c.bid_id: c for c in claims_from_notice_urls(notices.tokens(), _SIGNER)}
    billed = [claims[b] for b in (int(e.bid_id) for e in ledger) if b in claims]
    counted_ms = counted_times(notices.answers, _SIGNER)
    delivered = [_as_person(c, person_of) for c in billed]
    return {
        "requests": result.requests,
        "bids": result.auction.bids,
        "billed": len(delivered),
        "capped": result.nbr_reasons["capped"],
        "check_errors": int(errors),
        "unchecked_wins": result.auction.unchecked_wins,
        "fallback_checks": int(fallback_checks),
        "billed_without_user_key": sum(not c.user_key for c in billed),
        "cap_reads": {name: int(n) for name, n in reads.items()},
        "loose_passes_never_counted": int(never_counted),
        "classes": _per_class(delivered, counted_ms, limit, settings.deadline_ms),
    }


_RESOURCES = ("campaigns_table", "spend_stream", "spend_table", "profiles_table", "archive_bucket")


def _as_person(claims: NoticeClaims, person_of: Mapping[str, str]) -> NoticeClaims:
    """The claims with the user key replaced by the person's (ground truth), so the
    audit counts people; a graph cluster key maps through any of its member keys. An
    impression bid without a user key but with a household key (a face that sent no id)
    is judged as its household, whether or not the bidder capped it under that key."""
    if claims.user_key is None and claims.household_key is not None:
        return dataclasses.replace(claims, user_key=claims.household_key)
    key = claims.user_key or ""
    person = person_of.get(key[2:] if key.startswith("g:") else key)
    return dataclasses.replace(claims, user_key=person or claims.user_key)


def _class_of(campaign: Campaign) -> str:
    return campaign.cap_policy.cap_class


def _per_class(
    delivered: Iterable[NoticeClaims], counted_ms: Mapping[int, int], limit: int, deadline_ms: float
) -> dict[str, Any]:
    subjects = build_subjects(class_campaigns(limit=limit))
    audit = cap_over_delivery(delivered, subjects, counted_ms=counted_ms, deadline_ms=deadline_ms)
    out: dict[str, Any] = {}
    for name in CAP_CLASSES:
        above = [a for a in audit.above_cap if a.campaign_id == campaign_id(name)]
        out[name] = {
            "over_cap_people": len({a.counter for a in above}),
            "over_cap_people_beyond_in_flight": len(
                {a.counter for a in above if a.in_flight is False}
            ),
            "impressions_above_cap": len(above),
            "most_above_cap_one_person": max(Counter(a.counter for a in above).values(), default=0),
        }
    return out
