"""Results of specification 1.0.0 and 1.1.0 (the two share one layout).

>>> r = Result100.from_dict({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24"}]})
>>> r.ips[0].address
IPv4Interface('10.0.0.5/24')
>>> r.to_dict()
{'cniVersion': '1.0.0', 'ips': [{'address': '10.0.0.5/24'}]}
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs

from .._codec import field
from ..version import FAMILY_1
from ._base import Result, Route, _check_version, _declared, _non_negative, _Value
from .dns import DNS

__all__ = ["VERSIONS", "IPConfig100", "Interface100", "Result100"]

#: The versions with this layout.
VERSIONS: tuple[str, ...] = FAMILY_1


@_declared("interface")
@attrs.frozen
class Interface100(_Value):
    """An interface of a 1.x result.

    ``name``, ``mac``, ``sandbox`` (netns path or VM id; empty for a host
    interface), ``socket_path`` (JSON ``socketPath``), ``pci_id`` (JSON
    ``pciID``) are strings, empty when absent; ``mtu`` is ``None`` when absent.
    ``extra`` holds unknown fields, kept as given.
    """

    name: str = field(default="", always=True)
    mac: str = ""
    mtu: int | None = None
    sandbox: str = ""
    socket_path: str = field(default="", key="socketPath")
    pci_id: str = field(default="", key="pciID")
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)


@_declared("ip")
@attrs.frozen
class IPConfig100(_Value):
    """An IP address of a 1.x result.

    ``address`` keeps the host bits (``IPv4Interface('10.0.0.5/24')``; its
    ``.ip`` is the address, ``.network`` the subnet); ``gateway`` is an
    address or ``None``; ``interface`` is the index into the result's
    ``interfaces`` or ``None`` (``0`` is a valid index and is written).
    ``extra`` holds unknown fields, kept as given.
    """

    address: IPv4Interface | IPv6Interface
    gateway: IPv4Address | IPv6Address | None = None
    interface: int | None = field(default=None, check=_non_negative)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)


@_declared("result")
@attrs.frozen
class Result100(Result):
    """A result of specification 1.0.0 or 1.1.0.

    ``interfaces``, ``ips`` and ``routes`` are tuples of :class:`Interface100`,
    :class:`IPConfig100` and :class:`~libcni.types.Route`; ``dns`` is a
    :class:`~libcni.types.DNS`. ``extra`` holds unknown top-level fields.
    """

    cni_version: str = field(
        default=VERSIONS[-1], validator=_check_version, key="cniVersion", always=True
    )
    interfaces: tuple[Interface100, ...] = ()
    ips: tuple[IPConfig100, ...] = ()
    routes: tuple[Route, ...] = ()
    dns: DNS = attrs.field(factory=DNS)
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    VERSIONS = VERSIONS

    def _decoded(self) -> Result100:
        """No rule across fields in this family."""
        return self
