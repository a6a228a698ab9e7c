"""The bid path's compiled modules: which ones, and whether a build is stale.

``make compiled`` (``scripts/compile_hot_path.py``) compiles ``HOT_PATH`` with mypyc into
C extensions written beside their sources, one per module, for the running Python
version. Python imports an extension before a ``.py`` of the same name, so an edit to
one of these sources after a build would not run at all: ``stale()`` names the modules
whose source is newer than their extension, and the command line and the test suite
refuse to start on a stale build (``make`` rebuilds it; ``make uncompiled`` removes it).
Without a build every module runs interpreted, with the same behaviour.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the ``bidder``, ``fcap`` and ``models`` packages."""

HOT_PATH = (
    "bidder.core.tokens",
    "bidder.decide.eligibility",
    "bidder.openrtb.request",
    "bidder.pipeline.response",
    "bidder.pipeline.runner",
    "bidder.pipeline.stages",
    "bidder.serve.app",
    "bidder.serve.http.messages",
    "bidder.serve.http.protocol",
    "bidder.serve.http.server",
    "fcap.capper",
    "fcap.regional",
    "fcap.store",
    "models.features",
    "models.price",
    "models.serving",
)
"""The modules a bid runs through whose own Python work is most of a bid's CPU."""


SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
"""This Python version's extension suffix, e.g. ``.cpython-311-x86_64-linux-gnu.so``."""


def source(module: str, root: Path = ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def extension(module: str, root: Path = ROOT) -> Path:
    """Where this Python version's compiled form of ``module`` is, built or not."""
    return source(module, root).with_suffix(SUFFIX)


PACKAGES = ("bidder", "fcap", "ids", "models", "pacing")
GROUP = "bidder.core.compiled"
"""The build's name: its shared runtime is the extension ``bidder.core.compiled__mypyc``,
inside the package so that it imports from any working directory."""
RUNTIME_SUFFIX = "__mypyc"


def built(root: Path = ROOT) -> list[str]:
    """The modules this Python version imports compiled."""
    found = (p for package in PACKAGES for p in root.joinpath(package).rglob(f"*{SUFFIX}"))
    names = (".".join(p.relative_to(root).parts)[: -len(SUFFIX)] for p in found)
    return sorted(name for name in names if not name.endswith(RUNTIME_SUFFIX))


def stale(root: Path = ROOT) -> list[str]:
    """Compiled modules whose source changed after they were built, or that are no
    longer in ``HOT_PATH``."""
    return [
        m for m in built(root) if m not in HOT_PATH or _newer(source(m, root), extension(m, root))
    ]


def _newer(source: Path, extension: Path) -> bool:
    return not source.exists() or source.stat().st_mtime > extension.stat().st_mtime


def stale_message(modules: list[str]) -> str:
    first = extension(modules[0]).relative_to(ROOT)
    more = f" (and {len(modules) - 1} more)" if len(modules) > 1 else ""
    return (
        f"{first}{more} is out of date (its source changed, or it is no longer compiled) and "
        "would run instead of the source: run `make compiled` to rebuild, or "
        "`make uncompiled` to run the sources"
    )
