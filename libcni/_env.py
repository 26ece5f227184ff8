"""A plugin's environment, encoded once for every plugin of an operation.

Neutral: the pure ``request`` builds an :class:`Environment`, ``invoke``
starts processes with its encoded form, ``_events`` copies it for observers;
it imports nothing of libcni.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["Environment", "encode_env"]


_UTF8 = (
    sys.getfilesystemencoding() == "utf-8" and sys.getfilesystemencodeerrors() == "surrogateescape"
)


def encode_env(env: Mapping[str, str]) -> list[bytes]:
    """``env`` as ``execve`` takes it: ``KEY=VALUE`` byte strings (``ValueError`` for ``=`` in a key).

    Encoded as :func:`os.fsencode` does; a NUL is refused when the process starts.
    """
    if _UTF8 and all(type(k) is str and type(v) is str for k, v in env.items()):
        if any("=" in k for k in env):
            raise ValueError("illegal environment variable name")
        return [f"{k}={v}".encode("utf-8", "surrogateescape") for k, v in env.items()]
    out = []
    for key, value in env.items():
        k = os.fsencode(key)
        if b"=" in k:
            raise ValueError("illegal environment variable name")
        out.append(k + b"=" + os.fsencode(value))
    return out


class Environment(dict[str, str]):
    """A read-only environment whose encoded form is computed once, however many plugins it starts.

    The same for every plugin of one operation (``request.operation_env``);
    :class:`~libcni.invoke.RawExec` starts each of them without encoding it
    again. Any other ``Mapping`` works too, encoded at each call.
    """

    __slots__ = ("_encoded",)

    def encoded(self) -> list[bytes]:
        """The ``KEY=VALUE`` byte strings, computed at the first call."""
        try:
            return self._encoded
        except AttributeError:
            self._encoded: list[bytes] = encode_env(self)
            return self._encoded

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("an Environment is read-only; copy it with dict(env)")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only
