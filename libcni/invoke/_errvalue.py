"""The attrs class of a CNI error object, read by :mod:`libcni.invoke._errobj`.

A module of its own so that ``import libcni`` does not build the class: only
a failing plugin's output needs it.
"""

from __future__ import annotations

import attrs

__all__ = ["ErrorObject"]


@attrs.frozen
class ErrorObject:
    """The fields of a CNI error object (other members are ignored, as Go does)."""

    code: int
    msg: str
    details: str = ""
