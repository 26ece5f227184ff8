"""Strict JSON decoding, shared by every parser of outside input.

Python's ``json`` accepts ``NaN``, ``Infinity`` and numbers that overflow to
infinity; JSON (and the Go library) does not. Callers turn the exceptions
into their own documented error class.

:mod:`json` itself (about 1.2 ms) is imported where it is first used, in
every module of libcni: ``import libcni`` spares it.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["strict_loads"]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def strict_loads(data: bytes | bytearray | str) -> Any:
    """``json.loads`` without NaN, Infinity or overflowing numbers.

    Raises ``ValueError`` (``json.JSONDecodeError`` and ``UnicodeDecodeError``
    are ones) or ``RecursionError`` for input nested too deeply.
    """
    import json

    return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
