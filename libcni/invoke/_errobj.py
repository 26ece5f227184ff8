"""The CNI error object a failing plugin prints: ``{"code", "msg", "details"}``.

Pure: bytes in, the decoded fields (or why the bytes are not an error object)
out. Read through the strict JSON decoder (no NaN, no Infinity) and the one
converter (:mod:`libcni._codec`): ``code`` is an integer (not ``true``, not
``"5"``), ``msg`` a string, ``details`` a string or absent/``null``.

>>> decode_error_object(b'{"code": 7, "msg": "no IPs left"}')
(7, 'no IPs left', '')
>>> decode_error_object(b'{"code": "7", "msg": "x"}')
"code: must be an integer, not '7'"
"""

from __future__ import annotations

from .._codec import Invalid, structure
from .._json import strict_loads

__all__ = ["decode_error_object"]


def decode_error_object(stdout: bytes) -> tuple[int, str, str] | str:
    """``(code, msg, details)`` of a CNI error object, or why ``stdout`` is not one."""
    try:
        obj = strict_loads(stdout)
    except RecursionError:
        return "too deeply nested"
    except ValueError as e:  # includes JSONDecodeError and UnicodeDecodeError
        return f"not JSON ({e})"
    if not isinstance(obj, dict):
        return "not a JSON object"
    if obj.get("msg") is None:  # a message is what an error object is for
        return "msg: missing"
    from ._errvalue import ErrorObject  # its class built for a failing plugin only

    try:
        err = structure(obj, ErrorObject)
    except Invalid as e:
        return str(e)
    return err.code, err.msg, err.details
