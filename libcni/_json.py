"""Strict JSON decoding for every parser of outside input: no ``NaN``, ``Infinity`` nor
overflowing numbers (JSON and the Go library refuse them). Callers turn the exceptions
into their own error class. :mod:`json` (about 1.2 ms) is imported at its first use.
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


_decoder: Any = None  # one json.JSONDecoder, made at the first use


def strict_loads(data: bytes | bytearray | str) -> Any:
    """``json.loads`` without NaN, Infinity or overflowing numbers.

    Raises ``ValueError`` (``json.JSONDecodeError`` and ``UnicodeDecodeError``
    are ones) or ``RecursionError`` for input nested too deeply.
    """
    global _decoder
    import json

    if not isinstance(data, str):
        # As json.loads: the encoding from the first bytes (UTF-8, -16 or -32).
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    if _decoder is None:
        # json.loads with hooks builds a decoder at every call: one serves every call.
        _decoder = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
    return _decoder.decode(data)
