"""Sphinx configuration of the libcni documentation.

Build: ``sphinx-build -n -W --keep-going -b html docs docs/_build/html`` (offline:
the Python inventory for intersphinx is shipped in ``docs/_intersphinx``).
The pages are reStructuredText; ``myst_parser`` reads the Markdown pages
(``reliability.md``, ``performance.md``).
"""

from __future__ import annotations

import os
import re
import sys

# Document the checkout itself, installed or not.
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

project = "libcni"
author = "The libcni authors"
copyright = "The libcni authors"


def _release() -> str:
    # The version has one source, ``libcni.__version__`` (pyproject.toml reads it too).
    init = os.path.join(os.path.dirname(__file__), "..", "libcni", "__init__.py")
    with open(init, encoding="utf-8") as f:
        match = re.search(r'^__version__\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
    return match.group(1) if match else ""


release = _release()

extensions = ["sphinx.ext.autodoc", "sphinx.ext.intersphinx", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_intersphinx"]

# Every cross-reference must resolve (``-n`` on the command line does the same).
nitpicky = True

# Links to the Python documentation, resolved offline: the inventory is shipped
# in the repository (see _intersphinx/README.txt), since CI has no network.
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", os.path.join("_intersphinx", "python3.inv")),
}
default_role = "py:obj"

# The optional libraries of the observers have no inventory here (CI has no
# network): their types in signatures are shown, not linked.
nitpick_ignore = [
    ("py:class", "prometheus_client.registry.CollectorRegistry"),
    ("py:class", "opentelemetry.trace.TracerProvider"),
    # GCScan takes the cache as the Protocol of what it uses (no import cycle): a private name.
    ("py:class", "libcni.cache._gc._Cache"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}

myst_heading_anchors = 3

html_theme = "alabaster"
html_title = "libcni"
html_static_path: list[str] = []


def _is_private(cls: type) -> bool:
    """A class the API reference must not show: not reachable under a public name.

    ``libcni.types._base.Result`` is public (``libcni.types`` exports it);
    ``libcni._ops.Operations`` is not.
    """
    import importlib

    if cls.__name__.startswith("_"):
        return True
    parts = getattr(cls, "__module__", "").split(".")
    if not any(p.startswith("_") for p in parts):
        return False
    public = ".".join(p for p in parts[: next(i for i, p in enumerate(parts) if p.startswith("_"))])
    try:
        module = importlib.import_module(public)
    except ImportError:
        return True
    return cls.__name__ not in getattr(module, "__all__", ())


def _public_bases(app: object, name: str, obj: object, options: object, bases: list[type]) -> None:
    # CNIConfig and AsyncCNIConfig share a private base (the operations' rules):
    # show the nearest public classes instead, or object.
    shown: list[type] = []
    for base in bases:
        if _is_private(base):
            shown.extend(b for b in base.__mro__[1:] if not _is_private(b) and b is not object)
        else:
            shown.append(base)
    bases[:] = shown or [object]


def setup(app: object) -> None:
    app.connect("autodoc-process-bases", _public_bases)  # type: ignore[attr-defined]
