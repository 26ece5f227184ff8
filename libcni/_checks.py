"""The checks of the capability arguments: each returns the value checked (in its canonical
form) or raises a :class:`~libcni.errors.ValidationError` naming the field and the value.

Private to the library (:mod:`libcni.capabilities` builds its typed values with them).
IP addresses, CIDRs and MACs are read as Go's ``net`` package reads them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ._codec import short
from .errors import CODE_INVALID_CONFIG, ValidationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _invalid(field: str, value: object, why: str) -> ValidationError:
    return ValidationError(f"{field}: {short(value)} {why}", code=CODE_INVALID_CONFIG)


def _int(field: str, value: object, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(field, value, f"is not {what} (an int from {low} to {high})")
    if not low <= value <= high:
        raise _invalid(field, value, f"is not {what} ({low} to {high})")
    return int(value)


def _port(field: str, value: object) -> int:
    return _int(field, value, 1, 65535, "a port number")


def _text(field: str, value: object) -> str:
    """A non-empty string without NUL."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise _invalid(field, value, "is not a non-empty string (without NUL)")
    return value


def _address(field: str, value: object) -> IPAddress:
    """An IPv4 or IPv6 address, in the forms Go's ``net.ParseIP`` accepts (no zone, as text or object)."""
    ip = value
    if isinstance(value, str) and "%" not in value and value.strip() == value:
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            ip = None
    if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) and not getattr(
        ip, "scope_id", None
    ):
        return ip
    raise _invalid(field, value, "is not an IP address (without a zone)")


_PREFIX = re.compile(r"0|[1-9][0-9]{0,2}")
_NETWORKS = (
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
)


def _cidr(field: str, value: object, *, network: bool) -> tuple[IPAddress, int]:
    """``ADDRESS/PREFIX`` (Go's ``net.ParseCIDR``); with ``network``, no host bits set."""
    if isinstance(value, _NETWORKS):
        value = str(value)  # a zone stays in the text, and is refused there
    if not isinstance(value, str) or value.count("/") != 1:
        raise _invalid(field, value, "is not in CIDR notation (ADDRESS/PREFIX)")
    text, prefix = value.split("/")
    try:
        address = _address(field, text)
    except ValidationError:
        raise _invalid(field, value, "is not in CIDR notation (ADDRESS/PREFIX)") from None
    if _PREFIX.fullmatch(prefix) is None or int(prefix) > address.max_prefixlen:
        raise _invalid(field, value, f"has an invalid prefix length (0 to {address.max_prefixlen})")
    length = int(prefix)
    if network:
        net = ipaddress.ip_network(f"{address}/{length}", strict=False)
        if net.network_address != address:
            raise _invalid(field, value, f"has host bits set (the network is {net})")
    return address, length


def _ip_or_cidr(field: str, value: object) -> str:
    """An address, or an address with its prefix length (host bits allowed)."""
    if (isinstance(value, str) and "/" in value) or isinstance(value, _NETWORKS):
        address, length = _cidr(field, value, network=False)
        return f"{address}/{length}"
    return str(_address(field, value))


_MAC_SEPARATED = re.compile(r"[0-9A-Fa-f]{2}(?:([:-])[0-9A-Fa-f]{2})(?:\1[0-9A-Fa-f]{2})*")
_MAC_DOTTED = re.compile(r"[0-9A-Fa-f]{4}(?:\.[0-9A-Fa-f]{4})*")


def _hardware(field: str, value: object, sizes: Sequence[int], what: str) -> str:
    """A hardware address in the forms Go's ``net.ParseMAC`` accepts, of one of ``sizes`` bytes.

    ``aa:bb:cc:dd:ee:ff``, ``aa-bb-cc-dd-ee-ff`` or ``aabb.ccdd.eeff``; stored
    in lower case with colons.
    """
    if isinstance(value, str):
        if _MAC_SEPARATED.fullmatch(value):
            octets = re.split("[:-]", value)
        elif _MAC_DOTTED.fullmatch(value):
            octets = [g[i : i + 2] for g in value.split(".") for i in (0, 2)]
        else:
            octets = []
        if len(octets) in sizes:
            return ":".join(o.lower() for o in octets)
    raise _invalid(field, value, f"is not {what}")


def _mac(field: str, value: object) -> str:
    """A MAC address an interface can take: unicast (a 6 or 8 byte one; an IPoIB one of 20 too)."""
    mac = _hardware(field, value, (6, 8, 20), "a MAC address")
    if len(mac) < 59 and (int(mac[:2], 16) & 1 or not mac.strip("0:")):
        raise _invalid(field, value, "is not a unicast MAC address (multicast or all zeros)")
    return mac


def _strings(field: str, value: object, check: Any) -> tuple[Any, ...]:
    """A sequence (not a string) whose items pass ``check(f"{field}[i]", item)``."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Sequence):
        raise _invalid(field, value, "is not a sequence (a list or a tuple)")
    return tuple(check(f"{field}[{i}]", item) for i, item in enumerate(value))


def _instances(field: str, value: object, cls: type) -> tuple[Any, ...]:
    def one(where: str, item: object) -> Any:
        if not isinstance(item, cls):
            raise _invalid(where, item, f"is not a {cls.__name__}")
        return item

    return _strings(field, value, one)


def _optional(field: str, value: object, cls: type) -> Any:
    if value is not None and not isinstance(value, cls):
        raise _invalid(field, value, f"is not a {cls.__name__} (or None)")
    return value
