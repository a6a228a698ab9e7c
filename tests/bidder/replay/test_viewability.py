"""Which wins the exchange model makes viewable, and the view notice's URL. Pure."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.replay.viewability import dwell_s, imp_formats, is_viewable, view_url

pytestmark = pytest.mark.pure

NURL = "http://127.0.0.1:8080/notice/win?t=k1.AbC-_9&p=${AUCTION_PRICE}&c=${AUCTION_CURRENCY}"


def test_the_view_notice_carries_the_wins_token_and_nothing_else() -> None:
    assert view_url(NURL) == "http://127.0.0.1:8080/notice/view?t=k1.AbC-_9"


def test_a_notice_url_without_a_token_has_no_view_notice() -> None:
    assert view_url("http://127.0.0.1:8080/notice/win?p=1") is None


def test_each_imp_has_the_format_it_sells_video_before_its_companion_banner() -> None:
    request = {
        "imp": [
            {"id": "1", "banner": {"w": 300, "h": 250}},
            {"id": "2", "video": {"mimes": ["video/mp4"]}, "banner": {"w": 300, "h": 250}},
            {"id": "3", "native": {"request": "{}"}},
            {"id": "4"},
        ]
    }
    assert imp_formats(orjson.dumps(request)) == {
        "1": "banner",
        "2": "video",
        "3": "native",
        "4": "",
    }


@given(
    st.binary(max_size=200)
    | st.builds(
        orjson.dumps,
        st.dictionaries(
            st.just("imp"), st.integers(0, 9) | st.text() | st.lists(st.integers(0, 9))
        ),
    )
)
def test_any_request_body_gives_formats_or_nothing(body: bytes) -> None:
    assert isinstance(imp_formats(body), dict)


def test_video_must_stay_in_view_twice_as_long_as_display() -> None:
    assert (dwell_s("banner"), dwell_s("native"), dwell_s("video")) == (1.0, 1.0, 2.0)


@given(st.integers(0, 2**31), st.floats(0.0, 1.0))
def test_the_share_of_wins_drawn_viewable_is_the_formats_rate(seed: int, rate: float) -> None:
    urls = [f"{NURL}&n={i}" for i in range(2000)]
    viewable = sum(is_viewable(seed, url, "banner", {"banner": rate}) for url in urls)
    assert abs(viewable / len(urls) - rate) < 0.05


@given(st.integers(0, 2**31), st.text(max_size=40))
def test_the_draw_is_fixed_by_the_seed_and_the_url(seed: int, url: str) -> None:
    rates = {"banner": 0.5}
    assert is_viewable(seed, url, "banner", rates) == is_viewable(seed, url, "banner", rates)
    assert not is_viewable(seed, url, "audio", {"audio": 0.0})
    assert is_viewable(seed, url, "video", {"video": 1.0})
