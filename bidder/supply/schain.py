"""Stage 4, supply chain: schain against sellers.json, the seller against ads.txt.

Pure. ``verify`` looks at one request once and returns a ``Verdict``: the no-bid
reason under the lenient policy and under the strict one (None: acceptable).
``apply_policy`` then keeps each candidate whose campaign's policy accepts the
request, so a request costs one verification however many campaigns it reaches.

The chain is the parsed request's ``schain`` (2.6 ``source.schain``, or 2.5
``source.ext.schain``; the parser already picked one). Nodes run from the first
seller (the publisher's own account) to the last (the one selling to us). Checks,
in order, each with its reason:

====================  =============================  ===========================
check                 lenient                        strict
====================  =============================  ===========================
chain present         missing is fine                SCHAIN_MISSING
well formed           SCHAIN_INCOMPLETE (no nodes,   same
                      a node without asi/sid)
complete = 1          0 is fine                      SCHAIN_INCOMPLETE
node in its asi's     listed or asi has no file;     listed, not confidential,
sellers.json          else SCHAIN_UNKNOWN_SELLER     type fits the position;
                                                     else SCHAIN_UNKNOWN_SELLER
ads.txt/app-ads.txt   none cached is fine; present   ADS_TXT_UNAVAILABLE when
of the domain/bundle  but the last node not in it:   none is cached; the same
                      ADS_TXT_UNAUTHORIZED           unauthorized rule
====================  =============================  ===========================

"Fits the position": the first node's seller is a PUBLISHER (or BOTH), later nodes'
are INTERMEDIARY (or BOTH). ads.txt rule: the last node's (asi, sid) must be listed;
for a one-node chain as DIRECT (the publisher sells through its own account), for a
longer chain DIRECT or RESELLER. Without a chain there is no seller to look up, so
ads.txt is only checked (strict: must exist) when a chain is present. A site is
looked up by ``site.domain`` and then its parent domains (``news.example.com`` falls
back to ``example.com``, whose file covers its subdomains); an app by its bundle.

Lenient refuses only on evidence against the request (a seller an ad system says it
does not have, a seller the publisher did not authorize); strict also refuses what it
cannot prove. So every lenient refusal is a strict refusal too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from bidder.core.nobid import NoBid
from bidder.decide.eligibility import Candidate
from bidder.supply.ads_txt import AdsTxt
from bidder.supply.sellers_json import SellersJson

STRICT = "strict"
_FIRST_TYPES = frozenset({"PUBLISHER", "BOTH"})
_LATER_TYPES = frozenset({"INTERMEDIARY", "BOTH"})


class SupplyFiles(NamedTuple):
    """The caches the check reads: plain mappings, so tests need no I/O."""

    sellers: Mapping[str, SellersJson]
    """By advertising system domain (a node's ``asi``), lower case."""
    ads_txt: Mapping[str, AdsTxt]
    """By site domain, lower case."""
    app_ads_txt: Mapping[str, AdsTxt]
    """By app bundle (store id), lower case."""


class Verdict(NamedTuple):
    lenient: NoBid | None
    strict: NoBid | None


PASS = Verdict(None, None)


def verify(
    schain: dict[str, Any] | None, domain: str | None, bundle: str | None, files: SupplyFiles
) -> Verdict:
    """The supply-chain verdict for one request under both policies."""
    if schain is None:
        return Verdict(None, NoBid.SCHAIN_MISSING)
    nodes = _nodes(schain)
    if nodes is None:
        return Verdict(NoBid.SCHAIN_INCOMPLETE, NoBid.SCHAIN_INCOMPLETE)
    lenient, strict = _sellers(nodes, files.sellers)
    if lenient is not None:
        return Verdict(lenient, lenient)
    ads = ads_file(domain, bundle, files)
    if ads is not None:
        relationship = ads.authorized.get(nodes[-1])
        if relationship is None or (len(nodes) == 1 and relationship != "DIRECT"):
            return Verdict(NoBid.ADS_TXT_UNAUTHORIZED, NoBid.ADS_TXT_UNAUTHORIZED)
    elif strict is None:
        strict = NoBid.ADS_TXT_UNAVAILABLE
    if schain.get("complete") != 1:
        strict = NoBid.SCHAIN_INCOMPLETE  # strict's first check: it names the request
    return Verdict(None, strict)


def _nodes(schain: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(asi lower case, sid) per node, or None when the chain is malformed."""
    raw = schain.get("nodes")
    if not isinstance(raw, list) or not raw:
        return None
    nodes = []
    for node in raw:
        asi = node.get("asi") if isinstance(node, dict) else None
        sid = node.get("sid") if isinstance(node, dict) else None
        if not isinstance(asi, str) or not isinstance(sid, str) or not asi or not sid:
            return None
        nodes.append((asi.lower(), sid))
    return nodes


def _sellers(
    nodes: list[tuple[str, str]], sellers: Mapping[str, SellersJson]
) -> tuple[NoBid | None, NoBid | None]:
    """(lenient, strict) reasons from the sellers.json checks."""
    strict = None
    for position, (asi, sid) in enumerate(nodes):
        file = sellers.get(asi)
        if file is None:
            strict = NoBid.SCHAIN_UNKNOWN_SELLER
            continue
        seller = file.sellers.get(sid)
        if seller is None:
            return NoBid.SCHAIN_UNKNOWN_SELLER, NoBid.SCHAIN_UNKNOWN_SELLER
        types = _FIRST_TYPES if position == 0 else _LATER_TYPES
        if seller.is_confidential or seller.seller_type not in types:
            strict = NoBid.SCHAIN_UNKNOWN_SELLER
    return None, strict


def ads_file(domain: str | None, bundle: str | None, files: SupplyFiles) -> AdsTxt | None:
    """The publisher's app-ads.txt (by bundle) or ads.txt (by domain, then its parent
    domains), None when none is cached."""
    if bundle is not None:
        return files.app_ads_txt.get(bundle)
    if domain is None:
        return None
    ads = files.ads_txt.get(domain)
    while ads is None and domain.count(".") > 1:
        domain = domain.split(".", 1)[1]
        ads = files.ads_txt.get(domain)
    return ads


def apply_policy(candidates: list[Candidate], verdict: Verdict) -> list[Candidate] | NoBid:
    """The candidates whose campaign's supply policy accepts ``verdict``, or why none."""
    if verdict.strict is None:
        return candidates
    if verdict.lenient is not None:
        return verdict.lenient
    kept = [c for c in candidates if c.campaign.supply_policy != STRICT]
    return kept if kept else verdict.strict
