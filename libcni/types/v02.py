"""Legacy results of specification 0.1.0 and 0.2.0: ``ip4``/``ip6`` and ``dns``.

>>> r = Result020.from_dict({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.5/24"}})
>>> r.to_dict()
{'cniVersion': '0.2.0', 'ip4': {'ip': '10.0.0.5/24'}, 'dns': {}}
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

from ..errors import DecodeError
from ._base import (
    Result,
    _check_version,
    _cidr,
    _dns,
    _extra,
    _ip,
    _items,
    _object,
    _str,
)
from .dns import DNS

__all__ = ["VERSIONS", "IPConfig020", "Result020", "Route020"]

#: The versions with this layout.
VERSIONS: tuple[str, ...] = ("0.1.0", "0.2.0")


@attrs.frozen
class Route020:
    """A route of a legacy result: ``dst`` (CIDR, host bits kept) and ``gw``
    (``None`` when absent). ``extra`` holds unknown fields, kept as given."""

    dst: IPv4Interface | IPv6Interface
    gw: IPv4Address | IPv6Address | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"dst", "gw"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "route") -> Route020:
        """Parse a JSON route object; a malformed field raises :class:`~libcni.errors.DecodeError` naming it."""
        obj = _object(obj, where)
        get = obj.get
        return cls(
            dst=_cidr(get("dst"), where, "dst"),
            gw=_ip(get("gw"), where, "gw"),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON route object; ``gw`` omitted when ``None``."""
        out: dict[str, Any] = {"dst": str(self.dst)}
        if self.gw is not None:
            out["gw"] = str(self.gw)
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out


@attrs.frozen
class IPConfig020:
    """The ``ip4`` or ``ip6`` block of a legacy result: ``ip`` (CIDR, host bits
    kept), ``gateway`` (or ``None``) and ``routes`` (a tuple of
    :class:`Route020`). ``extra`` holds unknown fields, kept as given."""

    ip: IPv4Interface | IPv6Interface
    gateway: IPv4Address | IPv6Address | None = None
    routes: tuple[Route020, ...] = ()
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"ip", "gateway", "routes"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "ip4") -> IPConfig020:
        """Parse a JSON ``ip4``/``ip6`` object; a malformed field raises
        :class:`~libcni.errors.DecodeError` naming it."""
        obj = _object(obj, where)
        get = obj.get
        return cls(
            ip=_cidr(get("ip"), where, "ip"),
            gateway=_ip(get("gateway"), where, "gateway"),
            routes=_items(get("routes"), f"{where}.routes", Route020.from_dict),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; ``gateway`` and empty ``routes`` omitted."""
        out: dict[str, Any] = {"ip": str(self.ip)}
        if self.gateway is not None:
            out["gateway"] = str(self.gateway)
        if self.routes:
            out["routes"] = [r.to_dict() for r in self.routes]
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out


def _block(value: Any, name: str, family: int) -> IPConfig020 | None:
    if value is None:
        return None
    block = IPConfig020.from_dict(value, name)
    if block.ip.version != family:
        raise DecodeError(f"{name}.ip: {str(block.ip)!r} is not an IPv{family} address")
    return block


@attrs.frozen
class Result020(Result):
    """A result of specification 0.1.0 or 0.2.0.

    ``ip4`` and ``ip6`` are :class:`IPConfig020` or ``None``; ``dns`` is a
    :class:`~libcni.types.DNS`. ``extra`` holds unknown top-level fields.
    """

    cni_version: str = attrs.field(default="0.2.0", validator=_check_version)
    ip4: IPConfig020 | None = None
    ip6: IPConfig020 | None = None
    dns: DNS = attrs.field(factory=DNS)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    VERSIONS = VERSIONS
    KNOWN = frozenset({"cniVersion", "ip4", "ip6", "dns"})

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | None, cni_version: str = "") -> Result020:
        """Parse a decoded JSON result as ``cni_version`` (default: the object's
        ``cniVersion``, empty meaning 0.1.0). Malformed fields raise
        :class:`~libcni.errors.DecodeError` naming them; ``ip4`` must hold an IPv4 address and
        ``ip6`` an IPv6 one."""
        obj = {} if obj is None else _object(obj, "result")
        if not cni_version:
            cni_version = _str(obj.get("cniVersion"), "", "cniVersion") or "0.1.0"
        get = obj.get
        return cls(
            cni_version=cni_version,
            ip4=_block(get("ip4"), "ip4", 4),
            ip6=_block(get("ip6"), "ip6", 6),
            dns=_dns(get("dns")),
            extra=_extra(obj, cls.KNOWN, ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON result; ``ip4``/``ip6`` omitted when ``None``, ``dns`` always present."""
        out: dict[str, Any] = {"cniVersion": self.cni_version}
        if self.ip4 is not None:
            out["ip4"] = self.ip4.to_dict()
        if self.ip6 is not None:
            out["ip6"] = self.ip6.to_dict()
        out["dns"] = self.dns.to_dict()
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out
