"""Typed, validated capability arguments: what runtimes pass as ``runtimeConfig``.

:class:`RuntimeConfig` holds the capability arguments CNI's conventions name as
immutable, checked values. A bad value raises
:class:`~libcni.errors.ValidationError` (code 7) naming the field and the value:

>>> PortMapping(8080, 0)
Traceback (most recent call last):
    ...
libcni.errors.ValidationError: PortMapping.container_port: 0 is not a port number (1 to 65535)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from ._checks import (
    IPAddress,
    _address,
    _cidr,
    _hardware,
    _instances,
    _int,
    _invalid,
    _ip_or_cidr,
    _mac,
    _optional,
    _port,
    _strings,
    _text,
)
from .errors import ValidationError

__all__ = ["POD_ANNOTATIONS", "Bandwidth", "DNSConfig", "IPRange", "PortMapping", "RuntimeConfig"]
__all__ += ["check_plain", "k8s_args"]

#: The capability name of the pod annotations (CRI's convention).
POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"

_PROTOCOLS = ("tcp", "udp", "sctp")
_UINT64_MAX = 2**64 - 1
#: Bandwidth's members by name, with their JSON keys (DNSConfig's are the same).
_BANDWIDTH = {
    "ingress_rate": "ingressRate",
    "ingress_burst": "ingressBurst",
    "egress_rate": "egressRate",
    "egress_burst": "egressBurst",
}


@attrs.frozen(init=False)
class PortMapping:
    """A host port forwarded to a container port (capability ``portMappings``).

    Ports are 1 to 65535; ``protocol`` is ``tcp``, ``udp`` or ``sctp`` (any
    case, stored in lower case); ``host_ip`` is ``""`` (every address) or an
    IP address.

    >>> PortMapping(8080, 80, "UDP", "127.0.0.1").to_dict()
    {'hostPort': 8080, 'containerPort': 80, 'protocol': 'udp', 'hostIP': '127.0.0.1'}
    """

    host_port: int
    container_port: int
    protocol: str
    host_ip: str

    def __init__(
        self, host_port: int, container_port: int, protocol: str = "tcp", host_ip: str = ""
    ) -> None:
        if not isinstance(protocol, str) or protocol.lower() not in _PROTOCOLS:
            raise _invalid("PortMapping.protocol", protocol, "is not tcp, udp or sctp")
        self.__attrs_init__(
            host_port=_port("PortMapping.host_port", host_port),
            container_port=_port("PortMapping.container_port", container_port),
            protocol=protocol.lower(),
            host_ip=str(_address("PortMapping.host_ip", host_ip)) if host_ip != "" else "",
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the convention (``hostIP`` only when set)."""
        out: dict[str, Any] = {"hostPort": self.host_port, "containerPort": self.container_port}
        out |= {"protocol": self.protocol, "hostIP": self.host_ip}
        return {key: value for key, value in out.items() if key != "hostIP" or value}


@attrs.frozen(init=False)
class Bandwidth:
    """A traffic limit (capability ``bandwidth``): rates in bits per second, bursts in bits.

    Non-negative integers; ``0`` means no limit in that direction. A rate
    needs its burst and a burst its rate (the ``bandwidth`` plugin refuses
    one without the other).

    >>> Bandwidth(ingress_rate=1_000_000, ingress_burst=100_000).to_dict()
    {'ingressRate': 1000000, 'ingressBurst': 100000, 'egressRate': 0, 'egressBurst': 0}
    """

    ingress_rate: int
    ingress_burst: int
    egress_rate: int
    egress_burst: int

    def __init__(
        self,
        ingress_rate: int = 0,
        ingress_burst: int = 0,
        egress_rate: int = 0,
        egress_burst: int = 0,
    ) -> None:
        values = zip(
            _BANDWIDTH, (ingress_rate, ingress_burst, egress_rate, egress_burst), strict=True
        )
        why = "a non-negative number"
        checked = {k: _int(f"Bandwidth.{k}", v, 0, _UINT64_MAX, why) for k, v in values}
        for rate, burst in (("ingress_rate", "ingress_burst"), ("egress_rate", "egress_burst")):
            if bool(checked[rate]) != bool(checked[burst]):
                given, missing = (rate, burst) if checked[rate] else (burst, rate)
                why = f"is set without Bandwidth.{missing} (set both, or neither)"
                raise _invalid(f"Bandwidth.{given}", checked[given], why)
        self.__attrs_init__(**checked)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the convention (all four keys, as go-cni writes them)."""
        return {key: getattr(self, name) for name, key in _BANDWIDTH.items()}


@attrs.frozen(init=False)
class IPRange:
    """An address range for IPAM (capability ``ipRanges``, as ``host-local`` takes it).

    ``subnet`` in CIDR notation without host bits (``10.1.0.0/16``);
    ``range_start``, ``range_end`` and ``gateway``, when given, addresses
    inside it, with ``range_start`` not after ``range_end``.

    >>> IPRange("10.1.0.0/16", range_start="10.1.1.1", range_end="10.1.1.99").to_dict()
    {'subnet': '10.1.0.0/16', 'rangeStart': '10.1.1.1', 'rangeEnd': '10.1.1.99'}
    """

    subnet: str
    range_start: str | None
    range_end: str | None
    gateway: str | None

    def __init__(
        self,
        subnet: str,
        range_start: str | None = None,
        range_end: str | None = None,
        gateway: str | None = None,
    ) -> None:
        address, length = _cidr("IPRange.subnet", subnet, network=True)
        net = ipaddress.ip_network(f"{address}/{length}")
        inside: dict[str, IPAddress | None] = {}
        given = {"range_start": range_start, "range_end": range_end, "gateway": gateway}
        for name, value in given.items():
            if value is None:
                inside[name] = None
                continue
            ip = _address(f"IPRange.{name}", value)
            if ip.version != net.version or ip not in net:
                raise _invalid(f"IPRange.{name}", value, f"is not inside the subnet {net}")
            inside[name] = ip
        start, end = inside["range_start"], inside["range_end"]
        if start is not None and end is not None and int(start) > int(end):
            raise _invalid("IPRange.range_start", range_start, f"is after range_end {end}")
        self.__attrs_init__(
            subnet=str(net), **{k: None if ip is None else str(ip) for k, ip in inside.items()}
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the convention (unset members left out)."""
        out = {"subnet": self.subnet, "rangeStart": self.range_start, "rangeEnd": self.range_end}
        out["gateway"] = self.gateway
        return {key: value for key, value in out.items() if value is not None}


def _domain(field: str, value: object) -> str:
    text = _text(field, value)
    if any(ch.isspace() for ch in text):
        raise _invalid(field, value, "contains white space")
    return text


@attrs.frozen(init=False)
class DNSConfig:
    """DNS settings for the container (capability ``dns``).

    ``servers`` are IP addresses; ``searches`` domains and ``options``
    resolver options (``ndots:2``), non-empty strings without white space.

    >>> DNSConfig(servers=["10.0.0.10"], searches=["svc.cluster.local"]).to_dict()
    {'servers': ['10.0.0.10'], 'searches': ['svc.cluster.local']}
    """

    servers: tuple[str, ...]
    searches: tuple[str, ...]
    options: tuple[str, ...]

    def __init__(
        self,
        servers: Sequence[str] = (),
        searches: Sequence[str] = (),
        options: Sequence[str] = (),
    ) -> None:
        self.__attrs_init__(
            servers=_strings("DNSConfig.servers", servers, lambda f, v: str(_address(f, v))),
            searches=_strings("DNSConfig.searches", searches, _domain),
            options=_strings("DNSConfig.options", options, _domain),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the convention (empty lists left out)."""
        out = {"servers": self.servers, "searches": self.searches, "options": self.options}
        return {key: list(value) for key, value in out.items() if value}


def _range_sets(value: object) -> tuple[tuple[IPRange, ...], ...]:
    def one(where: str, ranges: object) -> tuple[IPRange, ...]:
        if isinstance(ranges, IPRange):
            raise _invalid(
                where, ranges, "is an IPRange, not a range set: write ip_ranges=[[IPRange(...)]]"
            )
        checked = _instances(where, ranges, IPRange)
        if not checked:
            raise _invalid(where, ranges, "is an empty range set")
        return checked

    return _strings("RuntimeConfig.ip_ranges", value, one)


def _annotations(value: object) -> Mapping[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _invalid("RuntimeConfig.pod_annotations", value, "is not a mapping of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        _text("RuntimeConfig.pod_annotations key", key)
        if not isinstance(item, str):
            raise _invalid(f"RuntimeConfig.pod_annotations[{key!r}]", item, "is not a string")
        out[key] = item
    return MappingProxyType(out)  # read-only: what was checked is what is passed


def _optional_text(field: str, value: object) -> str | None:
    return None if value is None else _text(field, value)


def _json(value: Any) -> Any:
    """A member's JSON form: typed values as their objects, sequences as lists."""
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value.to_dict() if hasattr(value, "to_dict") else value


@attrs.frozen(init=False)
class RuntimeConfig:
    """The capability arguments of one attachment, typed and checked.

    Give it wherever capability arguments are taken (``RuntimeConf``,
    ``NetworkManager.setup``, ``NetworkRequest``); :meth:`capability_args` is
    the JSON object.

    ``ip_ranges`` is a sequence of range sets, each a sequence of
    :class:`IPRange` (``[[IPRange("10.1.0.0/16")]]``), as ``host-local``
    takes them; ``ips`` are static addresses, with or without a prefix
    length; ``mac`` a MAC address (6 bytes, or 8 or 20 for InfiniBand);
    ``infiniband_guid`` 8 bytes in the same notation; ``device_id`` (a PCI
    address such as ``0000:04:00.1``), ``aliases`` and ``cgroup_path``
    non-empty strings; ``pod_annotations`` a mapping of strings.
    """

    # Each member with its capability's key: capability_args() writes what is set.
    port_mappings: tuple[PortMapping, ...] = attrs.field(metadata={"key": "portMappings"})
    bandwidth: Bandwidth | None = attrs.field(metadata={"key": "bandwidth"})
    ip_ranges: tuple[tuple[IPRange, ...], ...] = attrs.field(metadata={"key": "ipRanges"})
    dns: DNSConfig | None = attrs.field(metadata={"key": "dns"})
    ips: tuple[str, ...] = attrs.field(metadata={"key": "ips"})
    mac: str | None = attrs.field(metadata={"key": "mac"})
    infiniband_guid: str | None = attrs.field(metadata={"key": "infinibandGUID"})
    device_id: str | None = attrs.field(metadata={"key": "deviceID"})
    aliases: tuple[str, ...] = attrs.field(metadata={"key": "aliases"})
    cgroup_path: str | None = attrs.field(metadata={"key": "cgroupPath"})
    pod_annotations: Mapping[str, str] | None = attrs.field(
        metadata={"key": POD_ANNOTATIONS}, hash=False
    )

    def __init__(  # noqa: PLR0913  (the public constructor: one keyword per capability, a public name)
        self,
        port_mappings: Sequence[PortMapping] = (),
        bandwidth: Bandwidth | None = None,
        ip_ranges: Sequence[Sequence[IPRange]] = (),
        dns: DNSConfig | None = None,
        ips: Sequence[str] = (),
        mac: str | None = None,
        infiniband_guid: str | None = None,
        device_id: str | None = None,
        aliases: Sequence[str] = (),
        cgroup_path: str | None = None,
        pod_annotations: Mapping[str, str] | None = None,
    ) -> None:
        if infiniband_guid is not None:
            why = "an InfiniBand GUID (8 bytes, e.g. c2:11:22:33:44:55:66:77)"
            infiniband_guid = _hardware("RuntimeConfig.infiniband_guid", infiniband_guid, (8,), why)
        self.__attrs_init__(
            port_mappings=_instances("RuntimeConfig.port_mappings", port_mappings, PortMapping),
            bandwidth=_optional("RuntimeConfig.bandwidth", bandwidth, Bandwidth),
            ip_ranges=_range_sets(ip_ranges),
            dns=_optional("RuntimeConfig.dns", dns, DNSConfig),
            ips=_strings("RuntimeConfig.ips", ips, _ip_or_cidr),
            mac=None if mac is None else _mac("RuntimeConfig.mac", mac),
            infiniband_guid=infiniband_guid,
            device_id=_optional_text("RuntimeConfig.device_id", device_id),
            aliases=_strings("RuntimeConfig.aliases", aliases, _text),
            cgroup_path=_optional_text("RuntimeConfig.cgroup_path", cgroup_path),
            pod_annotations=_annotations(pod_annotations),
        )

    def capability_args(self) -> dict[str, Any]:
        """The capability arguments as the plugins expect them; unset members left out.

        >>> RuntimeConfig(ips=["10.1.2.3/24"], mac="AA-BB-CC-DD-EE-FF").capability_args()
        {'ips': ['10.1.2.3/24'], 'mac': 'aa:bb:cc:dd:ee:ff'}
        """
        return {
            f.metadata["key"]: _json(value)
            for f in attrs.fields(RuntimeConfig)
            if (value := getattr(self, f.name)) is not None and value != ()
        }


def _objects(build: Callable[[Mapping[str, Any]], Any]) -> Callable[[str, object], Any]:
    """A check of a JSON object: ``build(obj)`` (a typed value), its errors naming where."""

    def check(where: str, value: object) -> Any:
        if not isinstance(value, Mapping):
            raise _invalid(where, value, "is not a JSON object")
        try:
            return build(value)
        except ValidationError as e:
            raise ValidationError(f"{where}: {e.msg}", code=e.code) from None

    return check


def _get(obj: Mapping[str, Any], key: str, default: Any) -> Any:
    """A member of a JSON object; ``null`` or missing is ``default`` (as Go decodes it)."""
    value = obj.get(key)
    return default if value is None else value


@_objects
def _plain_port_mapping(o: Mapping[str, Any]) -> PortMapping:
    protocol, host_ip = _get(o, "protocol", "tcp"), _get(o, "hostIP", "")
    return PortMapping(o.get("hostPort"), o.get("containerPort"), protocol, host_ip)  # type: ignore[arg-type]


@_objects
def _plain_ip_range(o: Mapping[str, Any]) -> IPRange:
    return IPRange(o.get("subnet"), o.get("rangeStart"), o.get("rangeEnd"), o.get("gateway"))  # type: ignore[arg-type]


def _plain_range_set(where: str, value: object) -> tuple[IPRange, ...]:
    ranges = _strings(where, value, _plain_ip_range)
    if not ranges:
        raise _invalid(where, value, "is an empty range set")
    return ranges


_DNS = ("servers", "searches", "options")
#: Each well-known capability with the check of its plain JSON form.
_PLAIN: dict[str, Callable[[str, Any], object]] = {
    "portMappings": lambda where, value: _strings(where, value, _plain_port_mapping),
    "bandwidth": _objects(lambda o: Bandwidth(**{k: _get(o, j, 0) for k, j in _BANDWIDTH.items()})),
    "ipRanges": lambda where, value: _strings(where, value, _plain_range_set),
    "dns": _objects(lambda o: DNSConfig(**{k: _get(o, k, ()) for k in _DNS})),
    "ips": lambda where, value: _strings(where, value, _ip_or_cidr),
    "mac": _mac,
}


def check_plain(capability_args: Mapping[str, Any]) -> None:
    """Check the well-known capabilities of a plain mapping by the rules of their typed forms.

    ``portMappings``, ``bandwidth``, ``ipRanges``, ``dns``, ``ips`` and
    ``mac``, when present (and not ``null``), must be what the typed forms
    accept, in their JSON form, else :class:`~libcni.errors.ValidationError`
    (code 7) names the capability, the member and the value. Other members and
    capabilities are left to the plugins.

    >>> check_plain({"portMappings": [{"hostPort": "80", "containerPort": 80}]})
    Traceback (most recent call last):
        ...
    libcni.errors.ValidationError: capability argument portMappings[0]: PortMapping.host_port: '80' is not a port number (an int from 1 to 65535)
    """
    for key, check in _PLAIN.items():
        value = capability_args.get(key)
        if value is not None:
            check(f"capability argument {key}", value)


def _cni_arg(field: str, value: object) -> str:
    text = _text(field, value)
    if ";" in text or "=" in text:
        raise _invalid(field, value, "contains ';' or '=', which CNI_ARGS cannot carry")
    return text


def k8s_args(
    namespace: str,
    name: str,
    infra_container_id: str,
    uid: str | None = None,
    *,
    ignore_unknown: bool = True,
) -> tuple[tuple[str, str], ...]:
    """The ``CNI_ARGS`` pairs Kubernetes runtimes pass for a pod, in their usual order.

    ``IgnoreUnknown=1`` first, then ``K8S_POD_NAMESPACE``, ``K8S_POD_NAME``,
    ``K8S_POD_INFRA_CONTAINER_ID`` and, when given, ``K8S_POD_UID``. A value
    that is empty or holds ``;`` or ``=`` raises :class:`~libcni.errors.ValidationError`.

    >>> k8s_args("default", "web-0", "abc123")
    (('IgnoreUnknown', '1'), ('K8S_POD_NAMESPACE', 'default'), ('K8S_POD_NAME', 'web-0'), ('K8S_POD_INFRA_CONTAINER_ID', 'abc123'))
    """
    pairs: list[tuple[str, str]] = [("IgnoreUnknown", "1")] if ignore_unknown else []
    pairs += [
        ("K8S_POD_NAMESPACE", _cni_arg("k8s_args namespace", namespace)),
        ("K8S_POD_NAME", _cni_arg("k8s_args name", name)),
        ("K8S_POD_INFRA_CONTAINER_ID", _cni_arg("k8s_args infra_container_id", infra_container_id)),
    ]
    if uid is not None:
        pairs.append(("K8S_POD_UID", _cni_arg("k8s_args uid", uid)))
    return tuple(pairs)
