"""The DNS block shared by configurations and results of every version."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from .._codec import Invalid, known_keys, structure, unstructure
from ..errors import ConfigError

__all__ = ["DNS"]


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

    #: The JSON names of the fields (the others go to ``extra``).
    KNOWN: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_dict(
        cls, obj: Any, error: type[ConfigError] = ConfigError, *, keep_unknown: bool = False
    ) -> DNS:
        """Parse a JSON ``dns`` object; a wrongly typed field raises ``error`` naming it.

        With ``keep_unknown``, members other than the four known ones are kept
        in ``extra``.
        """
        try:
            dns = structure(obj, cls)
        except Invalid as e:
            raise error(f"invalid dns: {e}", repr(obj)[:200]) from None
        return dns if keep_unknown or not dns.extra else attrs.evolve(dns, extra={})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, empty fields omitted (as the Go library's ``omitempty``),
        plus any unknown members kept in ``extra``."""
        return unstructure(self)

    def is_empty(self) -> bool:
        """Whether no known field is set (unknown members in ``extra`` do not count)."""
        return not (self.nameservers or self.domain or self.search or self.options)


DNS.KNOWN = known_keys(DNS)
