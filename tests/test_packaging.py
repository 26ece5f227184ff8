"""Packaging: the license, the metadata, the package data, the changelog and the CI check.

The build itself (sdist, wheel, a fresh virtual environment, ``libcni
--version`` and the README example there) is ``scripts/check_package.sh``,
which ``scripts/test.sh`` (hence CI) runs; these tests keep its inputs honest.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

import pytest

import libcni

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def test_license_file_is_the_apache_2_0_text() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License\n                           Version 2.0")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text) > 10000  # the full text, not a pointer to it
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_metadata_is_complete() -> None:
    project = pyproject()["project"]
    for key in ("name", "description", "readme", "requires-python", "authors", "urls"):
        assert project.get(key), key
    assert project["requires-python"] == ">=3.10"
    classifiers = project["classifiers"]
    for minor in (10, 11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert "Typing :: Typed" in classifiers and "Operating System :: POSIX :: Linux" in classifiers
    assert all(url.startswith("https://") for url in project["urls"].values())
    # platformdirs is declared because the default cache directory uses it.
    assert any(dep.startswith("platformdirs") for dep in project["dependencies"])
    assert any(dep.startswith("build") for dep in project["optional-dependencies"]["test"])


def test_observability_extras_are_declared_and_in_the_test_extra() -> None:
    # behaviour.md §13: libcni.metrics and libcni.tracing need these, and only they.
    extras = pyproject()["project"]["optional-dependencies"]

    def names(deps: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0] for d in deps}

    assert names(extras["prometheus"]) == {"prometheus-client"}
    assert names(extras["otel"]) == {"opentelemetry-api"}
    # CI runs their tests with the real libraries (the SDK for its in-memory exporter).
    assert {"prometheus-client", "opentelemetry-api", "opentelemetry-sdk"} <= names(extras["test"])
    runtime = names(pyproject()["project"]["dependencies"])
    assert not runtime & {"prometheus-client", "opentelemetry-api", "opentelemetry-sdk"}


def test_package_data_has_no_dead_entries() -> None:
    data = pyproject()["tool"]["setuptools"]["package-data"]
    for package, patterns in data.items():
        for pattern in patterns:
            assert glob.glob(str(ROOT / package / pattern)), f"{package}/{pattern} matches nothing"


def test_changelog_exists_and_knows_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog")
    assert f"## [{libcni.__version__}]" in text and "## [Unreleased]" in text


def test_ci_builds_and_installs_the_wheel() -> None:
    script = ROOT / "scripts" / "check_package.sh"
    assert os.access(script, os.X_OK)
    body = script.read_text(encoding="utf-8")
    assert "-m build" in body and "-m venv" in body
    assert "--version" in body and "readme_example.py" in body
    test_sh = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert re.search(r"^echo \"== package\"; bash scripts/check_package.sh$", test_sh, re.M)
    assert (
        (ROOT / ".ci" / "run")
        .read_text(encoding="utf-8")
        .rstrip()
        .endswith("exec bash scripts/test.sh")
    )
