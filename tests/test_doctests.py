"""The examples in libcni's docstrings (``>>>``) run, and hold.

Every module of the package whose source has an example is a test: all its
examples are found (as many as its source has ``>>>`` lines, so none hides
where ``doctest`` does not look) and none fails. The optional-extra modules
(``libcni.metrics``, ``libcni.tracing``) import their libraries, which the
test extra installs. The documentation's examples are ``tests/test_docs.py``'s.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import pkgutil
import re
import types
from pathlib import Path

import pytest

import libcni

PROMPT = re.compile(r"^\s*>>> ", re.M)


def modules_with_examples() -> list[str]:
    """The names of libcni's modules whose source holds a ``>>>`` line, sorted."""
    names = ["libcni"] + [
        m.name
        for m in pkgutil.walk_packages(libcni.__path__, "libcni.")
        if m.name != "libcni.__main__"
    ]
    out = []
    for name in names:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        if PROMPT.search(Path(spec.origin).read_text()):
            out.append(name)
    return sorted(out)


def run_examples(module: types.ModuleType) -> tuple[int, int, str]:
    """(examples found, examples failed, the report of the failures) of ``module``."""
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    found = 0
    for test in finder.find(module):
        found += len(test.examples)
        runner.run(test, out=report.write)
    return found, runner.failures, report.getvalue()


def test_the_package_has_examples_in_many_modules() -> None:
    # A guard on the collection itself: an import or path mistake must not make it empty.
    assert len(modules_with_examples()) >= 10


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_hold(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    prompts = len(PROMPT.findall(Path(module.__file__).read_text()))
    found, failed, report = run_examples(module)
    assert failed == 0, f"{name}: {failed} of {found} examples failed\n{report}"
    assert found == prompts, f"{name}: doctest found {found} of the {prompts} examples"


def test_a_wrong_example_is_reported() -> None:
    # The check itself: a module whose example is wrong fails, with the example shown.
    module = types.ModuleType("wrong", ">>> 1 + 1\n3\n\n>>> \"right\"\n'right'\n")
    found, failed, report = run_examples(module)
    assert (found, failed) == (2, 1)
    assert "1 + 1" in report and "Expected:\n    3\nGot:\n    2" in report
