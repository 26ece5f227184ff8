"""Legacy results of specification 0.1.0 and 0.2.0: ``ip4``/``ip6`` and ``dns``.

>>> r = Result020.from_dict({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.5/24"}})
>>> r.to_dict()
{'cniVersion': '0.2.0', 'ip4': {'ip': '10.0.0.5/24'}, 'dns': {}}
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

from .._codec import Invalid, field
from ..version import FAMILY_02
from ._base import Result, _check_version, _declared, _Value
from .dns import DNS

__all__ = ["VERSIONS", "IPConfig020", "Result020", "Route020"]

#: The versions with this layout.
VERSIONS: tuple[str, ...] = FAMILY_02


@_declared("route")
@attrs.frozen
class Route020(_Value):
    """A route of a legacy result: ``dst`` (CIDR, host bits kept) and ``gw``
    (``None`` when absent). ``extra`` holds unknown fields, kept as given."""

    dst: IPv4Interface | IPv6Interface
    gw: IPv4Address | IPv6Address | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)


@_declared("ip4")
@attrs.frozen
class IPConfig020(_Value):
    """The ``ip4`` or ``ip6`` block of a legacy result: ``ip`` (CIDR, host bits
    kept), ``gateway`` (or ``None``) and ``routes`` (a tuple of
    :class:`Route020`). ``extra`` holds unknown fields, kept as given."""

    ip: IPv4Interface | IPv6Interface
    gateway: IPv4Address | IPv6Address | None = None
    routes: tuple[Route020, ...] = ()
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)


@_declared("result")
@attrs.frozen
class Result020(Result):
    """A result of specification 0.1.0 or 0.2.0.

    ``ip4`` and ``ip6`` are :class:`IPConfig020` or ``None``; ``dns`` is a
    :class:`~libcni.types.DNS`. ``extra`` holds unknown top-level fields.
    """

    cni_version: str = field(
        default=VERSIONS[-1], validator=_check_version, key="cniVersion", always=True
    )
    ip4: IPConfig020 | None = None
    ip6: IPConfig020 | None = None
    dns: DNS = field(factory=DNS, always=True)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    VERSIONS = VERSIONS

    def _decoded(self) -> Result020:
        """``ip4`` holds an IPv4 address and ``ip6`` an IPv6 one."""
        for name, block, family in (("ip4", self.ip4, 4), ("ip6", self.ip6, 6)):
            if block is not None and block.ip.version != family:
                raise Invalid(f"{str(block.ip)!r} is not an IPv{family} address", f"{name}.ip")
        return self
