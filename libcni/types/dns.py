"""The DNS block shared by configurations and results of every version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import ConfigError

__all__ = ["DNS"]


def _str_tuple(value: Any, field: str, error: type[ConfigError]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise error(f"invalid dns: '{field}' must be a list of strings", repr(value)[:200])
    return tuple(value)


@attrs.frozen
class DNS:
    """DNS settings: ``nameservers``, ``domain``, ``search`` and ``options``.

    ``extra`` holds unknown members of the JSON object; it is filled only when
    parsing with ``keep_unknown=True`` (results do, to pass them on) and is
    written back by :meth:`to_dict`. It takes no part in hashing.
    """

    nameservers: tuple[str, ...] = ()
    domain: str = ""
    search: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"nameservers", "domain", "search", "options"})

    @classmethod
    def from_dict(
        cls, obj: Any, error: type[ConfigError] = ConfigError, *, keep_unknown: bool = False
    ) -> DNS:
        """Parse a JSON ``dns`` object; a wrongly typed field raises ``error`` naming it.

        With ``keep_unknown``, members other than the four known ones are kept
        in ``extra``.
        """
        if not isinstance(obj, Mapping):
            raise error("invalid dns: must be an object", repr(obj)[:200])
        domain = obj.get("domain", "")
        if domain is None:
            domain = ""
        if not isinstance(domain, str):
            raise error("invalid dns: 'domain' must be a string", repr(domain)[:200])
        return cls(
            nameservers=_str_tuple(obj.get("nameservers"), "nameservers", error),
            domain=domain,
            search=_str_tuple(obj.get("search"), "search", error),
            options=_str_tuple(obj.get("options"), "options", error),
            extra=(
                {k: v for k, v in obj.items() if k not in cls.KNOWN} if keep_unknown else {}
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, empty fields omitted (as the Go library's ``omitempty``),
        plus any unknown members kept in ``extra``."""
        from .._codec import unstructure

        return unstructure(self)

    def is_empty(self) -> bool:
        """Whether no known field is set (unknown members in ``extra`` do not count)."""
        return not (self.nameservers or self.domain or self.search or self.options)
