"""bidder.supply.path: a copy holds only when a better path through an SSP can exist."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bidder.supply.ads_txt import AdsRecord, AdsTxt
from bidder.supply.path import PathPolicy

DOMAINS = {"ssp-a": "a.example", "ssp-b": "b.example", "ssp-c": "c.example"}
POLICY = PathPolicy(domains=DOMAINS)


def chain(*asis: str) -> dict[str, Any]:
    nodes = [{"asi": asi, "sid": f"s{n}", "hp": 1} for n, asi in enumerate(asis)]
    return {"ver": "1.0", "complete": 1, "nodes": nodes}


def ads(*records: tuple[str, str]) -> AdsTxt:
    return AdsTxt(tuple(AdsRecord(d, f"acct-{n}", rel) for n, (d, rel) in enumerate(records)))


TWO_HOPS_VIA_A = chain("reseller.example", "a.example")


def test_a_top_ranked_copy_never_holds() -> None:
    assert not POLICY.better_path_possible("ssp-a", chain("a.example"), None)


def test_without_the_publisher_s_file_any_ssp_could_sell_direct() -> None:
    assert POLICY.better_path_possible("ssp-a", TWO_HOPS_VIA_A, None)


def test_without_ssp_domains_any_ssp_could_sell_direct() -> None:
    file = ads(("reseller.example", "DIRECT"), ("a.example", "RESELLER"))
    assert PathPolicy().better_path_possible("ssp-a", TWO_HOPS_VIA_A, file)


def test_another_ssp_direct_in_ads_txt_is_a_better_path() -> None:
    file = ads(("a.example", "RESELLER"), ("b.example", "DIRECT"))
    assert POLICY.better_path_possible("ssp-a", TWO_HOPS_VIA_A, file)


def test_other_ssps_only_as_resellers_are_no_better_than_two_hops() -> None:
    file = ads(("a.example", "RESELLER"), ("b.example", "RESELLER"), ("c.example", "RESELLER"))
    assert not POLICY.better_path_possible("ssp-a", TWO_HOPS_VIA_A, file)
    three_hops = chain("pub.example", "reseller.example", "a.example")
    assert POLICY.better_path_possible("ssp-a", three_hops, file)


def test_a_direct_record_of_a_system_that_is_not_an_ssp_is_no_path_to_us() -> None:
    file = ads(("reseller.example", "DIRECT"), ("a.example", "RESELLER"))
    assert not POLICY.better_path_possible("ssp-a", TWO_HOPS_VIA_A, file)


def test_the_copy_s_own_ssp_does_not_compete_with_it() -> None:
    file = ads(("a.example", "DIRECT"))
    assert not POLICY.better_path_possible("ssp-a", TWO_HOPS_VIA_A, file)


def test_an_ssp_already_on_the_chain_could_sell_with_fewer_hops() -> None:
    via_b = chain("b.example", "a.example")
    assert POLICY.better_path_possible("ssp-a", via_b, ads(("a.example", "RESELLER")))


def test_a_preferred_ssp_beats_a_shorter_chain() -> None:
    policy = PathPolicy(["ssp-b"], domains=DOMAINS)
    file = ads(("a.example", "DIRECT"), ("b.example", "RESELLER"))
    assert policy.better_path_possible("ssp-a", chain("a.example"), file)


def test_a_fee_decides_between_equal_chains() -> None:
    policy = PathPolicy(fees_bps={"ssp-a": 20}, domains=DOMAINS)
    file = ads(("a.example", "DIRECT"), ("b.example", "DIRECT"))
    assert policy.better_path_possible("ssp-a", chain("a.example"), file)
    assert not policy.better_path_possible("ssp-b", chain("b.example"), file)


SSP = st.sampled_from(sorted(DOMAINS))
ASI = st.sampled_from([*DOMAINS.values(), "reseller.example", "pub.example"])
RECORD = st.tuples(ASI, st.sampled_from(["DIRECT", "RESELLER"]))
CHAIN = st.one_of(st.none(), st.lists(ASI, min_size=1, max_size=4).map(lambda a: chain(*a)))
POLICIES = st.builds(
    PathPolicy,
    st.lists(SSP, unique=True, max_size=3),
    st.dictionaries(SSP, st.integers(0, 50), max_size=3),
    st.just(DOMAINS),
)


@given(POLICIES, SSP, CHAIN, st.lists(RECORD, max_size=6))
def test_a_copy_holds_only_where_it_is_not_top_ranked(
    policy: PathPolicy, ssp: str, schain: Any, records: list[tuple[str, str]]
) -> None:
    if policy.is_top_ranked(ssp, schain):
        assert not policy.better_path_possible(ssp, schain, ads(*records))
    else:
        assert policy.better_path_possible(ssp, schain, None)


@given(POLICIES, SSP, CHAIN, st.lists(RECORD, max_size=6), RECORD)
def test_authorizing_one_more_seller_never_removes_a_hold(
    policy: PathPolicy, ssp: str, schain: Any, records: list[tuple[str, str]], more: Any
) -> None:
    before = policy.better_path_possible(ssp, schain, ads(*records))
    after = policy.better_path_possible(ssp, schain, ads(*records, more))
    assert after or not before
