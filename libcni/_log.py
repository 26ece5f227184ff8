"""The library's loggers, without importing :mod:`logging` at ``import libcni``.

:mod:`logging` costs about 5 ms to import (traceback, string, threading...),
a sixth of ``import libcni``, and most runs of a plugin log nothing. Modules
of libcni write ``from . import _log as logging``: this module has the part of
:mod:`logging`'s interface they use, :func:`getLogger` and the level numbers.
The object :func:`getLogger` returns fetches the real :class:`logging.Logger`
(importing :mod:`logging`) at its first use, and from then on hands out the
real logger's own bound methods: a call costs what it costs on the logger, and
the records name the right caller.

Before the first record, the ``libcni`` logger gets its
:class:`logging.NullHandler` (a program that configures no logging sees
nothing); at ``import libcni`` already when :mod:`logging` was imported.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import logging

__all__ = ["CRITICAL", "DEBUG", "ERROR", "INFO", "WARNING", "getLogger"]

# logging's level numbers (fixed by its documentation).
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
        # Only for what the instance does not have yet: the real logger's
        # methods are kept on the instance, its data (level, handlers...) is
        # read from it each time.
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
