"""Sphinx configuration of the libcni documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
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

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

nitpicky = False
default_role = "py:obj"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}

myst_heading_anchors = 3

html_theme = "alabaster"
html_title = "libcni"
html_static_path: list[str] = []
