"""The library's loggers, without importing :mod:`logging` (about 5 ms) at ``import libcni``.

Modules write ``from . import _log as logging``: :func:`getLogger` and the level numbers.
The logger it returns imports :mod:`logging` at its first use, then hands out the real
logger's bound methods (the records name the right caller). The ``libcni`` logger gets its
:class:`logging.NullHandler` before the first record (at import if :mod:`logging` was).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import logging

__all__ = ["CRITICAL", "DEBUG", "ERROR", "INFO", "WARNING", "getLogger"]

CRITICAL = 50
ERROR = 40
WARNING = 30
INFO = 20
DEBUG = 10

_ROOT = "libcni"
_ready = False


def _logging() -> Any:
    """Import :mod:`logging`; give the ``libcni`` logger its NullHandler once."""
    global _ready
    import logging

    if not _ready:
        # Two threads may both get here: a second NullHandler changes nothing.
        logging.getLogger(_ROOT).addHandler(logging.NullHandler())
        _ready = True
    return logging


class _Logger:
    """Stands for ``logging.getLogger(name)`` until its first use."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        # What the instance lacks: the real logger's methods are kept, its data read each time.
        value = getattr(_logging().getLogger(self.name), attr)
        if callable(value):
            setattr(self, attr, value)
        return value


def getLogger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, importing :mod:`logging` at its first use."""
    if "logging" in sys.modules:
        return cast("logging.Logger", _logging().getLogger(name))
    return cast("logging.Logger", _Logger(name))


if "logging" in sys.modules:
    _logging()
