"""The bidstream generator: reproducible bytes, parseable requests, the documented mix.

Shares are checked on one 5,000-request stream (fixed seed, so the test is exact, not
flaky); tolerances are a few standard errors wide. TCF strings are checked with a bit
reader written here from the spec, independently of the encoder.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.bidstream import inventory as inv
from bidder.bidstream._render import seller_path
from bidder.bidstream.generator import (
    MAX_DUPLICATE_LAG_MS,
    boost_scale,
    generate,
    parse_ssp_boost,
)
from bidder.bidstream.population import population
from bidder.bidstream.privacy import grants_dsp, user_tcf
from bidder.bidstream.stream import read_stream
from bidder.bidstream.summary import GenSummary
from bidder.bidstream.supply import has_ads_txt, publishers, write_supply_files
from bidder.core.nobid import NoBid
from bidder.decide.consent import ConsentPolicy, evaluate
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from bidder.openrtb.tcf import TcfConsent
from bidder.openrtb.tcf_encode import encode_tc_string
from bidder.supply.files import DirectorySource, load_files
from bidder.supply.schain import SupplyFiles, Verdict, verify
from tests.bidder.tcf_strategies import tc_consents

pytestmark = pytest.mark.pure

N = 5_000
DAY_START_DS = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 10)
EU = inv.EU_COUNTRIES


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenSummary, list[dict[str, Any]]]:
    path = tmp_path_factory.mktemp("gen") / "stream.jsonl.gz"
    summary = generate(path, N, seed=3)
    with gzip.open(path) as src:
        return summary, [orjson.loads(line) for line in src]


@pytest.fixture(scope="module")
def records(sample: tuple[GenSummary, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return sample[1]


@pytest.fixture(scope="module")
def requests(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["request"] for r in records if "request" in r]


def share(count: int, total: int) -> float:
    return count / total


# -- determinism and format ---------------------------------------------------------------


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    generate(tmp_path / "a.jsonl.gz", 300, seed=42)
    generate(tmp_path / "b.jsonl.gz", 300, seed=42)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_different_seeds_give_different_streams(tmp_path: Path) -> None:
    generate(tmp_path / "a.jsonl", 300, seed=1)
    generate(tmp_path / "b.jsonl", 300, seed=2)
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "b.jsonl").read_bytes()


def test_writes_exactly_the_requested_count(tmp_path: Path) -> None:
    for count in (1, 2, 3, 97):
        summary = generate(tmp_path / f"{count}.jsonl", count, seed=count)
        assert len(list(read_stream(tmp_path / f"{count}.jsonl"))) == count == summary.requests


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"requests.*mean_rate.*timezone"):
        generate(tmp_path / "x", 0, seed=1, mean_rate=0, day_start=datetime(2026, 1, 5))


def test_t_ms_never_decreases_and_spans_requests_over_rate(records: list[dict[str, Any]]) -> None:
    times = [r["t_ms"] for r in records]
    assert times == sorted(times)
    assert times[0] >= 0
    assert N / 400 * 1000 * 0.99 <= times[-1] <= N / 400 * 1000 + MAX_DUPLICATE_LAG_MS


def test_ts_covers_one_day_from_day_start(records: list[dict[str, Any]]) -> None:
    start = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)
    stamps = [r["ts"] for r in records]
    assert start <= min(stamps) < start + 3_600_000
    assert start + 23 * 3_600_000 <= max(stamps) < start + 86_400_000 + MAX_DUPLICATE_LAG_MS


def test_every_request_record_parses(requests: list[dict[str, Any]]) -> None:
    for request in requests:
        parse_bid_request(orjson.dumps(request))


def test_every_raw_record_fails_to_parse(records: list[dict[str, Any]]) -> None:
    raws = [r["raw"] for r in records if "raw" in r]
    assert raws
    for raw in raws:
        with pytest.raises((InvalidRequest, orjson.JSONDecodeError)):
            parse_bid_request(raw.encode())


def test_summary_matches_the_file(sample: tuple[GenSummary, list[dict[str, Any]]]) -> None:
    summary, records = sample
    assert summary.requests == len(records) == summary.valid + summary.malformed
    assert summary.malformed == sum("raw" in r for r in records)
    assert summary.ssps == dict(sorted(Counter(r["ssp"] for r in records).items()))
    assert sum(summary.malformed_kinds.values()) == summary.malformed


# -- the mix -------------------------------------------------------------------------------


def country(request: dict[str, Any]) -> str | None:
    return request["device"].get("geo", {}).get("country")


def channel(request: dict[str, Any]) -> str:
    if "site" in request:
        return "site"
    return "ctv" if request["app"]["bundle"].startswith("tv.example.") else "app"


def test_country_shares(requests: list[dict[str, Any]]) -> None:
    counts = Counter(country(r) for r in requests)
    n = len(requests)
    assert 0.45 <= share(counts["USA"], n) <= 0.53
    assert 0.075 <= share(counts["GBR"], n) <= 0.115
    assert 0.06 <= share(counts["CAN"], n) <= 0.095
    assert 0.06 <= share(counts["DEU"], n) <= 0.095
    assert 0.015 <= share(counts[None], n) <= 0.045
    assert 0.02 <= share(sum(counts[c] for c in ("AUS", "MEX", "ESP", "ITA")), n) <= 0.06


def test_channel_shares(requests: list[dict[str, Any]]) -> None:
    counts = Counter(channel(r) for r in requests)
    n = len(requests)
    assert 0.51 <= share(counts["site"], n) <= 0.59
    assert 0.31 <= share(counts["app"], n) <= 0.39
    assert 0.08 <= share(counts["ctv"], n) <= 0.12


def test_ctv_is_video_only_on_tv_devices(requests: list[dict[str, Any]]) -> None:
    ctv = [r for r in requests if channel(r) == "ctv"]
    assert all(r["device"]["devicetype"] in (3, 7) for r in ctv)
    assert all("video" in imp and "banner" not in imp for r in ctv for imp in r["imp"])


def test_malformed_share(records: list[dict[str, Any]]) -> None:
    assert 0.012 <= share(sum("raw" in r for r in records), len(records)) <= 0.028


def test_junk_share_and_kinds(sample: tuple[GenSummary, list[dict[str, Any]]]) -> None:
    summary, _ = sample
    assert 0.12 <= share(summary.junk, summary.valid) <= 0.18
    assert set(summary.junk_kinds) == {"geo", "size", "currency"}


def test_junk_requests_carry_unbiddable_values(requests: list[dict[str, Any]]) -> None:
    sizes = {size for r in requests for imp in r["imp"] for size in _sizes(imp)}
    assert {(468, 60), (120, 600)} <= sizes
    assert any(r.get("cur") == ["EUR"] for r in requests)
    assert any(country(r) == "ZZZ" for r in requests)
    assert any("cur" not in r for r in requests)


def test_floor_distribution(requests: list[dict[str, Any]]) -> None:
    floors = [i.get("bidfloor", 0.0) for r in requests for i in r["imp"]]
    n = len(floors)
    assert 0.07 <= share(sum(f == 0 for f in floors), n) <= 0.13
    assert 0.015 <= share(sum(f > 10 for f in floors), n) <= 0.045
    assert share(sum(0.05 <= f <= 3.0 for f in floors), n) >= 0.8


def test_evening_carries_three_to_five_times_the_night(records: list[dict[str, Any]]) -> None:
    hours = Counter(datetime.fromtimestamp(r["ts"] / 1000, UTC).hour for r in records)
    ratio = sum(hours[h] for h in (19, 20, 21)) / sum(hours[h] for h in (3, 4, 5))
    assert 3.0 <= ratio <= 5.0


def test_heavy_users_exist(requests: list[dict[str, Any]]) -> None:
    per_user = sorted(Counter(r["user"]["id"] for r in requests).values(), reverse=True)
    top = per_user[: max(1, len(per_user) // 100)]
    assert share(sum(top), len(requests)) > 0.20
    assert per_user[0] >= 0.01 * len(requests)


def test_user_attributes_are_stable(requests: list[dict[str, Any]]) -> None:
    seen: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    for r in requests:
        user, device = r["user"], r["device"]
        seen[user["id"]].add((user.get("buyeruid"), device["ip"], device["ua"]))
    assert all(len(variants) == 1 for variants in seen.values())


def test_some_users_share_a_household_ip(requests: list[dict[str, Any]]) -> None:
    users_per_ip: dict[str, set[str]] = defaultdict(set)
    for r in requests:
        users_per_ip[r["device"]["ip"]].add(r["user"]["id"])
    assert any(len(users) > 1 for users in users_per_ip.values())


def test_ssp_shares(records: list[dict[str, Any]]) -> None:
    counts = Counter(r["ssp"] for r in records)
    n = len(records)
    for name, expected in (("ssp-alpha", 0.4), ("ssp-beta", 0.3), ("ssp-gamma", 0.2)):
        assert abs(share(counts[name], n) - expected) < 0.04, name
    assert 0.07 <= share(counts["ssp-delta"], n) <= 0.13


# -- OpenRTB shapes, privacy, supply chain --------------------------------------------------


def test_both_openrtb_shapes_are_present(requests: list[dict[str, Any]]) -> None:
    v26 = [r for r in requests if "schain" in r["source"]]
    v25 = [r for r in requests if "schain" in r["source"].get("ext", {})]
    assert 0.5 <= share(len(v26), len(requests)) <= 0.65
    assert 0.3 <= share(len(v25), len(requests)) <= 0.45
    assert all("gdpr" in r["regs"] and "tid" in r["source"] for r in v26)
    assert all("gdpr" in r["regs"]["ext"] and "tid" in r["source"] for r in v25)


def test_schain_nodes_end_at_the_sending_ssp(records: list[dict[str, Any]]) -> None:
    chains = 0
    for record in (r for r in records if "request" in r):
        source = record["request"]["source"]
        chain = source.get("schain") or source.get("ext", {}).get("schain")
        if chain is None:
            continue
        chains += 1
        assert chain["ver"] == "1.0" and chain["complete"] in (0, 1)
        assert 1 <= len(chain["nodes"]) <= 3
        assert chain["nodes"][-1]["asi"] == f"{record['ssp']}.example"
        assert chain["nodes"][-1]["rid"] == record["request"]["id"]
    assert 0.9 <= share(chains, len(records)) <= 0.98


def test_duplicate_auction_share(requests: list[dict[str, Any]]) -> None:
    per_tid = Counter(r["source"]["tid"] for r in requests)
    assert 0.035 <= share(sum(c > 1 for c in per_tid.values()), len(per_tid)) <= 0.065


def test_duplicates_share_tid_across_ssps_within_a_few_ms(records: list[dict[str, Any]]) -> None:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in (r for r in records if "request" in r):
        groups[record["request"]["source"]["tid"]].append(record)
    dups = [g for g in groups.values() if len(g) > 1]
    assert dups and all(len(g) <= 3 for g in dups)
    for group in dups:
        reqs = [g["request"] for g in group]
        assert len({g["ssp"] for g in group}) == len(group)
        assert len({r["id"] for r in reqs}) == len(group)
        assert max(g["t_ms"] for g in group) - min(g["t_ms"] for g in group) <= 4
        assert len({r["user"]["id"] for r in reqs}) == 1
        assert len({orjson.dumps(r.get("site", r.get("app"))) for r in reqs}) == 1
        assert len({tuple(_sizes(i) for i in r["imp"]) for r in reqs}) == 1


def _sizes(imp: dict[str, Any]) -> tuple[Any, ...]:
    banner = imp.get("banner")
    if banner is None:
        return tuple(sorted(k for k in imp if k in ("video", "native")))
    return tuple((f["w"], f["h"]) for f in banner.get("format") or [banner])


def test_eu_requests_carry_gdpr_and_mostly_consent(requests: list[dict[str, Any]]) -> None:
    eu = [r for r in requests if country(r) in EU]
    flags = [r["regs"].get("gdpr", r["regs"].get("ext", {}).get("gdpr")) for r in eu]
    assert flags and all(flag == 1 for flag in flags)
    assert 0.85 <= share(sum(consent(r) is not None for r in eu), len(eu)) <= 0.98
    tcf = [c for c in map(consent, eu) if c is not None and len(c) > 40]
    assert 0.82 <= share(len(tcf), len(eu)) <= 0.95


def test_us_privacy_and_gpp_on_us_traffic(requests: list[dict[str, Any]]) -> None:
    us = [r for r in requests if country(r) == "USA"]
    regs = [{**r["regs"], **r["regs"].get("ext", {})} for r in us]
    assert 0.25 <= share(sum("us_privacy" in g for g in regs), len(us)) <= 0.35
    assert {g["us_privacy"] for g in regs if "us_privacy" in g} == {"1YNN", "1YYN"}
    assert 0.07 <= share(sum("gpp" in g for g in regs), len(us)) <= 0.13


def consent(request: dict[str, Any]) -> str | None:
    user = request["user"]
    value = user.get("consent", user.get("ext", {}).get("consent"))
    return value if isinstance(value, str) else None


def test_tcf_strings_decode_to_v2_and_mostly_grant_our_vendor(
    requests: list[dict[str, Any]],
) -> None:
    strings = [c for c in map(consent, requests) if c is not None and len(c) > 40]
    granted = 0
    for text in strings:
        version, tc = decode_tc_string(text)
        assert version == 2
        assert tc.created_ds == tc.last_updated_ds < DAY_START_DS
        granted += _grants_us(tc)
    assert 0.72 <= share(granted, len(strings)) <= 0.88


def test_our_vendor_bit_follows_the_users_choice() -> None:
    pop = population()
    for index in range(300):
        user = pop.user(index)
        _, tc = decode_tc_string(encode_tc_string(user_tcf(user, DAY_START_DS)))
        assert _grants_us(tc) == grants_dsp(user)


def _grants_us(tc: TcfConsent) -> bool:
    return inv.DSP_VENDOR_ID in tc.vendor_consents and tc.purposes_consent >= inv.DSP_PURPOSES


def test_coppa_and_test_flags_are_rare(requests: list[dict[str, Any]]) -> None:
    n = len(requests)
    assert 0.003 <= share(sum(r["regs"].get("coppa") == 1 for r in requests), n) <= 0.02
    assert 0 < share(sum(r.get("test") == 1 for r in requests), n) <= 0.012


# -- TCF encoder round trip ------------------------------------------------------------------


class _Bits:
    """Reads fixed-width fields MSB-first from a base64url TC string (test-side decoder)."""

    def __init__(self, text: str) -> None:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        self.value, self.size, self.pos = int.from_bytes(data, "big"), len(data) * 8, 0

    def uint(self, width: int) -> int:
        self.pos += width
        if self.pos > self.size:
            raise ValueError("TC string too short")
        return (self.value >> (self.size - self.pos)) & ((1 << width) - 1)

    def ids(self, width: int) -> frozenset[int]:
        field = self.uint(width)
        return frozenset(n for n in range(1, width + 1) if field >> (width - n) & 1)

    def letters(self) -> str:
        return chr(65 + self.uint(6)) + chr(65 + self.uint(6))

    def vendors(self) -> frozenset[int]:
        max_id = self.uint(16)
        if self.uint(1):
            raise ValueError("range encoding is not expected")
        return self.ids(max_id)


def decode_tc_string(text: str) -> tuple[int, TcfConsent]:
    bits = _Bits(text)
    version = bits.uint(6)
    # Keyword arguments are evaluated left to right: the fields are read in spec order.
    consent = TcfConsent(
        created_ds=bits.uint(36),
        last_updated_ds=bits.uint(36),
        cmp_id=bits.uint(12),
        cmp_version=bits.uint(12),
        consent_screen=bits.uint(6),
        consent_language=bits.letters(),
        vendor_list_version=bits.uint(12),
        tcf_policy_version=bits.uint(6),
        is_service_specific=bool(bits.uint(1)),
        use_non_standard_texts=bool(bits.uint(1)),
        special_feature_optins=bits.ids(12),
        purposes_consent=bits.ids(24),
        purposes_li=bits.ids(24),
        purpose_one_treatment=bool(bits.uint(1)),
        publisher_cc=bits.letters(),
        vendor_consents=bits.vendors(),
        vendor_li=bits.vendors(),
    )
    if bits.uint(12) != 0:
        raise ValueError("publisher restrictions are not expected")
    if bits.size - bits.pos >= 8:
        raise ValueError("more than padding after the core segment")
    return version, consent


_tcf = tc_consents(st.frozensets(st.integers(1, 2000), max_size=40))


@settings(max_examples=60, database=None)
@given(_tcf)
def test_tcf_encoding_round_trips(consent: TcfConsent) -> None:
    text = encode_tc_string(consent)
    assert "=" not in text and text.startswith("C")
    assert decode_tc_string(text) == (2, consent)


def test_tcf_encoder_rejects_values_that_do_not_fit() -> None:
    good = user_tcf(population().user(0), DAY_START_DS)
    with pytest.raises(ValueError, match="bits"):
        encode_tc_string(dataclasses.replace(good, cmp_id=4096))
    with pytest.raises(ValueError, match="A-Z"):
        encode_tc_string(dataclasses.replace(good, publisher_cc="g1"))
    with pytest.raises(ValueError, match="outside"):
        encode_tc_string(dataclasses.replace(good, purposes_consent=frozenset({25})))


# -- supply chain against the bundled supply files ---------------------------------------------

SUPPLY_DIR = Path(__file__).resolve().parents[3] / "fixtures" / "openrtb" / "supply"


@pytest.fixture(scope="module")
def supply() -> SupplyFiles:
    return load_files(DirectorySource(SUPPLY_DIR).items())[0]


def test_the_bundled_supply_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    write_supply_files(tmp_path)
    written = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    bundled = {
        p.relative_to(SUPPLY_DIR): p.read_bytes() for p in SUPPLY_DIR.rglob("*") if p.is_file()
    }
    assert written == bundled


def test_honest_chains_verify_and_a_controlled_share_does_not(
    records: list[dict[str, Any]], supply: SupplyFiles
) -> None:
    lenient: Counter[str] = Counter()
    for record in (r for r in records if "request" in r):
        request = parse_bid_request(orjson.dumps(record["request"]))
        if request.schain is None:
            continue
        reason = verify(request.schain, request.domain, request.bundle, supply).lenient
        lenient[reason.value if reason else "pass"] += 1
    chains = sum(lenient.values())
    assert set(lenient) == {"pass", "schain_unknown_seller", "ads_txt_unauthorized"}
    assert 0.012 <= share(lenient["schain_unknown_seller"], chains) <= 0.03
    assert 0.012 <= share(lenient["ads_txt_unauthorized"], chains) <= 0.03


def test_honest_chains_of_every_publisher_verify_strictly(supply: SupplyFiles) -> None:
    for pub, channel, name in publishers():
        for ssp in inv.SSPS:
            nodes = seller_path(pub, ssp)
            domain, bundle = (name, None) if channel == "site" else (None, name)
            verdict = verify({"complete": 1, "nodes": nodes}, domain, bundle, supply)
            expected = None if has_ads_txt(pub) else NoBid.ADS_TXT_UNAVAILABLE
            assert verdict == Verdict(None, expected), (pub, ssp.name)


def test_a_few_publishers_have_no_ads_txt() -> None:
    pubs = list(publishers())
    assert 0.03 <= share(sum(not has_ads_txt(p) for p, _, _ in pubs), len(pubs)) <= 0.07


def test_the_bidder_reads_the_generated_consent_as_the_user_chose(
    requests: list[dict[str, Any]],
) -> None:
    outcomes: Counter[NoBid | None] = Counter()
    for doc in requests:
        request = parse_bid_request(orjson.dumps(doc))
        if request.gdpr and not request.coppa:
            outcomes[evaluate(request, ConsentPolicy()).reason] += 1
    assert 0.65 <= share(outcomes[None], sum(outcomes.values())) <= 0.85
    assert set(outcomes) == {None, NoBid.NO_CONSENT}


# -- a burst from one SSP -------------------------------------------------------------------------


def test_ssp_boost_multiplies_one_ssps_share(tmp_path: Path) -> None:
    boost = {"ssp-delta": 10.0}
    summary = generate(tmp_path / "burst.jsonl", 2000, seed=5, ssp_boost=boost)
    assert boost_scale(boost) == pytest.approx(1.9)
    assert 0.47 <= share(summary.ssps["ssp-delta"], summary.requests) <= 0.58


def test_parse_ssp_boost_reads_and_rejects() -> None:
    assert parse_ssp_boost(["ssp-delta=10"]) == {"ssp-delta": 10.0}
    with pytest.raises(ValueError, match=r"'ssp-x=2': unknown SSP.*'ssp-beta=0': expected"):
        parse_ssp_boost(["ssp-x=2", "ssp-beta=0"])


# -- heavy users (frequency-cap runs) -------------------------------------------------------

HEAVY = 10


@pytest.fixture(scope="module")
def heavy_requests(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("heavy") / "heavy.jsonl.gz"
    generate(path, 2_000, seed=3, heavy_users=HEAVY, heavy_share=0.3)
    with gzip.open(path) as src:
        return [r["request"] for r in map(orjson.loads, src) if "request" in r]


def test_heavy_users_send_about_their_share(heavy_requests: list[dict[str, Any]]) -> None:
    heavy = {population().user(i).id for i in range(HEAVY)}
    # 30% handed to them, plus what the most active users send anyway (a few %).
    assert 0.30 <= share(sum(r["user"]["id"] in heavy for r in heavy_requests), 2_000) <= 0.42


def test_heavy_users_each_send_many_requests(heavy_requests: list[dict[str, Any]]) -> None:
    per_user = Counter(r["user"]["id"] for r in heavy_requests)
    assert all(per_user[population().user(i).id] >= 40 for i in range(HEAVY))


def test_no_heavy_share_leaves_the_stream_unchanged(tmp_path: Path) -> None:
    generate(tmp_path / "a.jsonl.gz", 300, seed=7)
    generate(tmp_path / "b.jsonl.gz", 300, seed=7, heavy_users=HEAVY, heavy_share=0.0)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_heavy_streams_are_reproducible(tmp_path: Path) -> None:
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        generate(tmp_path / name, 300, seed=7, heavy_users=HEAVY, heavy_share=0.5)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


@pytest.mark.parametrize(
    ("users", "heavy_share", "problem"),
    [
        (-1, 0.1, "heavy_users must be"),
        (5, 1.5, "heavy_share must be 0-1"),
        (5, float("nan"), "heavy_share must be 0-1"),
        (0, 0.2, "heavy_share needs heavy_users"),
    ],
)
def test_rejects_bad_heavy_user_options(
    tmp_path: Path, users: int, heavy_share: float, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        generate(tmp_path / "x", 10, seed=1, heavy_users=users, heavy_share=heavy_share)
