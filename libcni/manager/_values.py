"""The values of the network manager: requests, the loaded configuration, the merged view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

from ..conf import NetworkConfigList
from ..errors import CNIError
from ..types import Interface, IPConfig, Result, Route
from ..types.dns import DNS
from ..values import CapabilityArgs, _pairs, capability_mapping

__all__ = [
    "LOOPBACK_IFNAME",
    "LOOPBACK_NETWORK",
    "AttachmentResult",
    "ContainerInterface",
    "ContainerNetworks",
    "LoadedNetworks",
    "NetworkRequest",
]

LOOPBACK_NETWORK = "cni-loopback"
LOOPBACK_IFNAME = "lo"

IP = IPv4Interface | IPv6Interface


def _opt_mapping(value: CapabilityArgs | None) -> dict[str, Any] | None:
    return None if value is None else capability_mapping(value)


@attrs.frozen
class NetworkRequest:
    """One network of a setup: its name and, optionally, the interface name to use.

    ``args`` (pairs, or a mapping) are added after the setup's; ``capability_args`` (a
    mapping or a :class:`~libcni.capabilities.RuntimeConfig`), when given, replace the
    setup's. A plain string ``s`` in ``setup(networks=...)`` means ``NetworkRequest(s)``.

    >>> NetworkRequest("blue", "eth1").ifname
    'eth1'
    """

    network: str
    ifname: str | None = None
    args: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    capability_args: dict[str, Any] | None = attrs.field(default=None, converter=_opt_mapping)


@attrs.frozen
class LoadedNetworks:
    """The configuration of a :class:`NetworkManager` as of one moment.

    ``networks``: every usable network by name, in file order; ``defaults``: what
    ``setup`` attaches when given no networks; ``skipped``: each file not used, with
    the reason; ``files``: the file of each usable network; ``not_ready``: each network
    whose binary (or IPAM binary) is not found yet, with the reason; ``invalid``: each
    other network skipped whose name is known, with the reason.
    """

    networks: Mapping[str, NetworkConfigList] = attrs.field(factory=dict)
    defaults: tuple[str, ...] = ()
    skipped: Mapping[str, str] = attrs.field(factory=dict)
    files: Mapping[str, str] = attrs.field(factory=dict)
    not_ready: Mapping[str, str] = attrs.field(factory=dict)
    invalid: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class AttachmentResult:
    """One attachment of a container: ``network``, ``ifname`` and the ``result`` of its chain."""

    network: str
    ifname: str
    result: Result


@attrs.frozen
class ContainerInterface:
    """A container-side interface, as the results of its network describe it.

    ``name``, the ``network`` that made it, ``mac``, ``sandbox`` (the netns path),
    ``mtu`` (``None``), ``pci_id`` and ``socket_path`` (empty when not reported), its
    ``ips`` and their ``ip_configs`` (:class:`~libcni.types.IPConfig`: address, gateway).
    """

    name: str
    network: str
    mac: str = ""
    sandbox: str = ""
    ips: tuple[IPv4Interface | IPv6Interface, ...] = ()
    mtu: int | None = None
    pci_id: str = ""
    socket_path: str = ""
    ip_configs: tuple[IPConfig, ...] = ()


@attrs.frozen
class ContainerNetworks:
    """The networks of one container, merged over its attachments.

    ``attachments`` in setup order (loopback first); ``interfaces``: the container-side
    interfaces (in a sandbox) by name; ``host_interfaces``: the others the results report
    (a veth's host end, a bridge); ``ips``: every IP but loopback's, in attachment order;
    ``gateways``: their gateways, without repeats; ``routes``: every attachment's routes
    but loopback's; ``dns``: each non-empty DNS; ``netns``: the namespace given to
    ``setup`` or cached (``""``: unknown); ``incomplete``: ``(network, ifname)`` of each
    attachment only in progress (an ADD that failed or whose runtime died, which a
    teardown or GC DELs). :meth:`ip` is the first IP (of one version).
    """

    container_id: str
    attachments: tuple[AttachmentResult, ...] = ()
    interfaces: Mapping[str, ContainerInterface] = attrs.field(factory=dict)
    ips: tuple[IPv4Interface | IPv6Interface, ...] = ()
    dns: tuple[DNS, ...] = ()
    netns: str = ""
    host_interfaces: Mapping[str, Interface] = attrs.field(factory=dict, kw_only=True)
    gateways: tuple[IPv4Address | IPv6Address, ...] = attrs.field(default=(), kw_only=True)
    routes: tuple[Route, ...] = attrs.field(default=(), kw_only=True)
    incomplete: tuple[tuple[str, str], ...] = attrs.field(default=(), kw_only=True)

    def ip(self, version: int | None = None) -> IPv4Interface | IPv6Interface | None:
        """The first IP of ``ips`` (of IP version 4 or 6 when given), or ``None``."""
        for address in self.ips:
            if version is None or address.version == version:
                return address
        return None

    def to_dict(self) -> dict[str, Any]:
        """The view as a JSON object (results in their own version, as cached)."""
        return {
            "containerId": self.container_id,
            "netns": self.netns,
            "attachments": [
                {"network": a.network, "ifname": a.ifname, "result": a.result.to_dict()}
                for a in self.attachments
            ],
            "interfaces": {name: _interface_dict(i) for name, i in self.interfaces.items()},
            "hostInterfaces": {name: i.to_dict() for name, i in self.host_interfaces.items()},
            "ips": [str(ip) for ip in self.ips],
            "gateways": [str(gw) for gw in self.gateways],
            "routes": [r.to_dict() for r in self.routes],
            "dns": [d.to_dict() for d in self.dns],
            "incomplete": [{"network": n, "ifname": i} for n, i in self.incomplete],
        }

    @classmethod
    def merge(
        cls,
        container_id: str,
        attachments: Sequence[AttachmentResult],
        *,
        netns: str = "",
        incomplete: Sequence[tuple[str, str]] = (),
    ) -> ContainerNetworks:
        """The merged view of ``attachments``, each result read through its 1.x form.

        Container-side interfaces: those with a ``sandbox`` and the one named like the
        attachment. An IP belongs to the interface its ``interface`` index points to in its
        own result, else to the attachment's own (made up when the result lists none).
        """
        m = _Merging()
        for att in attachments:
            r = _as_1x(att.result)
            if r is not None:
                m.add(att, r)
        interfaces = {
            name: _container_interface(name, network, iface, tuple(m.owned[name]))
            for name, (network, iface) in m.made.items()
        }
        return cls(
            container_id,
            tuple(attachments),
            interfaces,
            tuple(m.ips),
            tuple(m.dns),
            netns=netns,
            incomplete=tuple(incomplete),
            host_interfaces=m.host,
            gateways=tuple(m.gateways),
            routes=tuple(m.routes),
        )


class _Merging:
    """A merged view being built, one attachment at a time."""

    __slots__ = ("dns", "gateways", "host", "ips", "made", "owned", "routes")

    def __init__(self) -> None:
        # name -> (network, the result's interface or None) and its IPs; built at the end.
        self.made: dict[str, tuple[str, Interface | None]] = {}
        self.owned: dict[str, list[IPConfig]] = {}
        self.host: dict[str, Interface] = {}
        self.ips: list[IP] = []
        self.gateways: dict[IPv4Address | IPv6Address, None] = {}
        self.routes: list[Route] = []
        self.dns: list[DNS] = []

    def add(self, att: AttachmentResult, r: Any) -> None:
        """The interfaces, IPs, routes and DNS of one attachment (``r``: its 1.x result)."""
        names, own = self._interfaces(att, r)
        counted = att.ifname != LOOPBACK_IFNAME
        for ipc in r.ips:
            idx = ipc.interface
            target: str | None
            if idx is not None and 0 <= idx < len(names):
                target = names[idx]
            else:
                if own is None:
                    own = att.ifname
                    self._make(own, att.network, None)
                target = own
            if target is not None and self.made[target][0] == att.network:
                self.owned[target].append(ipc)
            if counted:
                self.ips.append(ipc.address)
                if ipc.gateway is not None:
                    self.gateways[ipc.gateway] = None
        if counted:
            self.routes.extend(r.routes)
        if r.dns.nameservers or r.dns.domain or r.dns.search or r.dns.options:
            self.dns.append(r.dns)

    def _interfaces(self, att: AttachmentResult, r: Any) -> tuple[list[str | None], str | None]:
        """The container-side name of each interface of ``r`` (``None``: host-side); its own."""
        names: list[str | None] = []
        own: str | None = None
        for iface in r.interfaces:
            if iface.sandbox or iface.name == att.ifname:
                self._make(iface.name, att.network, iface)
                names.append(iface.name)
                if iface.name == att.ifname:
                    own = iface.name
            else:
                names.append(None)
                if iface.name and iface.name not in self.host:
                    self.host[iface.name] = iface
        return names, own

    def _make(self, name: str, network: str, iface: Interface | None) -> None:
        if name not in self.made:
            self.made[name] = (network, iface)
            self.owned[name] = []


def _container_interface(
    name: str, network: str, iface: Interface | None, configs: tuple[IPConfig, ...]
) -> ContainerInterface:
    ips = tuple(c.address for c in configs)
    if iface is None:  # made up: the result lists no interface of that name
        return ContainerInterface(name, network, ips=ips, ip_configs=configs)
    return ContainerInterface(
        name,
        network,
        iface.mac,
        iface.sandbox,
        ips,
        mtu=iface.mtu,
        pci_id=iface.pci_id,
        socket_path=iface.socket_path,
        ip_configs=configs,
    )


def _interface_dict(i: ContainerInterface) -> dict[str, Any]:
    out: dict[str, Any] = {
        "network": i.network,
        "mac": i.mac,
        "sandbox": i.sandbox,
        "ips": [str(ip) for ip in i.ips],
    }
    if i.mtu is not None:
        out["mtu"] = i.mtu
    if i.pci_id:
        out["pciID"] = i.pci_id
    if i.socket_path:
        out["socketPath"] = i.socket_path
    gateways = [str(c.gateway) for c in i.ip_configs if c.gateway is not None]
    if gateways:
        out["gateways"] = gateways
    return out


def _as_1x(result: Result) -> Any:
    if result.cni_version.startswith("1."):
        return result
    try:
        return result.as_version("1.0.0")
    except CNIError:
        return None
