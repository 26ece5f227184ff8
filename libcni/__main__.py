"""``python -m libcni``: the ``libcni`` command line (see :mod:`libcni.cli`)."""

from __future__ import annotations

import sys

from libcni.cli import main

if __name__ == "__main__":
    sys.exit(main())
