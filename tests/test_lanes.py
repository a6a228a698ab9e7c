"""tests/lanes.py: which test process takes which module in ``make test``."""

from __future__ import annotations

from pathlib import Path

from tests.lanes import background_lane, module_marks, next_scope


def _module(directory: Path, name: str, marks: str | None) -> str:
    path = directory / name
    head = "import pytest\n\n"
    path.write_text(head + (f"pytestmark = {marks}\n" if marks else "") + "def test_a(): pass\n")
    return str(path)


def test_the_last_of_four_or_more_processes_is_the_background_lane() -> None:
    assert [background_lane(f"gw{i}", 4) for i in range(4)] == [False, False, False, True]
    assert not any(background_lane(f"gw{i}", 3) for i in range(3))
    assert background_lane("gw5", 6) and not background_lane("gw3", 6)


def test_module_marks_reads_the_module_level_pytestmark(tmp_path: Path) -> None:
    listed = _module(tmp_path, "test_listed.py", "[pytest.mark.long(30), pytest.mark.chaos]")
    single = _module(tmp_path, "test_single.py", "pytest.mark.long(5)")
    unmarked = _module(tmp_path, "test_unmarked.py", None)
    assert module_marks(listed) == {"long", "chaos"}
    assert module_marks(single) == {"long"}
    assert module_marks(unmarked) == frozenset()
    assert module_marks(str(tmp_path / "test_missing.py")) == frozenset()


def test_foreground_lanes_take_the_first_module_the_background_lane_the_last_pure(
    tmp_path: Path,
) -> None:
    long_one = _module(tmp_path, "test_long_one.py", "pytest.mark.long(90)")
    pure_a = _module(tmp_path, "test_pure_a.py", "pytest.mark.pure")
    pure_b = _module(tmp_path, "test_pure_b.py", "[pytest.mark.pure]")
    unmarked = _module(tmp_path, "test_unmarked.py", None)
    queue = [long_one, pure_a, pure_b, unmarked]
    assert next_scope(queue, background=False) == long_one
    assert next_scope(queue, background=True) == pure_b
    assert next_scope([long_one, unmarked], background=True) is None
    assert next_scope([], background=False) is None
