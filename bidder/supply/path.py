"""Supply-path dedup, the pure part: which auction a request belongs to, and how good its path is.

The same impression often reaches a DSP through several SSPs within a few
milliseconds (a publisher's header bidding wrapper asks each of them; resellers resell).
Every copy carries the auction's transaction id, ``source.tid``, so the tid names the
auction; ``auction_id`` says whether a request's tid is usable as a dedup key.

The path a copy took is ranked, lower is better, lexicographically by

1. the configured SSP preference (``--ssp-preference a,b``: a before b; SSPs not
   listed rank after every listed one, equal among themselves);
2. the schain length in hops: a one-node chain is the publisher selling directly
   through the SSP. A request without a chain, with a malformed one, or with an
   incomplete one (``complete`` 0: upstream nodes are missing) has no provable length
   and ranks after every known length (``UNKNOWN_HOPS``);
3. the SSP's configured fee in basis points (``--ssp-fee-bps``, default 0);
4. the SSP name, only so that sorting is deterministic.

The first three make the ``PathKey``: two copies with equal keys are equally good
paths, and the name never decides which one a DSP bids on (see ``is_top_ranked``).

A copy is *top-ranked* when no copy of the auction through another SSP could have a
strictly better key: another SSP's best possible key is its preference position, one
hop and its own fee (an unlisted SSP: after the listed ones, one hop, fee 0). A
top-ranked copy claims the auction at once. Any other copy holds its claim back for a
moment so that a better copy arriving just after it can claim first (``hold_s``), but
only when such a copy can exist (``better_path_possible``): another SSP can sell the
inventory only if the publisher's ads.txt or app-ads.txt authorizes it (its best chain
is then one hop with a DIRECT record, two with RESELLER records only) or it is already
a seller on this copy's chain (as many hops as its place there). That needs each SSP's
advertising system domain (``--ssp-domain``); without them, or without the publisher's
file, any SSP's best possible key is assumed, as for ``is_top_ranked``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bidder.supply.ads_txt import AdsTxt

MAX_TID_CHARS = 128
"""A longer tid is not used as a dedup key (it would make an outsized Valkey key)."""
UNKNOWN_HOPS = 1 << 16
"""The hops of a path whose length cannot be told; after any real chain."""
MAX_FEE_BPS = 10_000

PathKey = tuple[int, int, int]
"""(preference position, hops, fee in bps): lower is better; equal keys are equal paths."""
PathRank = tuple[int, int, int, str]
"""The key and the SSP name: a total, deterministic order of copies."""


class PathPolicy:
    """The operator's supply-path preferences: SSP order and fees (immutable)."""

    __slots__ = (
        "_best_listed",
        "_fees",
        "_position",
        "domains",
        "fees_bps",
        "preference",
    )

    def __init__(
        self,
        preference: Iterable[str] = (),
        fees_bps: Mapping[str, int] | None = None,
        domains: Mapping[str, str] | None = None,
    ) -> None:
        """``domains``: each SSP partner's advertising system domain (its ``asi``);
        when given, it names every SSP a copy of an auction can come through."""
        self.preference: tuple[str, ...] = tuple(preference)
        self.fees_bps: tuple[tuple[str, int], ...] = tuple(sorted((fees_bps or {}).items()))
        self.domains: tuple[tuple[str, str], ...] = tuple(
            sorted((ssp, domain.lower()) for ssp, domain in (domains or {}).items())
        )
        self._position = {ssp: n for n, ssp in enumerate(self.preference)}
        self._fees = dict(self.fees_bps)
        # Every listed SSP's best possible key, best first: what another copy could reach.
        self._best_listed = sorted(
            ((n, 1, self._fees.get(ssp, 0)), ssp) for n, ssp in enumerate(self.preference)
        )

    def __repr__(self) -> str:
        return (
            f"PathPolicy(preference={self.preference!r}, fees_bps={dict(self.fees_bps)!r},"
            f" domains={dict(self.domains)!r})"
        )

    def _identity(self) -> tuple[Any, ...]:
        return (self.preference, self.fees_bps, self.domains)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PathPolicy):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def position(self, ssp: str) -> int:
        """The SSP's place in the preference order; unlisted SSPs share the last place."""
        return self._position.get(ssp, len(self.preference))

    def fee_bps(self, ssp: str) -> int:
        return self._fees.get(ssp, 0)

    def key(self, ssp: str, schain: Mapping[str, Any] | None) -> PathKey:
        return (self.position(ssp), hops(schain), self.fee_bps(ssp))

    def rank(self, ssp: str, schain: Mapping[str, Any] | None) -> PathRank:
        return (*self.key(ssp, schain), ssp)

    def best_other_key(self, ssp: str) -> PathKey:
        """The best key a copy through any SSP other than ``ssp`` could have."""
        for key, listed in self._best_listed:  # a listed SSP ranks before any unlisted one
            if listed != ssp:
                return key
        return (len(self.preference), 1, 0)

    def is_top_ranked(self, ssp: str, schain: Mapping[str, Any] | None) -> bool:
        """No copy through any other SSP could rank strictly better than this one."""
        return self.key(ssp, schain) <= self.best_other_key(ssp)

    def better_path_possible(
        self, ssp: str, schain: Mapping[str, Any] | None, ads: AdsTxt | None
    ) -> bool:
        """A copy of this auction through another SSP that may sell this inventory
        (``ads``: the publisher's ads.txt or app-ads.txt, None when there is none)
        could rank strictly better than this one (module docstring)."""
        own = self.key(ssp, schain)
        if own <= self.best_other_key(ssp):
            return False
        if ads is None or not self.domains:
            return True
        on_chain = _chain_hops(schain)
        for other, domain in self.domains:
            if other == ssp:
                continue
            hops = on_chain.get(domain, UNKNOWN_HOPS)
            relationship = ads.systems.get(domain)
            if relationship is not None:
                hops = min(hops, 1 if relationship == "DIRECT" else 2)
            if hops < UNKNOWN_HOPS and (self.position(other), hops, self.fee_bps(other)) < own:
                return True
        return False


DEFAULT_POLICY = PathPolicy()


def hops(schain: Mapping[str, Any] | None) -> int:
    """The number of sellers on a complete, well-formed chain; else ``UNKNOWN_HOPS``."""
    if schain is None or schain.get("complete") != 1:
        return UNKNOWN_HOPS
    nodes = schain.get("nodes")
    if not isinstance(nodes, list) or not nodes or not all(_is_node(n) for n in nodes):
        return UNKNOWN_HOPS
    return min(len(nodes), UNKNOWN_HOPS - 1)


def _chain_hops(schain: Mapping[str, Any] | None) -> dict[str, int]:
    """Advertising system domain -> the hops of a chain that ends at its first node on
    ``schain`` (its 1-based place); empty for a chain that is not well formed."""
    nodes = schain.get("nodes") if schain is not None else None
    if not isinstance(nodes, list) or not all(_is_node(n) for n in nodes):
        return {}
    hops: dict[str, int] = {}
    for place, node in enumerate(nodes, start=1):
        hops.setdefault(node["asi"].lower(), place)
    return hops


def _is_node(node: Any) -> bool:
    if not isinstance(node, dict):
        return False
    asi, sid = node.get("asi"), node.get("sid")
    return isinstance(asi, str) and isinstance(sid, str) and bool(asi) and bool(sid)


def auction_id(tid: str | None) -> str | None:
    """The dedup identity of a request with transaction id ``tid``, or None (not deduped)."""
    if tid is None or not 0 < len(tid) <= MAX_TID_CHARS:
        return None
    return tid


def hold_s(top_ranked: bool, hold: float, remaining: float, margin: float) -> float:
    """How long a copy waits before it claims: ``hold`` for a copy that is not
    top-ranked, but at most half the time left before the deadline's ``margin``
    (``remaining``: the time left until the deadline). The other half is the claim's: on
    a loaded machine a round trip can take milliseconds, and a claim that does not
    answer in time fails open (a possible second bid). Never negative."""
    if top_ranked or hold <= 0:
        return 0.0
    return max(0.0, min(hold, (remaining - margin) / 2))


def best(ranks: Iterable[PathRank]) -> PathKey | None:
    """The best key among ``ranks`` (None when empty)."""
    keys = [(rank[0], rank[1], rank[2]) for rank in ranks]
    return min(keys) if keys else None


class PolicyError(ValueError):
    """A preference or fee option is malformed; the message names the option."""


def parse_preference(text: str) -> tuple[str, ...]:
    """``"ssp-a,ssp-b"`` -> ``("ssp-a", "ssp-b")``; raises PolicyError."""
    if not text.strip():
        return ()
    names = tuple(name.strip() for name in text.split(","))
    if any(not name for name in names):
        raise PolicyError("--ssp-preference: an SSP name is empty (expected a,b,c)")
    if len(set(names)) != len(names):
        raise PolicyError("--ssp-preference: an SSP is listed twice")
    return names


def parse_fees(specs: Iterable[str]) -> dict[str, int]:
    """``["ssp-a=15,ssp-b=0"]`` -> ``{"ssp-a": 15, "ssp-b": 0}``; raises PolicyError
    naming every malformed entry (each spec may hold several, comma-separated)."""
    pairs = _pairs(
        specs,
        "--ssp-fee-bps",
        f"SSP=BPS with BPS 0-{MAX_FEE_BPS}",
        lambda value: value.isdigit() and int(value) <= MAX_FEE_BPS,
    )
    return {ssp: int(value) for ssp, value in pairs.items()}


def parse_domains(specs: Iterable[str]) -> dict[str, str]:
    """``["ssp-a=ads.a.example"]`` -> ``{"ssp-a": "ads.a.example"}`` (lower case);
    raises PolicyError naming every malformed entry."""
    pairs = _pairs(specs, "--ssp-domain", "SSP=DOMAIN", lambda value: "." in value)
    return {ssp: domain.lower() for ssp, domain in pairs.items()}


def _pairs(
    specs: Iterable[str], option: str, form: str, valid: Callable[[str], bool]
) -> dict[str, str]:
    """``NAME=VALUE`` entries, comma-separated in each spec; PolicyError names every
    entry that is malformed or repeats a name."""
    found: dict[str, str] = {}
    problems = []
    for spec in (part.strip() for text in specs for part in text.split(",") if part.strip()):
        name, sep, value = (field.strip() for field in spec.partition("="))
        if not sep or not name or not valid(value):
            problems.append(f"{spec!r}: expected {form}")
        elif name in found:
            problems.append(f"{spec!r}: {name} given twice")
        else:
            found[name] = value
    if problems:
        raise PolicyError(f"{option}: " + "; ".join(problems))
    return found
