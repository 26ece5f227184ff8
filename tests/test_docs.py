"""The examples of README.md and docs/ run, and the documentation builds.

Every Python block is executed: ```` ```python ```` fences in README.md and
in docs/**/*.md, ``.. code-block:: python`` (or ``.. code:: python``) in
docs/**/*.rst. The convention for whoever writes documentation:

- The blocks of one file run in order, in one namespace, like one script.
- Four names are already defined when they run:

  ``PLUGIN_DIR``  a plugin directory holding ``tests/plugins/testplugin``
                  under the names in :data:`PLUGIN_NAMES` (with no "test"
                  key in its configuration, ADD returns a fixed 1.x result, or
                  the ``prevResult`` it was given, and every other command
                  succeeds);
  ``CONF_DIR``    a configuration directory holding ``10-mynet.conflist``,
                  :data:`MYNET_CONFLIST` (docs/index.rst shows it to readers);
  ``CACHE_DIR``   an empty cache directory;
  ``NETNS_DIR``   a directory for network namespaces (``/run/netns`` on a
                  real system; every mount made there is undone afterwards).

- A block whose first line is ``# not run`` is only compiled, not run. Keep
  those for the few examples that need a real system (``/etc/cni/net.d``,
  the reference plugins).
- A block whose first line is ``# needs root`` runs as root (network
  namespaces) and is only compiled otherwise, unless
  ``LIBCNI_REQUIRE_NETNS=1`` (CI), which fails instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _require import required

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TESTPLUGIN = Path(__file__).resolve().parent / "plugins" / "testplugin"

#: The plugin types the examples use; each is the test plugin.
PLUGIN_NAMES = ("bridge", "host-local", "portmap", "tuning", "firewall", "loopback")

#: ``CONF_DIR/10-mynet.conflist``, the network of the examples.
MYNET_CONFLIST: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "name": "mynet",
    "plugins": [
        {
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": True,
            "ipMasq": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.22.0.0/16"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        },
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}

NOT_RUN = "# not run"
NEEDS_ROOT = "# needs root"

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*\{?(python|py|python3)\}?\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+(?:code-block|code|sourcecode)::\s*(python3?|py)\s*$")
_RST_OPTION = re.compile(r"^\s*:[\w-]+:")


def doc_files() -> list[Path]:
    """README.md and every page of docs/ (not the build output)."""
    files = [ROOT / "README.md"] if (ROOT / "README.md").exists() else []
    for path in sorted(DOCS.rglob("*")):
        if "_build" in path.relative_to(DOCS).parts:
            continue
        if path.suffix in (".rst", ".md") and path.is_file():
            files.append(path)
    return files


def _markdown_blocks(lines: list[str]) -> list[tuple[int, str]]:
    blocks: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        i += 1
        if not m:
            continue
        indent, fence = m.group(1), m.group(2)
        start, body = i + 1, []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        blocks.append((start, "\n".join(body)))
    return blocks


def _rst_blocks(lines: list[str]) -> list[tuple[int, str]]:
    blocks: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        i += 1
        if not m:
            continue
        outer = len(m.group(1))
        while i < len(lines) and (_RST_OPTION.match(lines[i]) or not lines[i].strip()):
            i += 1
        start, body = i + 1, []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > outer
        ):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        blocks.append((start, "\n".join(b[indent:] for b in body)))
    return blocks


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(first line number, source)`` of every Python block of ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return _rst_blocks(lines) if path.suffix == ".rst" else _markdown_blocks(lines)


def _is_not_run(source: str) -> bool:
    return source.lstrip().startswith(NOT_RUN)


def _needs_root(source: str) -> bool:
    return source.lstrip().startswith(NEEDS_ROOT)


def _unmount_under(root: Path) -> None:
    """Undo every mount at or under ``root`` (what examples pinned in ``NETNS_DIR``)."""
    prefix = os.path.realpath(root)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in reversed([p for p in points if p == prefix or p.startswith(prefix + "/")]):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


@pytest.fixture
def example_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The names every example may use, over fresh directories."""
    plugin_dir = tmp_path / "bin"
    conf_dir = tmp_path / "net.d"
    cache_dir = tmp_path / "cache"
    for d in (plugin_dir, conf_dir, cache_dir):
        d.mkdir()
    for name in PLUGIN_NAMES:
        (plugin_dir / name).symlink_to(TESTPLUGIN)
    (conf_dir / "10-mynet.conflist").write_text(json.dumps(MYNET_CONFLIST, indent=2))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp() in examples
    monkeypatch.delenv("TESTPLUGIN_RECORD", raising=False)
    try:
        yield {
            "__name__": "__docs__",
            "PLUGIN_DIR": str(plugin_dir),
            "CONF_DIR": str(conf_dir),
            "CACHE_DIR": str(cache_dir),
            "NETNS_DIR": str(tmp_path / "netns"),
        }
    finally:
        if os.geteuid() == 0:
            _unmount_under(tmp_path)


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", [p for p in doc_files() if python_blocks(p)], ids=_id)
def test_examples_run(path: Path, example_env: dict[str, Any]) -> None:
    assert os.access(TESTPLUGIN, os.X_OK), f"{TESTPLUGIN} must be executable"
    for line, source in python_blocks(path):
        # Padding keeps the line numbers of tracebacks those of the file.
        code = compile("\n" * (line - 1) + source, str(path), "exec")
        if _is_not_run(source):
            continue
        if _needs_root(source) and os.geteuid() != 0:
            if required():
                pytest.fail(f"{path}:{line} needs root (LIBCNI_REQUIRE_NETNS=1: not skipping)")
            continue
        exec(code, example_env)


def test_extraction_finds_the_examples() -> None:
    """Guards the extraction itself: the pages with examples are found and parsed."""
    found = {_id(p): len(python_blocks(p)) for p in doc_files()}
    assert found.get("README.md", 0) >= 2
    pages = ("index", "concepts", "loading", "operations", "errors", "async", "testing")
    for page in (*pages, "netns"):
        assert found.get(f"docs/{page}.rst", 0) >= 1, page


def test_readme_starts_with_the_two_commands() -> None:
    """The README's first code block: set up and run the demo, set up and run the tests."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^```\w*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert m, "README.md has no code block"
    commands = [line.strip() for line in m.group(1).splitlines() if line.strip()]
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]
    for command in commands:
        assert os.access(ROOT / command, os.X_OK), f"{command} must be executable"


def test_index_shows_the_conflist_the_examples_use() -> None:
    text = (DOCS / "index.rst").read_text(encoding="utf-8")
    m = re.search(r"\.\. code-block:: json\n\n((?:      .*\n|\n)+)", text)
    assert m, "docs/index.rst must show 10-mynet.conflist in a json code block"
    assert json.loads(m.group(1)) == MYNET_CONFLIST


# Slow by nature (about 10 s): a whole Sphinx build, nitpicky and warnings as errors,
# so that a plain pytest run catches a reference that no longer resolves.
def test_docs_build(tmp_path: Path) -> None:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-n",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert (tmp_path / "html" / "index.html").exists()
    # The API reference never shows a private base class (CNIConfig's is libcni._ops).
    api = (tmp_path / "html" / "api.html").read_text(encoding="utf-8")
    bases = re.findall(r"Bases: (.*?)</p>", api, re.S)
    assert bases, "no 'Bases:' line in the API reference"
    shown = [re.sub(r"<[^>]+>", "", b) for b in bases]
    assert not [b for b in shown if "Operations" in b or re.search(r"(^|[\s.,])_", b)], shown


def test_intersphinx_is_offline() -> None:
    """CI has no network: the Python inventory is shipped in the repository."""
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert "sphinx.ext.intersphinx" in conf
    m = re.search(r'"python": \("https://docs.python.org/3", os.path.join\(([^)]*)\)\)', conf)
    assert m, "intersphinx must map python to a local inventory"
    parts = [p.strip().strip('"') for p in m.group(1).split(",")]
    inventory = DOCS.joinpath(*parts)
    assert inventory.read_bytes().startswith(b"# Sphinx inventory version 2")
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert re.search(r"sphinx-build -n ", script), "scripts/test.sh must build nitpicky (-n)"


#: What a page or a docstring must not cite: files that are not in the repository.
OUTSIDE = re.compile(r"behaviou?r\.md|api\.md|architecture\.md|\bshared/|\.\./spec\b|HACKING\.md")


def test_no_page_or_docstring_points_outside_the_repository() -> None:
    """The published docs stand alone: they state the rules instead of citing design files."""
    sources = doc_files() + sorted((ROOT / "libcni").rglob("*.py")) + [DOCS / "conf.py"]
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sources
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == []


def test_errors_page_lists_every_error_class() -> None:
    import libcni.errors

    page = (DOCS / "errors.rst").read_text(encoding="utf-8")
    classes = [
        name
        for name in libcni.errors.__all__
        if isinstance(getattr(libcni.errors, name), type)
        and issubclass(getattr(libcni.errors, name), BaseException)
    ]
    assert len(classes) >= 14
    tree = page.split("The hierarchy", 1)[1].split("==========", 1)[0]
    missing_tree = [c for c in classes if not re.search(rf"\b{c}\b", tree)]
    missing_table = [c for c in classes if f"``{c}``" not in page]
    assert (missing_tree, missing_table) == ([], [])
    # ... and the codes by name, every one of them.
    assert [c.name for c in libcni.errors.Code if f"``{c.name}``" not in page] == []


def test_every_test_named_in_reliability_md_exists() -> None:
    """docs/reliability.md proves each promise with a test: each named test must exist."""
    import re

    text = (ROOT / "docs" / "reliability.md").read_text()
    refs = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
    assert len(refs) > 20
    missing = [
        f"{path}::{name}"
        for path, name in refs
        if not re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(), re.M)
    ]
    assert missing == []
