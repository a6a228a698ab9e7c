"""Hypothesis strategies for arbitrary JSON values, shared by the parser's tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(text_size: int, width: int, max_leaves: int) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars, and lists and objects of up to ``width`` members."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=text_size),
        lambda inner: (
            st.lists(inner, max_size=width)
            | st.dictionaries(st.text(max_size=text_size), inner, max_size=width)
        ),
        max_leaves=max_leaves,
    )
