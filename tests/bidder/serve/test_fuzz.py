"""Fuzzing the request path: whatever arrives, the answer is a 200 or a 204.

Junk bytes and non-request JSON must be a 204 ``invalid``; a valid request with
one field replaced by arbitrary JSON may bid or not, but the answer is always
well-formed and never a 5xx or a hang (the client would time out).

Bodies are encoded with the standard json module: unlike orjson it writes integers
beyond 64 bits, which exchanges' encoders can send too.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import answer_problems, with_replaced

SIMPLE_BANNER = orjson.loads(
    (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
)

FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

# Paths into the simple banner request whose value the mutation replaces.
PATHS = [
    ("id",),
    ("imp",),
    ("imp", 0),
    ("imp", 0, "id"),
    ("imp", 0, "bidfloor"),
    ("imp", 0, "banner"),
    ("imp", 0, "banner", "w"),
    ("site",),
    ("site", "domain"),
    ("site", "publisher"),
    ("user",),
    ("cur",),
    ("at",),
    ("tmax",),
    ("device",),
    ("regs",),
    ("source",),
    ("bcat",),
]


@FUZZ
@given(body=st.binary(max_size=512))
def test_junk_bytes_are_invalid(live_bidder: LiveBidder, body: bytes) -> None:
    answer = live_bidder.post(body)
    assert (answer.status, answer.reason) == (204, "invalid")


@FUZZ
@given(value=json_values)
def test_json_that_is_not_a_request_is_invalid(live_bidder: LiveBidder, value: Any) -> None:
    answer = live_bidder.post(json.dumps(value).encode())
    assert (answer.status, answer.reason) == (204, "invalid")


@FUZZ
@given(path=st.sampled_from(PATHS), value=json_values)
def test_a_mutated_request_gets_a_well_formed_answer(
    live_bidder: LiveBidder, path: tuple[str | int, ...], value: Any
) -> None:
    request = with_replaced(SIMPLE_BANNER, path, value)
    answer = live_bidder.post(json.dumps(request).encode())
    assert answer_problems(request, answer.status, answer.headers, answer.body) == []
