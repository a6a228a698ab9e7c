"""bidder.chaos.cap_audit: recorded notices turned into the over-delivery figure and its bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from bidder.chaos.cap_audit import (
    StoreErrors,
    audit_delivered,
    signer_of,
    with_recorded_notices,
)
from bidder.core.tokens import NoticeClaims, TokenSigner
from bidder.replay.notice_recorder import NoticeRecorder, RecordedNotice
from bidder.serve.settings import Settings

SIGNER = TokenSigner({"k1": b"k" * 32}, "k1")
T0 = 1_800_000_000_000
FIZZWICK = ("fizzwick-mobile-web", "Fizzwick Cola", "fz-320x50-summer")
"""Capped 3 a day per user, counted on delivery."""
COBALT = ("cobalt-skyscrapers", "Cobalt Sneakers", "cs-300x600-runner")
"""Counted on viewable impressions: not audited."""
MEADOW = ("meadow-home-spring-sale", "Meadow Home", "mh-300x250-sale")
"""No caps."""


DEADLINE_MS = 8.0


def _notice(
    bid_id: int,
    at_ms: int,
    ad: tuple[str, str, str] = FIZZWICK,
    answered_ms: int | None = None,
    status: int = 204,
) -> RecordedNotice:
    """The win notice of an impression bid at ``at_ms``, answered (so counted) at
    ``answered_ms``: by default a minute later, after every bid of these tests."""
    claims = NoticeClaims(bid_id, "1", ad[0], ad[1], ad[2], "b:u1", None, 1_000_000, at_ms)
    url = f"/notice/win?t={SIGNER.sign(claims)}&p=1.5"
    return RecordedNotice(url, status, at_ms + 60_000 if answered_ms is None else answered_ms)


def test_the_fourth_impression_of_a_day_capped_at_three_is_above_the_cap() -> None:
    notices = [_notice(n, T0 + n) for n in range(1, 5)]
    audit = audit_delivered(notices, SIGNER, DEADLINE_MS).over_delivery
    assert [f.bid_id for f in audit.above_cap] == [4]


def test_the_impression_that_fills_a_cap_counts_as_reaching_its_limit() -> None:
    notices = [_notice(n, T0 + n) for n in range(1, 4)]
    audit = audit_delivered(notices, SIGNER, DEADLINE_MS).over_delivery
    assert (audit.reached_limit, audit.over_cap) == (1, 0)


def test_capped_impressions_leave_out_uncapped_and_viewable_counted_campaigns() -> None:
    notices = [_notice(1, T0), _notice(2, T0 + 1, COBALT), _notice(3, T0 + 2, MEADOW)]
    assert audit_delivered(notices, SIGNER, DEADLINE_MS).capped_impressions == 1


def test_a_window_of_bid_instants_keeps_the_findings_bid_in_it() -> None:
    notices = [_notice(n, T0 + n * 1000) for n in range(1, 6)]
    part = audit_delivered(notices, SIGNER, DEADLINE_MS).bid_between(T0 + 4000, T0 + 5000)
    assert (part.impressions, [f.bid_id for f in part.above_cap]) == (1, [4])


def test_impressions_counted_before_the_check_make_an_over_cap_one_not_in_flight() -> None:
    counted = [_notice(n, T0 + n * 1000, answered_ms=T0 + n * 1000 + 10) for n in range(1, 4)]
    notices = [*counted, _notice(4, T0 + 4000)]
    assert audit_delivered(notices, SIGNER, DEADLINE_MS).over_delivery.not_in_flight == 1


def test_an_impression_counted_within_a_deadline_of_the_stamp_was_in_flight() -> None:
    # the third impression's count was answered 7 ms before the fourth bid's stamp: its
    # check may have run up to 8 ms before the stamp, before that count landed
    early = [_notice(n, T0 + n * 1000, answered_ms=T0 + n * 1000 + 10) for n in range(1, 3)]
    late = _notice(3, T0 + 3000, answered_ms=T0 + 3993)
    notices = [*early, late, _notice(4, T0 + 4000)]
    audit = audit_delivered(notices, SIGNER, DEADLINE_MS).over_delivery
    assert (audit.over_cap, audit.not_in_flight) == (1, 0)
    assert audit_delivered(notices, SIGNER, 4.0).over_delivery.not_in_flight == 1


def test_a_deferred_notice_leaves_its_count_time_unknown() -> None:
    early = [_notice(n, T0 + n * 1000, answered_ms=T0 + n * 1000 + 10) for n in range(1, 3)]
    deferred = _notice(3, T0 + 3000, answered_ms=T0 + 3010, status=202)
    notices = [*early, deferred, _notice(4, T0 + 4000)]
    audit = audit_delivered(notices, SIGNER, DEADLINE_MS).over_delivery
    assert (audit.over_cap, audit.not_in_flight) == (1, 0)


def test_a_failed_check_may_pass_its_bid_and_one_per_counter_of_a_reserving_subject() -> None:
    # northwind reserves at bid and fails open; it counts in a user and a household counter
    assert audit_delivered([], SIGNER, DEADLINE_MS).bound(StoreErrors(checks=1, counts=0)) == 3


def test_a_failed_count_may_pass_one_impression_per_counter_it_misses() -> None:
    # pixelforge's impressions count in two windows, the most of any count-on-win subject
    assert audit_delivered([], SIGNER, DEADLINE_MS).bound(StoreErrors(checks=0, counts=1)) == 2


def test_recorded_notices_point_the_bidder_at_the_recorder_with_one_shared_key(
    tmp_path: Path,
) -> None:
    recorder = NoticeRecorder()
    settings = with_recorded_notices(Settings(port=8123, spool_dir=tmp_path), recorder)
    claims = NoticeClaims(9, "1", *FIZZWICK, "b:u1", None, 1_000_000, T0)
    token = signer_of(settings).sign(claims)
    assert settings.public_url == recorder.public_url
    assert recorder.target == "http://127.0.0.1:8123"
    assert signer_of(settings).verify(token) == claims


def test_a_signer_needs_shared_notice_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no notice keys"):
        signer_of(Settings(spool_dir=tmp_path))
