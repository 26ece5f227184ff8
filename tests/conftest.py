"""Shared fixtures of the libcni tests."""

from __future__ import annotations

from pathlib import Path

import pytest

PLUGINS_DIR = Path(__file__).parent / "plugins"


@pytest.fixture
def testplugin_dir() -> str:
    """The directory holding ``testplugin`` (see its docstring) and the other test plugins."""
    return str(PLUGINS_DIR)
