"""Skip a test whose environment is missing, unless CI asks for a failure instead.

Tests that need root, network namespaces or the reference plugins skip for a
person without them; CI sets ``LIBCNI_REQUIRE_NETNS=1`` so that a broken
environment cannot pass silently.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def required() -> bool:
    """Whether the environment asks these tests to fail rather than skip (CI)."""
    return os.environ.get("LIBCNI_REQUIRE_NETNS", "") not in ("", "0")


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it when ``LIBCNI_REQUIRE_NETNS=1``."""
    if required():
        pytest.fail(f"{reason} (LIBCNI_REQUIRE_NETNS=1: not skipping)", pytrace=False)
    pytest.skip(reason)
