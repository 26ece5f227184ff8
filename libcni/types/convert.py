"""Conversion of results between specification versions (the Go library's rules).

- within a family: relabel;
- 0.1.0/0.2.0 to 0.3.x/0.4.0: ``ip4`` then ``ip6`` become IPs with version
  4/6, their routes are concatenated, no interfaces;
- 0.x to 1.x: via 0.4.0, dropping the IP ``version``;
- 1.x to 0.3.x/0.4.0: IP version from the address family; interfaces lose
  ``mtu``, ``socketPath`` and ``pciID``;
- to 0.1.0/0.2.0: the first IPv4 becomes ``ip4``, the first IPv6 ``ip6``; each
  route goes to the block of its destination's family, keeping ``dst``, ``gw``
  (and unknown fields); interfaces are dropped; no IP at all is a
  :class:`~libcni.errors.VersionError`.

Unknown fields are carried along wherever the target keeps the object that
held them. An unknown field of the source that the target version knows
(say ``mtu`` in a 0.4.0 interface, converted to 1.0.0) is interpreted by the
target when it is valid there, and dropped otherwise.
"""

from __future__ import annotations

import attrs

from ..errors import VersionError
from ..version import or_default
from . import family_of
from ._base import Result, Route, _absorb, _split_extra
from .v02 import IPConfig020, Result020, Route020
from .v04 import Interface040, IPConfig040, Result040
from .v1 import Interface100, IPConfig100, Result100

__all__ = ["convert", "family_of"]

#: What the other families convert through.
_040 = Result040.VERSIONS[-1]

_FAMILY: dict[str, type[Result]] = {
    version: cls for cls in (Result020, Result040, Result100) for version in cls.VERSIONS
}


def convert(result: Result, version: str) -> Result:
    """``result`` converted to ``version`` (see the module documentation)."""
    target = or_default(version) if isinstance(version, str) else version
    if result.cni_version == target:
        return result
    cls = _FAMILY.get(target) if isinstance(target, str) else None
    if cls is None:
        raise VersionError(
            f"cannot convert result from {result.cni_version} to unknown version {version!r}"
        )
    if type(result) is cls:
        return attrs.evolve(result, cni_version=target)  # type: ignore[misc]
    if isinstance(result, Result020):
        r040 = _legacy_to_040(result, target if cls is Result040 else _040)
        return r040 if cls is Result040 else _040_to_100(r040, target)
    if isinstance(result, Result040):
        if cls is Result100:
            return _040_to_100(result, target)
        return _040_to_legacy(result, target)
    if isinstance(result, Result100):
        r040 = _100_to_040(result, target if cls is Result040 else _040)
        return r040 if cls is Result040 else _040_to_legacy(r040, target)
    raise VersionError(f"cannot convert a {type(result).__name__} to {target}")


def _legacy_to_040(result: Result020, version: str) -> Result040:
    ips: list[IPConfig040] = []
    routes: list[Route] = []
    for block in (result.ip4, result.ip6):
        if block is None:
            continue
        keep, taken = _split_extra(block.extra, IPConfig040.KNOWN)
        ip = IPConfig040(address=block.ip, gateway=block.gateway, extra=keep)
        ips.append(_absorb(ip, taken, IPConfig040.from_dict))
        for old in block.routes:
            keep, taken = _split_extra(old.extra, Route.KNOWN)
            route = Route(dst=old.dst, gw=old.gw, extra=keep)
            routes.append(_absorb(route, taken, Route.from_dict))
    keep, taken = _split_extra(result.extra, Result040.KNOWN)
    out = Result040(version, (), tuple(ips), tuple(routes), result.dns, extra=keep)
    return _absorb(out, taken, Result040.from_dict)


def _040_to_100(result: Result040, version: str) -> Result100:
    interfaces = []
    for old in result.interfaces:
        keep, taken = _split_extra(old.extra, Interface100.KNOWN)
        intf = Interface100(name=old.name, mac=old.mac, sandbox=old.sandbox, extra=keep)
        interfaces.append(_absorb(intf, taken, Interface100.from_dict))
    # The unknown fields of a 0.4.0 IP cannot be known in 1.x: shared as they are.
    ips = (IPConfig100(ip.address, ip.gateway, ip.interface, extra=ip.extra) for ip in result.ips)
    parts = (tuple(interfaces), tuple(ips), result.routes, result.dns)
    return Result100(version, *parts, extra=result.extra)


def _100_to_040(result: Result100, version: str) -> Result040:
    # 0.4.0 knows fewer interface fields than 1.x: no unknown field becomes known.
    interfaces = (Interface040(i.name, i.mac, i.sandbox, extra=i.extra) for i in result.interfaces)
    ips = []
    for ip in result.ips:
        # A stray "version" of a 1.x IP gives way to the address family.
        extra = _split_extra(ip.extra, IPConfig040.KNOWN)[0] if ip.extra else ip.extra
        ips.append(IPConfig040(ip.address, gateway=ip.gateway, interface=ip.interface, extra=extra))
    parts = (tuple(interfaces), tuple(ips), result.routes, result.dns)
    return Result040(version, *parts, extra=result.extra)


def _040_to_legacy(result: Result040, version: str) -> Result020:
    # The first address of each family, and the routes of the families that have one.
    first = {v: next((ip for ip in result.ips if ip.address.version == v), None) for v in (4, 6)}
    if first[4] is None and first[6] is None:
        raise VersionError(f"cannot convert result to {version}: no valid IP addresses")
    routes: dict[int, list[Route020]] = {4: [], 6: []}
    for route in result.routes:
        if first[route.dst.version] is not None:
            # Route020 knows fewer fields than Route: unknown fields stay unknown.
            routes[route.dst.version].append(Route020(route.dst, route.gw, extra=route.extra))
    keep, taken = _split_extra(result.extra, Result020.KNOWN)
    ip4, ip6 = _block(first[4], routes[4]), _block(first[6], routes[6])
    out = Result020(cni_version=version, ip4=ip4, ip6=ip6, dns=result.dns, extra=keep)
    return _absorb(out, taken, Result020.from_dict)


def _block(ip: IPConfig040 | None, routes: list[Route020]) -> IPConfig020 | None:
    if ip is None:
        return None
    keep, taken = _split_extra(ip.extra, IPConfig020.KNOWN)
    block = IPConfig020(ip=ip.address, gateway=ip.gateway, routes=tuple(routes), extra=keep)
    return _absorb(block, taken, IPConfig020.from_dict)
