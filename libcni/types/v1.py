"""Results of specification 1.0.0 and 1.1.0 (the two share one layout).

>>> r = Result100.from_dict({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24"}]})
>>> r.ips[0].address
IPv4Interface('10.0.0.5/24')
>>> r.to_dict()
{'cniVersion': '1.0.0', 'ips': [{'address': '10.0.0.5/24'}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

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
    _str,
)
from .dns import DNS

__all__ = ["VERSIONS", "IPConfig100", "Interface100", "Result100"]

#: The versions with this layout.
VERSIONS: tuple[str, ...] = ("1.0.0", "1.1.0")


@attrs.frozen
class Interface100:
    """An interface of a 1.x result.

    ``name``, ``mac``, ``sandbox`` (netns path or VM id; empty for a host
    interface), ``socket_path`` (JSON ``socketPath``), ``pci_id`` (JSON
    ``pciID``) are strings, empty when absent; ``mtu`` is ``None`` when absent.
    ``extra`` holds unknown fields, kept as given.
    """

    name: str = ""
    mac: str = ""
    mtu: int | None = None
    sandbox: str = ""
    socket_path: str = ""
    pci_id: str = ""
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"name", "mac", "mtu", "sandbox", "socketPath", "pciID"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "interface") -> Interface100:
        """Parse a JSON interface object; a malformed field raises :class:`~libcni.errors.DecodeError`."""
        obj = _object(obj, where)
        get = obj.get
        return cls(
            name=_str(get("name"), where, "name"),
            mac=_str(get("mac"), where, "mac"),
            mtu=_int(get("mtu"), where, "mtu"),
            sandbox=_str(get("sandbox"), where, "sandbox"),
            socket_path=_str(get("socketPath"), where, "socketPath"),
            pci_id=_str(get("pciID"), where, "pciID"),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON interface object: ``name`` always, other fields when set."""
        out: dict[str, Any] = {"name": self.name}
        if self.mac:
            out["mac"] = self.mac
        if self.mtu is not None:
            out["mtu"] = self.mtu
        if self.sandbox:
            out["sandbox"] = self.sandbox
        if self.socket_path:
            out["socketPath"] = self.socket_path
        if self.pci_id:
            out["pciID"] = self.pci_id
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out


@attrs.frozen
class IPConfig100:
    """An IP address of a 1.x result.

    ``address`` keeps the host bits (``IPv4Interface('10.0.0.5/24')``; its
    ``.ip`` is the address, ``.network`` the subnet); ``gateway`` is an
    address or ``None``; ``interface`` is the index into the result's
    ``interfaces`` or ``None`` (``0`` is a valid index and is written).
    ``extra`` holds unknown fields, kept as given.
    """

    address: IPv4Interface | IPv6Interface
    gateway: IPv4Address | IPv6Address | None = None
    interface: int | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"address", "gateway", "interface"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "ip") -> IPConfig100:
        """Parse a JSON IP object; a malformed field raises :class:`~libcni.errors.DecodeError` naming it."""
        obj = _object(obj, where)
        get = obj.get
        return cls(
            address=_cidr(get("address"), where, "address"),
            gateway=_ip(get("gateway"), where, "gateway"),
            interface=_int(get("interface"), where, "interface", 0),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON IP object; ``gateway``/``interface`` omitted when ``None``."""
        out: dict[str, Any] = {"address": str(self.address)}
        if self.gateway is not None:
            out["gateway"] = str(self.gateway)
        if self.interface is not None:
            out["interface"] = self.interface
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out


@attrs.frozen
class Result100(Result):
    """A result of specification 1.0.0 or 1.1.0.

    ``interfaces``, ``ips`` and ``routes`` are tuples of :class:`Interface100`,
    :class:`IPConfig100` and :class:`~libcni.types.Route`; ``dns`` is a
    :class:`~libcni.types.DNS`. ``extra`` holds unknown top-level fields.
    """

    cni_version: str = attrs.field(default="1.1.0", validator=_check_version)
    interfaces: tuple[Interface100, ...] = ()
    ips: tuple[IPConfig100, ...] = ()
    routes: tuple[Route, ...] = ()
    dns: DNS = attrs.field(factory=DNS)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    VERSIONS = VERSIONS
    KNOWN = frozenset({"cniVersion", "interfaces", "ips", "routes", "dns"})

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | None, cni_version: str = "") -> Result100:
        """Parse a decoded JSON result as ``cni_version`` (default: the object's
        ``cniVersion``). Malformed fields raise :class:`~libcni.errors.DecodeError` naming them."""
        obj = {} if obj is None else _object(obj, "result")
        if not cni_version:
            cni_version = _str(obj.get("cniVersion"), "", "cniVersion")
        get = obj.get
        interfaces = _items(get("interfaces"), "interfaces", Interface100.from_dict)
        ips = _items(get("ips"), "ips", IPConfig100.from_dict)
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
        """The JSON result: empty lists omitted, ``dns`` omitted when empty."""
        out: dict[str, Any] = {"cniVersion": self.cni_version}
        if self.interfaces:
            out["interfaces"] = [i.to_dict() for i in self.interfaces]
        if self.ips:
            out["ips"] = [i.to_dict() for i in self.ips]
        if self.routes:
            out["routes"] = [r.to_dict() for r in self.routes]
        dns = self.dns
        if dns.extra or not dns.is_empty():
            out["dns"] = dns.to_dict()
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out
