"""Impressions over a cap per campaign, read from the won bids' notice tokens."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import Win
from bidder.core.campaigns import CapPolicy
from bidder.core.tokens import VERSION, NoticeClaims, TokenSigner, read_claims
from bidder.replay.over_cap import OverCapTally
from fcap.rules import build_subjects
from tests.fcap.support import HOUR_S, T0, campaign, cap

pytestmark = pytest.mark.pure

TWICE_AN_HOUR = campaign(cap("campaign", "fixed", HOUR_S, 2), cid="c1")
UNCAPPED = campaign(cid="c3")
VIEWABLE = campaign(
    cap("campaign", "fixed", HOUR_S, 1), cid="c2", policy=CapPolicy(impressions="viewable")
)
SUBJECTS = build_subjects([TWICE_AN_HOUR, UNCAPPED, VIEWABLE])
SIGNER = TokenSigner({"k1": b"k" * 32}, "k1")


def _win(bid_id: int, at_ms: int, cid: str = "c1", user: str = "b:u1") -> Win:
    claims = NoticeClaims(bid_id, "1", cid, "adv", "cr1", user, None, 1_000_000, at_ms)
    url = f"http://bidder/notice/win?t={SIGNER.sign(claims)}&p=${{AUCTION_PRICE}}"
    return Win("1", 1.0, 1.0, url, None, cid)


def test_the_third_impression_of_a_twice_an_hour_cap_is_over_it() -> None:
    tally = OverCapTally(SUBJECTS)
    tally.deliver([_win(n, T0 + n) for n in range(1, 4)], measured=True)
    tally.deliver([_win(9, T0 + 9, user="b:u2")], measured=True)
    assert tally.by_campaign() == {"c1": 1, "c3": 0}  # c2 counts viewables: not audited


def test_warmup_impressions_fill_the_counters_but_are_not_reported() -> None:
    tally = OverCapTally(SUBJECTS)
    tally.deliver([_win(1, T0 + 1), _win(2, T0 + 2), _win(3, T0 + 3)], measured=False)
    tally.deliver([_win(4, T0 + 4)], measured=True)
    assert tally.by_campaign()["c1"] == 1  # bid 4, not the warm-up's bid 3


def test_wins_without_a_token_or_of_unknown_campaigns_are_left_out() -> None:
    tally = OverCapTally(SUBJECTS)
    bare = Win("1", 1.0, 1.0, "http://bidder/notice/win?p=1", None, "c1")
    tally.deliver([bare, _win(1, T0, cid="elsewhere"), _win(2, T0, cid="elsewhere")], True)
    assert tally.by_campaign() == {"c1": 0, "c3": 0}


def test_without_cap_subjects_nothing_is_audited() -> None:
    tally = OverCapTally()
    tally.deliver([_win(n, T0 + n) for n in range(1, 4)], measured=True)
    assert tally.by_campaign() == {}


@given(st.integers(0, 2**63), st.text(max_size=20), st.integers(0, 2**40))
def test_a_token_reads_back_without_the_key(bid_id: int, user: str, at_ms: int) -> None:
    claims = NoticeClaims(bid_id, "1", "c1", "adv", "cr1", user or None, None, 5, at_ms)
    assert read_claims(SIGNER.sign(claims)) == claims


@given(st.text(max_size=80))
def test_any_text_reads_as_claims_or_none(text: str) -> None:
    assert read_claims(text) is None or isinstance(read_claims(text), NoticeClaims)


def test_a_token_of_another_version_reads_as_none() -> None:
    token = SIGNER.sign(NoticeClaims(1, "1", "c1", "adv", "cr1", None, None, 5, T0))
    kid, _, blob = token.partition(".")
    raw = bytearray(base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4)))
    raw[0] = VERSION + 1
    other = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    assert read_claims(f"{kid}.{other}") is None
    assert read_claims(token) is not None
