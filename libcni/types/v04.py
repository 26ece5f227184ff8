"""Results of specification 0.3.0, 0.3.1 and 0.4.0 (one layout).

As 1.x, but each IP carries ``version`` ("4" or "6") and interfaces have
only ``name``, ``mac`` and ``sandbox``; ``dns`` is always written.

>>> r = Result040.from_dict({"cniVersion": "0.4.0", "ips": [{"address": "fd00::5/64"}]})
>>> r.ips[0].version
'6'
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

from ..errors import DecodeError
from ._base import (
    Result,
    Route,
    _check_version,
    _cidr,
    _dns,
    _extra,
    _int,
    _ip,
    _items,
    _object,
    _short,
    _str,
)
from .dns import DNS

__all__ = ["VERSIONS", "IPConfig040", "Interface040", "Result040"]

#: The versions with this layout.
VERSIONS: tuple[str, ...] = ("0.3.0", "0.3.1", "0.4.0")


@attrs.frozen
class Interface040:
    """An interface of a 0.3.x/0.4.0 result: ``name``, ``mac``, ``sandbox``
    (empty when absent). ``extra`` holds unknown fields, kept as given."""

    name: str = ""
    mac: str = ""
    sandbox: str = ""
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"name", "mac", "sandbox"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "interface") -> Interface040:
        """Parse a JSON interface object; a malformed field raises :class:`~libcni.errors.DecodeError`."""
        obj = _object(obj, where)
        get = obj.get
        return cls(
            name=_str(get("name"), where, "name"),
            mac=_str(get("mac"), where, "mac"),
            sandbox=_str(get("sandbox"), where, "sandbox"),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON interface object: ``name`` always, ``mac``/``sandbox`` when set."""
        out: dict[str, Any] = {"name": self.name}
        if self.mac:
            out["mac"] = self.mac
        if self.sandbox:
            out["sandbox"] = self.sandbox
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out


def _family(instance: IPConfig040) -> str:
    return "4" if instance.address.version == 4 else "6"


def _version_matches(version: str, address: IPv4Interface | IPv6Interface) -> bool:
    if address.version == 4:
        return version == "4"
    # An IPv4-mapped IPv6 address is what the Go library calls IPv4.
    return version == "6" or (version == "4" and address.ip.ipv4_mapped is not None)


@attrs.frozen
class IPConfig040:
    """An IP address of a 0.3.x/0.4.0 result.

    As :class:`~libcni.types.v1.IPConfig100` plus ``version``, ``"4"`` or
    ``"6"`` (by default the family of ``address``). When parsing, a missing
    ``version`` is taken from the address; one that contradicts it is an error.
    """

    address: IPv4Interface | IPv6Interface
    version: str = attrs.field(default=attrs.Factory(_family, takes_self=True))
    gateway: IPv4Address | IPv6Address | None = None
    interface: int | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"version", "address", "gateway", "interface"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "ip") -> IPConfig040:
        """Parse a JSON IP object; a malformed field raises :class:`~libcni.errors.DecodeError` naming it."""
        obj = _object(obj, where)
        get = obj.get
        address = _cidr(get("address"), where, "address")
        version = get("version")
        if version is None or version == "":
            version = "4" if address.version == 4 else "6"
        elif type(version) is not str or not _version_matches(version, address):
            raise DecodeError(
                f"{where}.version: {_short(version)} does not match address {str(address)!r}"
                if version in ("4", "6")
                else f"{where}.version: must be \"4\" or \"6\", not {_short(version)}"
            )
        return cls(
            address=address,
            version=version,
            gateway=_ip(get("gateway"), where, "gateway"),
            interface=_int(get("interface"), where, "interface", 0),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON IP object; ``gateway``/``interface`` omitted when ``None``."""
        out: dict[str, Any] = {"version": self.version, "address": str(self.address)}
        if self.gateway is not None:
            out["gateway"] = str(self.gateway)
        if self.interface is not None:
            out["interface"] = self.interface
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out


@attrs.frozen
class Result040(Result):
    """A result of specification 0.3.0, 0.3.1 or 0.4.0.

    ``interfaces``, ``ips`` and ``routes`` are tuples of :class:`Interface040`,
    :class:`IPConfig040` and :class:`~libcni.types.Route`; ``dns`` is a
    :class:`~libcni.types.DNS`. ``extra`` holds unknown top-level fields.
    """

    cni_version: str = attrs.field(default="0.4.0", validator=_check_version)
    interfaces: tuple[Interface040, ...] = ()
    ips: tuple[IPConfig040, ...] = ()
    routes: tuple[Route, ...] = ()
    dns: DNS = attrs.field(factory=DNS)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    VERSIONS = VERSIONS
    KNOWN = frozenset({"cniVersion", "interfaces", "ips", "routes", "dns"})

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | None, cni_version: str = "") -> Result040:
        """Parse a decoded JSON result as ``cni_version`` (default: the object's
        ``cniVersion``). Malformed fields raise :class:`~libcni.errors.DecodeError` naming them."""
        obj = {} if obj is None else _object(obj, "result")
        if not cni_version:
            cni_version = _str(obj.get("cniVersion"), "", "cniVersion")
        get = obj.get
        interfaces = _items(get("interfaces"), "interfaces", Interface040.from_dict)
        ips = _items(get("ips"), "ips", IPConfig040.from_dict)
        routes = _items(get("routes"), "routes", Route.from_dict)
        return cls(
            cni_version=cni_version,
            interfaces=interfaces,
            ips=ips,
            routes=routes,
            dns=_dns(get("dns")),
            extra=_extra(obj, cls.KNOWN, ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON result: empty lists omitted, ``dns`` always present."""
        out: dict[str, Any] = {"cniVersion": self.cni_version}
        if self.interfaces:
            out["interfaces"] = [i.to_dict() for i in self.interfaces]
        if self.ips:
            out["ips"] = [i.to_dict() for i in self.ips]
        if self.routes:
            out["routes"] = [r.to_dict() for r in self.routes]
        out["dns"] = self.dns.to_dict()
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out
