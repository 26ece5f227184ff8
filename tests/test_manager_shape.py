"""The manager's shape (issue 30 item 1): one module per operation family, each small, over a
typed state that takes nothing private of the ``CNIConfig`` (checked on the source)."""

from __future__ import annotations

import ast
from pathlib import Path

MANAGER = Path(__file__).resolve().parent.parent / "libcni" / "manager"


def _trees() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(), str(p)) for p in sorted(MANAGER.glob("*.py"))}


def test_no_manager_file_over_600_lines() -> None:
    long = {p.name: n for p in MANAGER.glob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_no_manager_class_over_350_lines_nor_function_over_60() -> None:
    too_long = []
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = 350 if isinstance(node, ast.ClassDef) else 60
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    too_long.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    assert too_long == []


def _is_cni(node: ast.expr) -> bool:
    """``cni``, ``self.cni``, ``self._cni``: the manager's CNIConfig."""
    if isinstance(node, ast.Name):
        return node.id == "cni"
    return isinstance(node, ast.Attribute) and node.attr in ("cni", "_cni")


def test_the_manager_reads_nothing_private_of_its_cniconfig() -> None:
    # Its cache is CNIConfig.cache, its plugin finder cni.exec.find_in_path, its observers
    # its own: a private name renamed in api/_ops cannot break the manager unseen.
    reads = [
        f"{name}:{node.lineno} .{node.attr}"
        for name, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and _is_cni(node.value)
    ]
    assert reads == []
