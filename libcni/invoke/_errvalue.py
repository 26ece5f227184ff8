"""The attrs class of a CNI error object, built at the first failing plugin (``_errobj``)."""

from __future__ import annotations

import attrs

__all__ = ["ErrorObject"]


@attrs.frozen
class ErrorObject:
    """The fields of a CNI error object (other members are ignored, as Go does)."""

    code: int
    msg: str
    details: str = ""
