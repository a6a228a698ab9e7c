"""The compiled hot path: a stale build is refused, and a fresh one is what runs."""

from __future__ import annotations

import importlib
import os
from importlib.machinery import ExtensionFileLoader
from pathlib import Path

import pytest

from bidder import cli
from bidder.core import compiled
from bidder.core.compiled import HOT_PATH, SUFFIX, built, extension, source, stale


def _module(root: Path, module: str, *, source_at: float, built_at: float | None) -> None:
    path = source(module, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    os.utime(path, (source_at, source_at))
    if built_at is not None:
        extension(module, root).write_bytes(b"")
        os.utime(extension(module, root), (built_at, built_at))


def test_a_source_changed_after_its_build_is_stale_and_an_older_one_is_not(
    tmp_path: Path,
) -> None:
    fresh, changed, plain = HOT_PATH[0], HOT_PATH[1], HOT_PATH[2]
    _module(tmp_path, fresh, source_at=1_000, built_at=2_000)
    _module(tmp_path, changed, source_at=3_000, built_at=2_000)
    _module(tmp_path, plain, source_at=3_000, built_at=None)
    assert built(tmp_path) == sorted([fresh, changed])
    assert stale(tmp_path) == [changed]


def test_a_compiled_module_no_longer_on_the_hot_path_is_stale(tmp_path: Path) -> None:
    dropped = "bidder.core.not_on_the_hot_path"
    assert dropped not in HOT_PATH
    _module(tmp_path, dropped, source_at=1_000, built_at=2_000)
    assert stale(tmp_path) == [dropped]


def test_an_extension_without_its_source_is_stale(tmp_path: Path) -> None:
    module = HOT_PATH[0]
    _module(tmp_path, module, source_at=1_000, built_at=2_000)
    source(module, tmp_path).unlink()
    assert stale(tmp_path) == [module]


def test_the_command_line_refuses_a_stale_build_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "stale", lambda: ["bidder.pipeline.stages"])
    assert cli.main(["campaigns", "check", "fixtures/openrtb/campaigns.json"]) == 2
    err = capsys.readouterr().err
    assert f"bidder/pipeline/stages{SUFFIX} is out of date" in err
    assert "make compiled" in err


def test_every_built_module_is_imported_from_its_extension() -> None:
    # Under `make test` (compiled) every hot-path module is checked; with nothing built
    # (`COMPILE=0`), only that no stray extension is there.
    for module in built():
        spec = importlib.import_module(module).__spec__
        assert spec is not None and isinstance(spec.loader, ExtensionFileLoader), module
    assert set(built()) <= set(HOT_PATH)
    assert compiled.stale() == []
