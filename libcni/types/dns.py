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
    """DNS settings: ``nameservers``, ``domain``, ``search`` and ``options``."""

    nameservers: tuple[str, ...] = ()
    domain: str = ""
    search: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, obj: Any, error: type[ConfigError] = ConfigError) -> DNS:
        """Parse a JSON ``dns`` object; a wrongly typed field raises ``error`` naming it."""
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
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, empty fields omitted (as the Go library's ``omitempty``)."""
        out: dict[str, Any] = {}
        if self.nameservers:
            out["nameservers"] = list(self.nameservers)
        if self.domain:
            out["domain"] = self.domain
        if self.search:
            out["search"] = list(self.search)
        if self.options:
            out["options"] = list(self.options)
        return out

    def is_empty(self) -> bool:
        """Whether no field is set."""
        return not (self.nameservers or self.domain or self.search or self.options)
