"""Malformed bodies: what a real endpoint receives from broken or hostile clients.

Each kind starts from a realistic request (so it looks like the rest of the traffic up
to the fault) and breaks it in one way the parser must reject: the body is not JSON,
or is JSON with a wrong type or an empty ``imp``. ``huge`` is a ~100 KB body (a
numeric-looking string where a number belongs, as a naive ``float()`` would accept);
it is rare and all zeros, so it costs the stream file almost nothing.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from bidder.bidstream import inventory as inv

KINDS: inv.Weighted[str] = inv.Weighted(
    [
        ("truncated", 30.0),
        ("not_json", 14.0),
        ("imp_object", 12.0),
        ("bidfloor_string", 11.0),
        ("id_number", 10.0),
        ("empty_imp", 10.0),
        ("gdpr_string", 8.0),
        ("huge", 5.0),
    ]
)
HUGE_BYTES = 100_000
_NOT_JSON = (
    "<html><body><h1>502 Bad Gateway</h1></body></html>",
    "OK",
    "",
    "id=8f1c2a&imp=banner&w=300&h=250",
    "{'id': '1', 'imp': [{'id': '1'}]}",
)


def malformed_body(kind: str, doc: dict[str, Any], rng: random.Random) -> str:
    """A broken body of ``kind`` derived from the valid request ``doc`` (consumed)."""
    if kind == "truncated":
        text = orjson.dumps(doc).decode()
        return text[: rng.randint(1, len(text) - 1)]  # a strict prefix is never JSON
    if kind == "not_json":
        return rng.choice(_NOT_JSON)
    _break(kind, doc, rng)
    return orjson.dumps(doc).decode()


def _break(kind: str, doc: dict[str, Any], rng: random.Random) -> None:
    first = doc["imp"][0]
    if kind == "imp_object":
        doc["imp"] = first
    elif kind == "bidfloor_string":
        first["bidfloor"] = f"{rng.uniform(0.1, 3.0):.2f}"
    elif kind == "id_number":
        doc["id"] = rng.getrandbits(40)
    elif kind == "empty_imp":
        doc["imp"] = []
    elif kind == "gdpr_string":
        regs = doc["regs"].get("ext", doc["regs"])
        regs["gdpr"] = str(regs.get("gdpr", 1))
    elif kind == "huge":
        first["bidfloor"] = "0." + "0" * HUGE_BYTES + "1"
    else:
        raise ValueError(f"unknown malformed kind {kind!r}")
