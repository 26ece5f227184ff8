"""Shared fixtures of the libcni tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
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


@pytest.fixture
def env(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[harness.Env]:
    """The test's environment (``tests/harness.py``) in ``tmp_path``.

    A :class:`harness.Env` unless the test or its module names another class
    and its options with ``pytest.mark.env(cls=Class, **options)`` (the
    closest marker wins). Its ``wire`` sets what it needs in ``os.environ`` for the
    test; its ``close`` runs after the test, also when the test fails.
    """
    marker = request.node.get_closest_marker("env")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    cls: type[harness.Env] = options.pop("cls", harness.Env)
    e = cls(tmp_path, **options)
    e.wire(monkeypatch)
    try:
        yield e
    finally:
        e.close()
