"""Results of specification 0.3.0, 0.3.1 and 0.4.0 (one layout).

As 1.x, but each IP carries ``version`` ("4" or "6") and interfaces have
only ``name``, ``mac`` and ``sandbox``; ``dns`` is always written.

>>> r = Result040.from_dict({"cniVersion": "0.4.0", "ips": [{"address": "fd00::5/64"}]})
>>> r.ips[0].version
'6'
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

from .._codec import Invalid, field, short
from ..version import FAMILY_04
from ._base import Result, Route, _check_version, _declared, _non_negative, _Value
from .dns import DNS

__all__ = ["VERSIONS", "IPConfig040", "Interface040", "Result040"]

#: The versions with this layout.
VERSIONS: tuple[str, ...] = FAMILY_04


@_declared("interface")
@attrs.frozen
class Interface040(_Value):
    """An interface of a 0.3.x/0.4.0 result: ``name``, ``mac``, ``sandbox``
    (empty when absent). ``extra`` holds unknown fields, kept as given."""

    name: str = field(default="", always=True)
    mac: str = ""
    sandbox: str = ""
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)


def _family(instance: IPConfig040) -> str:
    return "4" if instance.address.version == 4 else "6"


def _version_matches(version: str, address: IPv4Interface | IPv6Interface) -> bool:
    if address.version == 4:
        return version == "4"
    # An IPv4-mapped IPv6 address is what the Go library calls IPv4.
    return version == "6" or (version == "4" and address.ip.ipv4_mapped is not None)


@_declared("ip")
@attrs.frozen
class IPConfig040(_Value):
    """An IP address of a 0.3.x/0.4.0 result.

    As :class:`~libcni.types.v1.IPConfig100` plus ``version``, ``"4"`` or
    ``"6"`` (by default the family of ``address``). When parsing, a missing
    ``version`` is taken from the address; one that contradicts it is an error.
    """

    address: IPv4Interface | IPv6Interface
    version: str = field(default=attrs.Factory(_family, takes_self=True), always=True)
    gateway: IPv4Address | IPv6Address | None = None
    interface: int | None = field(default=None, check=_non_negative)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    _json_order = ("version", "address", "gateway", "interface")

    def _decoded(self) -> IPConfig040:
        """A missing ``version`` is the address family; one that contradicts it is an error."""
        version = self.version
        if version == "":
            return attrs.evolve(self, version=_family(self))
        if not _version_matches(version, self.address):
            raise Invalid(
                f"{short(version)} does not match address {str(self.address)!r}"
                if version in ("4", "6")
                else f'must be "4" or "6", not {short(version)}',
                "version",
            )
        return self


@_declared("result")
@attrs.frozen
class Result040(Result):
    """A result of specification 0.3.0, 0.3.1 or 0.4.0.

    ``interfaces``, ``ips`` and ``routes`` are tuples of :class:`Interface040`,
    :class:`IPConfig040` and :class:`~libcni.types.Route`; ``dns`` is a
    :class:`~libcni.types.DNS`. ``extra`` holds unknown top-level fields.
    """

    cni_version: str = field(
        default=VERSIONS[-1], validator=_check_version, key="cniVersion", always=True
    )
    interfaces: tuple[Interface040, ...] = ()
    ips: tuple[IPConfig040, ...] = ()
    routes: tuple[Route, ...] = ()
    dns: DNS = field(factory=DNS, always=True)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    VERSIONS = VERSIONS

    def _decoded(self) -> Result040:
        """No rule across fields in this family."""
        return self
