"""bidder.openrtb.request against a plain reference judgement (tests/bidder/openrtb_reference.py).

Documents are generated around the BidRequest shape: requests of the right types with
any of the fields bidsim reads (2.5 and 2.6 locations together), unknown fields carrying
junk, then up to three of the fields the reference's schema names replaced by null, an
edge value of the field's kind (64-bit limits, a whole float for an integer, a bool,
an empty string or array, a floor out of range) or any JSON at all. The parser must
accept exactly what the reference accepts, and build the view the reference builds.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.openrtb.request import InvalidRequest, auction_source, parse_bid_request
from tests.bidder.json_strategies import json_values as any_json
from tests.bidder.openrtb_reference import (
    FLOOR,
    GDPR,
    INT,
    LENIENT,
    OBJECT,
    REQUEST,
    STR,
    STR_OR_OBJECT,
    TMAX,
    Ext,
    reference_view,
)

pytestmark = pytest.mark.long(15)

json_values = any_json(text_size=3, width=2, max_leaves=6)
ids = st.sampled_from(["1", "2", "a", "r-1"]) | st.text(min_size=1, max_size=6)
strings = st.sampled_from(
    ["", "x", "usd", "EUR", "IAB1", "News.Example", "https://u@Site.Example:81/p?q#f", "can"]
) | st.text(max_size=6)
small = st.integers(0, 400)
attrs = st.lists(st.integers(1, 17), max_size=3)
objects = st.dictionaries(st.text(max_size=3), json_values, max_size=2)


def _object(required: dict[str, Any] | None = None, **optional: Any) -> st.SearchStrategy[Any]:
    """Objects with the required fields, any of the optional ones, and unknown junk."""
    known = st.fixed_dictionaries(required or {}, optional=optional)
    names = [name for name in ("x", "ext", "wx") if name not in optional]
    unknown = st.dictionaries(st.sampled_from(names), json_values, max_size=1)
    return st.tuples(known, unknown).map(lambda both: {**both[1], **both[0]})


sizes = st.sampled_from([0, 1, 300, 250, 728, 90])
banners = _object(
    w=sizes, h=sizes, format=st.lists(_object(w=sizes, h=sizes), min_size=1, max_size=2),
    wmin=small, wmax=sizes, hmin=small, hmax=sizes, battr=attrs,
)  # fmt: skip
mimes = st.lists(st.sampled_from(["video/mp4", "audio/mpeg", "x"]), max_size=2)
videos = _object(
    mimes=mimes, minduration=small, maxduration=small, w=sizes, h=sizes, battr=attrs
)  # fmt: skip
natives = _object({"request": strings | objects}, battr=attrs)
pmps = _object(
    private_auction=st.integers(0, 1), deals=st.lists(_object({"id": ids}), max_size=2)
)  # fmt: skip
floors = st.floats(0, 100) | st.integers(0, 100) | st.sampled_from([0, 1e9, 1e9 + 1, -0.01])


MEDIA = {
    "banner": banners,
    "video": videos,
    "native": natives,
    "audio": _object(mimes=mimes, battr=attrs),
}
IMP_FIELDS = {
    "bidfloor": floors, "bidfloorcur": strings, "instl": st.integers(0, 1), "pmp": pmps,
    "tagid": strings,
}  # fmt: skip


@st.composite
def imps(draw: st.DrawFn, imp_id: str) -> dict[str, Any]:
    media = draw(st.sets(st.sampled_from(sorted(MEDIA)), min_size=1))
    required = {"id": st.just(imp_id), **{medium: MEDIA[medium] for medium in media}}
    return draw(_object(required, **IMP_FIELDS))


geos = _object(country=strings)
eids = st.lists(
    _object({"source": strings, "uids": st.lists(_object(id=strings), max_size=2)}), max_size=2
)
schains: st.SearchStrategy[dict[str, Any]] = st.just({}) | _object(
    {"complete": st.integers(0, 1), "nodes": st.lists(objects, max_size=2)}
)
publishers = _object(id=strings)
CONTEXT = {
    "at": st.integers(1, 3),
    "tmax": st.integers(1, 500),
    "cur": st.lists(strings, max_size=2),
    "test": st.integers(0, 1),
    "device": _object(
        geo=geos, devicetype=small, ip=strings, ipv6=strings, ua=strings, ifa=strings
    ),
    "user": _object(
        id=strings,
        buyeruid=strings,
        consent=strings,
        geo=geos,
        eids=eids,
        ext=_object(consent=strings, eids=eids),
    ),
    "bcat": st.lists(strings, max_size=2),
    "badv": st.lists(strings, max_size=2),
    "bapp": st.lists(strings, max_size=2),
    "regs": _object(
        gdpr=st.integers(0, 1),
        coppa=st.integers(0, 1),
        us_privacy=strings,
        gpp=strings,
        ext=_object(gdpr=st.integers(0, 1), us_privacy=strings, gpp=strings),
    ),
    "source": _object(tid=strings, schain=schains, ext=_object(schain=schains)),
    "ext": json_values | _object(source=_object(tid=strings | json_values)),
}
CHANNELS = {
    "site": _object(domain=strings, page=strings, publisher=publishers),
    "app": _object(bundle=strings, publisher=publishers),
    "dooh": _object(id=strings),
}


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """Requests of the right shape and types: most are valid, a few break a rule
    (a sizeless lone banner, an imp without a medium, a zero size)."""
    imp_ids = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    doc = draw(_object({"id": ids}, **CONTEXT))
    doc["imp"] = [draw(imps(imp_id)) for imp_id in imp_ids]
    channel = draw(st.sampled_from([*CHANNELS, None]))
    if channel is not None:
        doc[channel] = draw(CHANNELS[channel])
    return doc


def _paths(kind: Any, prefix: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], Any]:
    """Every field the reference reads, by path (list items by their first one): its kind."""
    if isinstance(kind, Ext):
        kind = kind.kind
    if isinstance(kind, dict):
        inner = [_paths(sub, (*prefix, key)) | {(*prefix, key): sub} for key, sub in kind.items()]
        return {path: sub for paths in inner for path, sub in paths.items()}
    if isinstance(kind, list):
        return {(*prefix, 0): kind[0]} | _paths(kind[0], (*prefix, 0))
    return {}


READ_PATHS = _paths(REQUEST)

INT_EDGES = [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 10**30, 300.0, True, "1"]
EDGES: dict[Any, list[Any]] = {
    STR: ["", 5, True, [], {}],
    INT: INT_EDGES,
    TMAX: INT_EDGES,
    FLOOR: [0, 0.0, -0.01, 1e9, 1e9 + 1, 2**63, 10**400, True, "0.5"],
    GDPR: [0, 1, 2, -1, True, 1.0, "1"],
    OBJECT: [{}, [], "x"],
    STR_OR_OBJECT: ["", {}, [], 5],
    LENIENT: [{}, "x", {"source": {"tid": 5}}, {"source": "x"}],
}
"""Values at the edges of each kind of field: its type's limits and its near misses."""


def _edges(kind: Any) -> list[Any]:
    if isinstance(kind, Ext):
        return _edges(kind.kind)
    if isinstance(kind, dict):
        return [{}, [], "x", 1]
    if isinstance(kind, list):
        return [[], [None], [1, "a"], "x", {}]
    return EDGES[kind]


def _parent(doc: dict[str, Any], path: tuple[str | int, ...]) -> Any:
    """The object or array that holds the field at ``path`` (for an array, its first
    item), or None where the document has no such place."""
    node: Any = doc
    for key in path[:-1]:
        if not _holds(node, key):
            return None
        node = node[key]
    last = path[-1]
    holds = isinstance(node, dict) if isinstance(last, str) else isinstance(node, list) and node
    return node if holds else None


def _holds(node: Any, key: str | int) -> bool:
    if isinstance(key, str):
        return isinstance(node, dict) and key in node
    return isinstance(node, list) and key < len(node)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A request with up to three fields it has (or could have) replaced: by null, an
    edge value of the field's kind, or any JSON."""
    doc = draw(requests())
    for _ in range(draw(st.integers(0, 3))):
        reachable = [path for path in READ_PATHS if _parent(doc, path) is not None]
        path = draw(st.sampled_from(reachable))
        value = draw(st.none() | st.sampled_from(_edges(READ_PATHS[path])) | json_values)
        _parent(doc, path)[path[-1]] = value
    return doc


def _plain(value: Any) -> Any:
    """The view as the reference writes it: Structs as dicts of their fields."""
    if isinstance(value, msgspec.Struct):
        return {field: _plain(getattr(value, field)) for field in value.__struct_fields__}
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    return value


DIFFERENTIAL = settings(max_examples=300)


@DIFFERENTIAL
@given(doc=documents(), ascii_only=st.booleans())
def test_the_parser_and_the_light_read_agree_with_the_reference(
    doc: dict[str, Any], ascii_only: bool
) -> None:
    """The parser accepts what the reference accepts, with the same view; on what both
    accept, the light read of the source (tid, schain) agrees with that view."""
    body = json.dumps(doc, ensure_ascii=ascii_only).encode()
    expected = reference_view(doc)
    if expected is None:
        with pytest.raises(InvalidRequest):
            parse_bid_request(body)
    else:
        assert _plain(parse_bid_request(body)) == expected
        assert auction_source(body) == (expected["tid"], expected["schain"])


def test_the_documents_are_often_accepted_and_often_refused() -> None:
    """The generator exercises both sides: neither judgement is rare among its documents
    (a share between 10% and 90% of 100 documents)."""
    accepted = []

    @settings(max_examples=100, database=None)
    @given(doc=documents())
    def judge(doc: dict[str, Any]) -> None:
        accepted.append(reference_view(doc) is not None)

    judge()
    assert 0.1 < sum(accepted) / len(accepted) < 0.9
