"""Shared fixtures of the libcni tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

PLUGINS_DIR = Path(__file__).parent / "plugins"

# Property tests run real parsers on a shared 2-core machine: no per-example
# deadline (timing is the benchmarks' business). Under CI the examples are
# derandomized, so a run is repeatable and main cannot turn red by chance;
# local runs keep exploring new examples.
settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def testplugin_dir() -> str:
    """The directory holding ``testplugin`` (see its docstring) and the other test plugins."""
    return str(PLUGINS_DIR)
