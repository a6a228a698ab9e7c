"""Supply-path dedup options: flags to settings, validation by flag name, stage wiring."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bidder.bidstream.inventory import SSPS
from bidder.pipeline.auction_claims import SupplyDedupStage
from bidder.serve.cli_options import add_bidder_options, settings_from_args
from bidder.serve.settings import BUNDLED_SSP_DOMAINS, Settings, SettingsError
from bidder.supply.path import PathPolicy
from tests.bidder.live import LiveBidder


def settings(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_bidder_options(parser)
    return settings_from_args(parser.parse_args(list(argv)), 8080, 8081)


def test_dedup_is_on_by_default_without_preferences() -> None:
    defaults = settings()
    assert (defaults.dedup_window_ms, defaults.dedup_hold_ms) == (1000, 3.0)
    assert defaults.path_policy == PathPolicy(domains=dict(BUNDLED_SSP_DOMAINS))


def test_the_bundled_supply_files_bring_their_world_s_ssp_domains() -> None:
    assert dict(BUNDLED_SSP_DOMAINS) == {ssp.name: ssp.domain for ssp in SSPS}


def test_other_supply_files_bring_no_ssp_domains(tmp_path: Path) -> None:
    assert settings("--supply-dir", str(tmp_path)).path_policy == PathPolicy()


def test_given_ssp_domains_replace_the_bundled_ones() -> None:
    chosen = settings("--ssp-domain", "ssp-a=Ads.A.example,ssp-b=b.example")
    assert chosen.path_policy.domains == (("ssp-a", "ads.a.example"), ("ssp-b", "b.example"))


def test_the_flags_make_the_path_policy() -> None:
    chosen = settings(
        "--ssp-preference", "ssp-b,ssp-a",
        "--ssp-fee-bps", "ssp-a=15,ssp-c=5",
        "--ssp-fee-bps", "ssp-d=1",
        "--dedup-window-ms", "500",
        "--dedup-hold-ms", "2",
        "--dedup-claim-budget-ms", "1.5",
    )  # fmt: skip
    assert chosen.path_policy == PathPolicy(
        ["ssp-b", "ssp-a"], {"ssp-a": 15, "ssp-c": 5, "ssp-d": 1}, dict(BUNDLED_SSP_DOMAINS)
    )
    assert (chosen.dedup_window_ms, chosen.dedup_hold_ms, chosen.dedup_claim_budget_ms) == (
        500,
        2.0,
        1.5,
    )


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--dedup-window-ms", "5"], "--dedup-window-ms"),
        (["--dedup-window-ms", "60001"], "--dedup-window-ms"),
        (["--dedup-hold-ms", "-1"], "--dedup-hold-ms"),
        (["--dedup-hold-ms", "8"], "--dedup-hold-ms"),
        (["--dedup-claim-budget-ms", "0"], "--dedup-claim-budget-ms"),
        (["--ssp-preference", "a,,b"], "--ssp-preference"),
        (["--ssp-preference", "a,a"], "--ssp-preference"),
        (["--ssp-fee-bps", "a=x"], "--ssp-fee-bps"),
        (["--ssp-fee-bps", "a=10001"], "--ssp-fee-bps"),
        (["--ssp-domain", "a"], "--ssp-domain"),
        (["--ssp-domain", "a=nodot"], "--ssp-domain"),
        (["--ssp-domain", "a=x.example,a=y.example"], "--ssp-domain"),
    ],
)
def test_a_bad_dedup_option_is_named(argv: list[str], flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        settings(*argv)


def test_a_window_of_zero_turns_dedup_off() -> None:
    assert settings("--dedup-window-ms", "0").dedup_window_ms == 0


def test_settings_built_directly_are_checked_too() -> None:
    bad = Settings(ssp_preference=("a", "a"), ssp_fees_bps=(("a", -1),))
    with pytest.raises(SettingsError, match="--ssp-preference") as caught:
        bad.validate()
    assert "--ssp-fee-bps" in str(caught.value)


def test_the_worker_claims_after_every_other_stage(live_bidder: LiveBidder) -> None:
    assert live_bidder.state is not None
    stages = live_bidder.state.stages
    assert isinstance(stages[-1], SupplyDedupStage)
    assert not any(isinstance(stage, SupplyDedupStage) for stage in stages[:-1])
