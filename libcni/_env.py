"""A plugin's environment, the same read-only mapping for every plugin of an operation.
Neutral (it imports nothing of libcni): ``request`` builds it, ``invoke`` runs with it."""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["Environment"]


class Environment(dict[str, str]):
    """A read-only environment: the same for every plugin of one operation
    (``request.operation_env``); no plugin run can change another's."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("an Environment is read-only; copy it with dict(env)")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only
