"""The import rules of the architecture, checked on the source (``ast``, nothing imported).

Two rules, over every module of ``libcni/`` and every import in it (at the
top, inside functions, under ``TYPE_CHECKING``):

- **Directions.** Each part of the library (a subpackage, or a module at the
  top) imports only the parts :data:`ALLOWED` lists: the CLI sits on top and
  nothing imports it; ``invoke`` and ``cache`` know nothing of the operations;
  ``conf``, ``types``, ``version`` and the pure ``request`` reach no process
  or cache code; the manager goes through ``api``/``aio`` for every plugin run
  (from ``invoke`` only the constructor's type and default).
- **Private names.** A name or module starting with ``_`` belongs to the
  package that holds it: it is imported only inside that package and the
  packages within it, never from a parent or a sibling. So the private
  modules and names at the top of the library (``libcni/_log.py``,
  ``libcni._deadline``, ``libcni.values._pairs``) are shared by all of it,
  while a subpackage's (``libcni.cache._store``, ``libcni.invoke._raw``) are
  its own: the others use what its ``__init__`` (or a public module) exports.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "libcni"

#: The parts each part may import (itself always). ``libcni`` is the package's
#: ``__init__`` (``__version__``).
NEUTRAL = {"_codec", "_deadline", "_drive", "_env", "_json", "_log", "errors"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_codec": set(),
    "_json": set(),
    "_log": set(),
    "_env": set(),
    "_drive": set(),
    "_deadline": {"errors"},
    "version": {"_codec", "_json", "errors"},
    "types": {"_codec", "_json", "errors", "version"},
    "_checks": {"_codec", "errors"},
    "capabilities": {"_checks", "errors"},
    "values": {"capabilities", "errors"},
    "conf": {"_codec", "_json", "_load", "errors", "types", "version"},
    # conf's files and directories: reading, listing, the search of a network.
    "_load": {"_log", "errors"},
    # Pure: decides what a plugin is sent, runs and stores nothing.
    "request": {"_env", "capabilities", "errors", "values", "version"},
    # The I/O at the edge, knowing nothing of the operations.
    # values: a cache entry becomes a RuntimeConf / NetworkAttachment in one place.
    "cache": NEUTRAL | {"values"},
    "invoke": NEUTRAL,
    "_nspath": {"errors"},
    "netns": {"_log", "_nspath", "errors"},
    # The operations and their drivers; the effects the operations yield, a leaf.
    "_effects": {"_deadline", "cache", "conf", "errors"},
    # netns: whether a DEL's netns is still a namespace (behaviour §11.3).
    "_ops": NEUTRAL
    | {
        "_effects",
        "_events",
        "cache",
        "conf",
        "invoke",
        "netns",
        "request",
        "types",
        "values",
        "version",
    },
    # GC; STATUS, VERSION, validation and the cache getters: over the state of _ops.
    "_ops_gc": NEUTRAL | {"_effects", "_ops", "cache", "conf", "request", "values", "version"},
    "_ops_info": NEUTRAL
    | {"_effects", "_ops", "cache", "conf", "request", "types", "values", "version"},
    **dict.fromkeys(
        ("api", "aio"),
        NEUTRAL
        | {"_effects", "_events", "_ops", "_ops_gc", "_ops_info", "cache", "conf", "invoke"}
        | {"request", "types", "values", "version"},
    ),
    # The observers wrap the performer of effects: they know the effects, not the operations.
    "_events": NEUTRAL | {"_effects", "values"},
    "metrics": {"_events"},
    "tracing": {"_events", "libcni"},
    "testing": {"errors", "types", "version"},
    # Over the operations of api/aio; conf, types and cache reads.
    "manager": NEUTRAL
    | {
        "_events",
        "aio",
        "api",
        "cache",
        "capabilities",
        "conf",
        "invoke",  # only INVOKE_FOR_MANAGER
        "netns",
        "request",
        "types",
        "values",
        "version",
    },
    "cli": {"*"},
    "libcni": {"*"},  # but the CLI, as every part
    "__main__": {"cli"},
}

#: What the manager takes from ``invoke``: the type and the default of its constructor, and
#: the async loop's turns (its operations take turns as ``AsyncCNIConfig``'s do); every
#: plugin it runs goes through ``CNIConfig``.
INVOKE_FOR_MANAGER = {
    "DEFAULT_PLUGIN_DIRS",
    "Exec",
    "operation_ended",
    "operation_started",
    "step",
}

SUBPACKAGES = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}


def _module_name(path: Path) -> str:
    parts = ("libcni", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, path: Path) -> str:
    """The package a module is in (a package's ``__init__`` is in the package itself)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _part(module: str) -> str:
    """The part of the library ``module`` belongs to: its subpackage, or its own name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "libcni"
    return parts[1]


def _is_package(dotted: str) -> bool:
    return (ROOT.parent / dotted.replace(".", "/") / "__init__.py").exists()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.lru_cache(maxsize=1)
def _library() -> tuple[tuple[Path, str], ...]:
    return tuple((path, path.read_text()) for path in sorted(ROOT.rglob("*.py")))


def _sources(planted: dict[str, str] | None = None) -> dict[Path, str]:
    """Every module of the library and its source; ``planted``: lines added to a module, or
    a new one (tests)."""
    sources = dict(_library())
    for where, source in (planted or {}).items():
        sources[ROOT / where] = sources.get(ROOT / where, "") + source
    return sources


def _imports(
    sources: dict[Path, str],
) -> Iterator[tuple[str, str, Path, int, str, list[str]]]:
    """``(module, its package, path, line, imported module, names)`` of every import."""
    for path, source in sources.items():
        module = _module_name(path)
        package = _package(module, path)
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                if target == "libcni" or target.startswith("libcni."):
                    yield module, package, path, node.lineno, target, [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("libcni"):
                        yield module, package, path, node.lineno, alias.name, []


def _privates(dotted: list[str]) -> Iterator[tuple[str, str]]:
    """Each private component of ``dotted`` (a module path, then maybe a name) and the
    package that owns it."""
    for k in range(1, len(dotted)):
        if _private(dotted[k]):
            holder = ".".join(dotted[:k])
            # A module (or subpackage) of package `holder`, or a name in module `holder`.
            yield dotted[k], holder if _is_package(holder) else holder.rpartition(".")[0]


def _graph(planted: dict[str, str] | None = None) -> dict[str, set[str]]:
    """The parts each part imports (every import, as :func:`_violations` reads them)."""
    graph: dict[str, set[str]] = {}
    for module, _, _, _, target, names in _imports(_sources(planted)):
        theirs = [_part(target)]
        if target == "libcni":
            theirs = [
                n if (ROOT / f"{n}.py").exists() or n in SUBPACKAGES else "libcni" for n in names
            ]
        graph.setdefault(_part(module), set()).update(theirs)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of ``graph`` (its parts, the first repeated at the end), or ``[]``."""
    done: set[str] = set()

    def visit(part: str, path: list[str]) -> list[str]:
        if part in path:
            return [*path[path.index(part) :], part]
        if part in done:
            return []
        for other in sorted(graph.get(part, set()) - {part}):
            found = visit(other, [*path, part])
            if found:
                return found
        done.add(part)
        return []

    for part in sorted(graph):
        found = visit(part, [])
        if found:
            return found
    return []


def _violations(planted: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The imports against each rule, as ``path:line: what``."""
    directions: list[str] = []
    private: list[str] = []
    for module, package, path, line, target, names in _imports(_sources(planted)):
        where = f"{path.relative_to(ROOT.parent)}:{line}"
        mine, theirs = _part(module), _part(target)
        targets = [theirs]
        if target == "libcni":  # from libcni import x: x is the part (a module) or a name
            targets = [
                n if (ROOT / f"{n}.py").exists() or n in SUBPACKAGES else "libcni" for n in names
            ]
        for part in targets:
            allowed = ALLOWED.get(mine, set())
            if part == mine:
                continue
            if part == "cli" and mine != "__main__":
                directions.append(f"{where}: {module} imports the CLI ({target})")
            elif "*" not in allowed and part not in allowed:
                directions.append(f"{where}: {module} ({mine}) imports {target} ({part})")
            elif mine == "manager" and part == "invoke":
                extra = set(names) - INVOKE_FOR_MANAGER
                if extra:
                    directions.append(f"{where}: {module} imports {sorted(extra)} from invoke")
        paths = [[*target.split("."), n] for n in names] or [target.split(".")]
        for dotted in paths:
            for name, owner in _privates(dotted):
                if package != owner and not package.startswith(f"{owner}."):
                    private.append(
                        f"{where}: {module} imports {'.'.join(dotted)}: {name} is private to "
                        f"{owner}"
                    )
    return directions, private


def test_every_import_goes_in_an_allowed_direction() -> None:
    parts = {_part(_module_name(p)) for p in ROOT.rglob("*.py")}
    assert parts <= set(ALLOWED), f"parts without rules: {sorted(parts - set(ALLOWED))}"
    directions, _ = _violations()
    assert directions == []


def test_no_module_imports_a_private_name_of_another_package() -> None:
    _, private = _violations()
    assert private == []


def test_no_two_parts_import_each_other_even_through_others() -> None:
    # Each top-level module and each subpackage is one part (the types/ package too).
    assert _cycle(_graph()) == []


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    planted = {"_effects.py": "from ._events import Event\n"}
    assert _cycle(_graph(planted)) == ["_effects", "_events", "_effects"]


@pytest.mark.parametrize(
    ("source", "where", "expected"),
    [
        # Each rule fails on a planted import (the checks can fail).
        ("from ..cache._store import ResultCache\n", "manager/_x.py", "private"),
        ("from ..cache._lock import acquire\n", "manager/_x.py", "private"),
        ("from .cache._store import ResultCache\n", "api.py", "private"),
        ("from ..types import _base\n", "manager/_x.py", "private"),
        ("from .manager._state import State\n", "api.py", "directionprivate"),
        ("from .invoke._raw import RawExec\n", "api.py", "private"),
        ("from ..api import CNIConfig\n", "cache/_x.py", "direction"),
        ("from .invoke import RawExec\n", "request.py", "direction"),
        ("from ..cli import main\n", "manager/_x.py", "direction"),
        ("from ..invoke import RawExec\n", "manager/_x.py", "direction"),
        ("from .._ops import Operations\n", "manager/_x.py", "direction"),
        # Allowed: the shared internals, a package's own privates, a public re-export.
        ("from .._deadline import Deadline\n", "manager/_x.py", ""),
        ("from ..values import _pairs\n", "manager/_x.py", ""),
        ("from . import _store\n", "cache/_x.py", ""),
        ("from ..cache import GCScan\n", "manager/_x.py", ""),
        ("from ..invoke import Exec\n", "manager/_x.py", ""),
    ],
)
def test_the_rules_refuse_what_they_name(source: str, where: str, expected: str) -> None:
    planted = {where: source}
    directions, private = _violations(planted)
    found = ("direction" if directions else "") + ("private" if private else "")
    assert found == expected, (directions, private)
