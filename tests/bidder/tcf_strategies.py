"""Hypothesis strategies for TCF v2 core segments, shared by the encoder and decoder tests."""

from __future__ import annotations

from hypothesis import strategies as st

from bidder.openrtb.tcf import PubRestriction, TcfConsent

_letters = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=2, max_size=2)


def tc_consents(
    vendors: st.SearchStrategy[frozenset[int]],
    restrictions: bool = False,
) -> st.SearchStrategy[TcfConsent]:
    """Any core segment whose vendor sets come from ``vendors``; with ``restrictions``,
    up to three publisher restrictions too (else none)."""
    pub_restrictions = (
        st.lists(
            st.builds(PubRestriction, st.integers(1, 24), st.integers(0, 2), vendors), max_size=3
        ).map(tuple)
        if restrictions
        else st.just(())
    )
    return st.builds(
        TcfConsent,
        created_ds=st.integers(0, 2**36 - 1),
        last_updated_ds=st.integers(0, 2**36 - 1),
        cmp_id=st.integers(0, 4095),
        cmp_version=st.integers(0, 4095),
        consent_screen=st.integers(0, 63),
        consent_language=_letters,
        vendor_list_version=st.integers(0, 4095),
        tcf_policy_version=st.integers(0, 63),
        is_service_specific=st.booleans(),
        use_non_standard_texts=st.booleans(),
        special_feature_optins=st.frozensets(st.integers(1, 12)),
        purposes_consent=st.frozensets(st.integers(1, 24)),
        purposes_li=st.frozensets(st.integers(1, 24)),
        purpose_one_treatment=st.booleans(),
        publisher_cc=_letters,
        vendor_consents=vendors,
        vendor_li=vendors,
        pub_restrictions=pub_restrictions,
    )
