"""What the settings' names and URLs look like: Kinesis stream names, S3 bucket names,
Valkey key namespaces, and server URLs by scheme."""

from __future__ import annotations

import re

STREAM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
KEY_NAMESPACE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def is_url(value: str | None, schemes: tuple[str, ...]) -> bool:
    """Unset (None), or a URL with one of ``schemes``."""
    return value is None or any(value.startswith(f"{scheme}://") for scheme in schemes)
