"""Size is part of the design (design/architecture.md): checked on the source with ``ast``.

Every function of ``libcni/`` within 60 lines, every class within 350, every
file within 600, and no import cycle between files outside ``types/`` (a
cycle between two files means neither can be read, or tested, without the
other). The package as a whole stays under 15,000 lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "libcni"
FILES = sorted(ROOT.rglob("*.py"))

MAX_FUNCTION = 60
MAX_CLASS = 350
MAX_FILE = 600
MAX_PACKAGE = 15_000


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _nodes(kind: type | tuple[type, ...]) -> Iterator[tuple[str, ast.AST]]:
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, kind):
                yield f"{path.relative_to(ROOT.parent)}:{node.lineno}", node  # type: ignore[attr-defined]


def _length(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined,no-any-return]


def test_every_function_within_60_lines() -> None:
    long = [
        f"{where} {node.name} ({_length(node)})"  # type: ignore[attr-defined]
        for where, node in _nodes((ast.FunctionDef, ast.AsyncFunctionDef))
        if _length(node) > MAX_FUNCTION
    ]
    assert not long, long


def test_every_class_within_350_lines() -> None:
    long = [
        f"{where} {node.name} ({_length(node)})"  # type: ignore[attr-defined]
        for where, node in _nodes(ast.ClassDef)
        if _length(node) > MAX_CLASS
    ]
    assert not long, long


def test_every_file_within_600_lines_and_the_package_within_15000() -> None:
    sizes = {str(p.relative_to(ROOT.parent)): len(p.read_text().splitlines()) for p in FILES}
    assert not {p: n for p, n in sizes.items() if n > MAX_FILE}
    total = sum(sizes.values())
    assert total <= MAX_PACKAGE, f"libcni/ has {total} lines"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of libcni that ``path`` imports when it runs (at the top and in functions;
    not the annotations' imports under ``TYPE_CHECKING``, which never run): for
    ``from X import a``, the module ``X.a`` when there is one, else ``X``."""
    name = _name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("libcni"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if not base.startswith("libcni"):
                continue
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return out


def test_no_import_cycle_between_files_outside_types() -> None:
    modules = {_name(p): p for p in FILES}
    graph = {
        m: {i for i in _imports(p, set(modules)) if i in modules and i != m}
        for m, p in modules.items()
        if not m.startswith("libcni.types")
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if n.startswith("libcni.types"):
                continue
            if state.get(n) == 1:
                cycles.append([*stack[stack.index(n) :], n])
            elif n not in state:
                visit(n, [*stack, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
