"""sellers.json (IAB Tech Lab 1.0): a tolerant parser, a writer and the seller lookup.

An advertising system publishes ``https://<its domain>/sellers.json`` listing every
account (``seller_id``) it pays: ``seller_type`` PUBLISHER (the owner of the
inventory), INTERMEDIARY (a reseller) or BOTH; ``is_confidential`` 1 hides the name
and domain; ``is_passthrough`` 1 marks a seller that passes the inventory through
without being the payee.

Real files are messy, so ``parse_sellers_json`` never raises. It accepts a UTF-8 BOM,
and when the text is not JSON it retries once with typographic double quotes (U+201C,
U+201D, as pasted from word processors; the IAB's own sample has one) replaced by
ASCII ones. It keeps every usable seller and reports what it skipped and why: a
seller without an id, an unknown seller_type, a repeated id (the first wins). Text
that still is not a JSON object gives an empty file with that problem reported.
Values are normalized: seller_type upper case, domain lower case, numeric ids as text.
``write_sellers_json`` writes the normal form, so parse(write(x)) == x.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

SELLER_TYPES = ("PUBLISHER", "INTERMEDIARY", "BOTH")
_SMART_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"'})


@dataclass(frozen=True, slots=True)
class Seller:
    seller_id: str
    seller_type: str
    """'PUBLISHER', 'INTERMEDIARY' or 'BOTH'."""
    name: str | None = None
    domain: str | None = None
    is_confidential: bool = False
    is_passthrough: bool = False
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class SellersJson:
    sellers: dict[str, Seller] = field(default_factory=dict)
    """By seller_id: one probe per schain node."""
    version: str | None = None
    contact_email: str | None = None
    contact_address: str | None = None
    identifiers: tuple[tuple[str, str], ...] = ()
    skipped: tuple[str, ...] = field(default=(), compare=False)
    """What the parser dropped or repaired, one line each (not part of the content)."""


def parse_sellers_json(text: str | bytes) -> SellersJson:
    """Everything usable in a sellers.json file; never raises (see ``skipped``)."""
    problems: list[str] = []
    doc = _load(text, problems)
    if not isinstance(doc, dict):
        if doc is not None:
            problems.append("top level is not a JSON object")
        return SellersJson(skipped=tuple(problems))
    sellers: dict[str, Seller] = {}
    raw_sellers = doc.get("sellers")
    if not isinstance(raw_sellers, list):
        problems.append("no 'sellers' array")
        raw_sellers = []
    for n, raw in enumerate(raw_sellers):
        seller = _seller(raw, n, problems)
        if seller is None:
            continue
        if seller.seller_id in sellers:
            problems.append(f"sellers[{n}]: seller_id {seller.seller_id!r} repeated, first kept")
            continue
        sellers[seller.seller_id] = seller
    return SellersJson(
        sellers=sellers,
        version=_text(doc.get("version")),
        contact_email=_text(doc.get("contact_email")),
        contact_address=_text(doc.get("contact_address")),
        identifiers=_identifiers(doc.get("identifiers"), problems),
        skipped=tuple(problems),
    )


def _load(text: str | bytes, problems: list[str]) -> Any:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.removeprefix("\ufeff")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    repaired = text.translate(_SMART_QUOTES)
    if repaired != text:
        try:
            doc = orjson.loads(repaired)
        except orjson.JSONDecodeError:
            pass
        else:
            problems.append("typographic quotes replaced by ASCII quotes to parse")
            return doc
    problems.append("not JSON")
    return None


def _seller(raw: Any, n: int, problems: list[str]) -> Seller | None:
    where = f"sellers[{n}]"
    if not isinstance(raw, dict):
        problems.append(f"{where}: not an object")
        return None
    seller_id = raw.get("seller_id")
    if isinstance(seller_id, int) and not isinstance(seller_id, bool):
        seller_id = str(seller_id)
    if not isinstance(seller_id, str) or not seller_id.strip():
        problems.append(f"{where}: no seller_id")
        return None
    seller_type = raw.get("seller_type")
    seller_type = seller_type.strip().upper() if isinstance(seller_type, str) else None
    if seller_type not in SELLER_TYPES:
        problems.append(f"{where}: seller {seller_id!r} has seller_type {raw.get('seller_type')!r}")
        return None
    domain = _text(raw.get("domain"))
    return Seller(
        seller_id=seller_id.strip(),
        seller_type=seller_type,
        name=_text(raw.get("name")),
        domain=domain.lower() if domain else None,
        is_confidential=_flag(raw.get("is_confidential")),
        is_passthrough=_flag(raw.get("is_passthrough")),
        comment=_text(raw.get("comment")),
    )


def _identifiers(raw: Any, problems: list[str]) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append("identifiers is not an array")
        return ()
    out = []
    for item in raw:
        name = _text(item.get("name")) if isinstance(item, dict) else None
        value = _text(item.get("value")) if isinstance(item, dict) else None
        if name is None or value is None:
            problems.append("an identifier without name or value")
            continue
        out.append((name, value))
    return tuple(out)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _flag(value: Any) -> bool:
    # The spec says 0/1; files also carry true/false and "1".
    return value in (1, True, "1", "true")


def write_sellers_json(sellers_json: SellersJson) -> str:
    """The file in normal form (what the parser gives back unchanged), one seller a line."""
    head = []
    for key in ("version", "contact_email", "contact_address"):
        value = getattr(sellers_json, key)
        if value is not None:
            head.append(f"  {_json(key)}: {_json(value)},\n")
    if sellers_json.identifiers:
        ids = [{"name": n, "value": v} for n, v in sellers_json.identifiers]
        head.append(f'  "identifiers": {_json(ids)},\n')
    rows = ",\n".join(f"    {_json(_seller_doc(s))}" for s in sellers_json.sellers.values())
    body = f'  "sellers": [\n{rows}\n  ]\n' if rows else '  "sellers": []\n'
    return "{\n" + "".join(head) + body + "}\n"


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _seller_doc(seller: Seller) -> dict[str, Any]:
    doc: dict[str, Any] = {"seller_id": seller.seller_id, "seller_type": seller.seller_type}
    for key in ("name", "domain", "comment"):
        value = getattr(seller, key)
        if value is not None:
            doc[key] = value
    if seller.is_confidential:
        doc["is_confidential"] = 1
    if seller.is_passthrough:
        doc["is_passthrough"] = 1
    return doc
