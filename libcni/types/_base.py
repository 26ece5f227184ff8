"""What the three result families share: the :class:`Result` base, the
:class:`Route` of 0.3.0 and later, and the field parsers.

The parsers take the decoded JSON value and ``where``, the path of the field
(``"ips[1].address"``), so that a malformed field raises a
:class:`~libcni.errors.DecodeError` that names it.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any, TypeAlias, TypeVar

import attrs

from .._json import strict_loads
from ..errors import DecodeError, VersionError
from .dns import DNS

__all__ = ["IPAddress", "IPInterface", "Result", "Route"]

#: An address with its prefix length, host bits kept (``10.0.0.5/24``).
IPInterface: TypeAlias = IPv4Interface | IPv6Interface
#: A bare IP address (a gateway).
IPAddress: TypeAlias = IPv4Address | IPv6Address

_T = TypeVar("_T")


class Result(abc.ABC):
    """A plugin's result, of any specification version.

    The concrete classes are :class:`~libcni.types.v1.Result100` (1.0.0,
    1.1.0), :class:`~libcni.types.v04.Result040` (0.3.0, 0.3.1, 0.4.0) and
    :class:`~libcni.types.v02.Result020` (0.1.0, 0.2.0). Results are immutable.
    """

    __slots__ = ()

    #: The specification version of the result, e.g. ``"1.0.0"``.
    cni_version: str

    #: The versions whose results have this class's layout.
    VERSIONS: tuple[str, ...] = ()

    def as_version(self, version: str) -> Result:
        """The result converted to ``version``, as the Go library converts results.

        The empty string means 0.1.0. An unknown version, or a conversion that
        cannot be done (no IP address for a 0.1.0/0.2.0 result), raises
        :class:`~libcni.errors.VersionError`.
        """
        from .convert import convert

        return convert(self, version)

    @classmethod
    @abc.abstractmethod
    def from_dict(cls, obj: Mapping[str, Any] | None, cni_version: str = "") -> Result:
        """Parse a decoded JSON result with this class's layout, labelled
        ``cni_version`` (default: the object's ``cniVersion``)."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The JSON object the specification defines for this version.

        Unknown fields that were parsed are included. The returned containers
        are new, but the values of unknown fields are shared with the result:
        do not mutate them.
        """

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text (compact unless ``indent`` is given)."""
        if indent is None:
            return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


# --------------------------------------------------------------------------
# Field parsers


def _path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """A JSON object."""
    if type(value) is dict:
        return value
    if isinstance(value, Mapping):
        return value
    raise DecodeError(f"{where}: must be an object, not {_short(value)}")


def _str(value: Any, where: str, name: str) -> str:
    """A JSON string (``null`` is the empty string)."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    raise DecodeError(f"{_path(where, name)}: must be a string, not {_short(value)}")


def _int(value: Any, where: str, name: str, minimum: int | None = None) -> int | None:
    """A JSON integer, or ``None`` when absent or ``null``. Booleans and floats are refused."""
    if value is None:
        return None
    if type(value) is not int:
        raise DecodeError(f"{_path(where, name)}: must be an integer, not {_short(value)}")
    if minimum is not None and value < minimum:
        raise DecodeError(f"{_path(where, name)}: must be at least {minimum}, not {value}")
    return value


@lru_cache(maxsize=1024)
def _parse_cidr(text: str) -> IPv4Interface | IPv6Interface | None:
    addr, sep, prefix = text.partition("/")
    if not sep or not (prefix.isascii() and prefix.isdigit()) or len(prefix) > 3:
        return None
    try:
        if ":" in addr:
            return IPv6Interface(text)
        return IPv4Interface(text)
    except ValueError:
        return None


@lru_cache(maxsize=1024)
def _parse_ip(text: str) -> IPv4Address | IPv6Address | None:
    try:
        if ":" in text:
            return IPv6Address(text)
        return IPv4Address(text)
    except ValueError:
        return None


def _cidr(value: Any, where: str, name: str) -> IPv4Interface | IPv6Interface:
    """An address in CIDR form (``10.0.0.5/24``), host bits kept. Required."""
    if type(value) is not str:
        if value is None:
            raise DecodeError(f"{_path(where, name)}: missing (an address in CIDR form)")
        raise DecodeError(
            f"{_path(where, name)}: must be a string in CIDR form, not {_short(value)}"
        )
    parsed = _parse_cidr(value)
    if parsed is None:
        raise DecodeError(f"{_path(where, name)}: invalid CIDR {_short(value)}")
    return parsed


def _ip(value: Any, where: str, name: str) -> IPv4Address | IPv6Address | None:
    """An optional IP address; absent, ``null`` and ``""`` are ``None``."""
    if type(value) is not str:
        if value is None:
            return None
        raise DecodeError(
            f"{_path(where, name)}: must be a string (an IP address), not {_short(value)}"
        )
    if value == "":
        return None
    parsed = _parse_ip(value)
    if parsed is None:
        raise DecodeError(f"{_path(where, name)}: invalid IP address {_short(value)}")
    return parsed


def loads(data: bytes | bytearray | str) -> Any:
    """``json.loads`` that refuses NaN/Infinity (and numbers that overflow to
    them) and turns every failure into :class:`~libcni.errors.DecodeError`."""
    try:
        return strict_loads(data)
    except (ValueError, RecursionError, TypeError) as e:
        # UnicodeDecodeError and json.JSONDecodeError are ValueErrors.
        raise DecodeError(f"result is not valid JSON: {e}", _excerpt(data)) from None


def _excerpt(data: Any, limit: int = 200) -> str:
    if isinstance(data, (bytes, bytearray)):
        text = bytes(data[: limit + 1]).decode("utf-8", "replace")
    else:
        text = str(data)[: limit + 1]
    return text if len(text) <= limit else text[:limit] + "..."


def _check_json(extra: Mapping[str, Any], where: str) -> None:
    """Refuse an unknown field whose value has no JSON form (NaN, a set, a
    cycle...), so that :meth:`Result.to_json` cannot fail on what a parser accepted."""
    for key, value in extra.items():
        try:
            json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as e:
            raise DecodeError(
                f"{_path(where, key)}: value has no JSON form ({e}): {_short(value)}"
            ) from None


def _extra(obj: Mapping[str, Any], known: frozenset[str], where: str) -> dict[str, Any]:
    """The members of ``obj`` whose keys are not in ``known`` (checked to be JSON)."""
    extra = {k: v for k, v in obj.items() if k not in known}
    if extra:
        _check_json(extra, where)
    return extra


def _split_extra(
    extra: Mapping[str, Any], known: frozenset[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the unknown fields of a source object for a target type whose known
    fields are ``known``: (still unknown, now known)."""
    if not extra:
        return {}, {}
    keep: dict[str, Any] = {}
    taken: dict[str, Any] = {}
    for key, value in extra.items():
        (taken if key in known else keep)[key] = value
    return keep, taken


def _absorb(obj: _T, taken: Mapping[str, Any], parse: Any) -> _T:
    """``obj`` with the fields ``taken`` (unknown in the source version, known
    in the target) interpreted, when ``obj`` does not set them itself and they
    are valid; otherwise ``obj`` unchanged."""
    if not taken:
        return obj
    data = obj.to_dict()  # type: ignore[attr-defined]
    new = {k: v for k, v in taken.items() if k not in data}
    if not new:
        return obj
    data.update(new)
    try:
        parsed: _T = parse(data)
    except DecodeError:
        return obj
    return parsed


_P = TypeVar("_P")


def _items(value: Any, name: str, parse: Callable[[Any, str], _P]) -> tuple[_P, ...]:
    """Parse the JSON array ``value`` (``null``: empty) of the top-level field
    ``name`` with ``parse(item, path)``."""
    if value is None:
        return ()
    if type(value) is not list and not isinstance(value, tuple):
        raise DecodeError(f"{name}: must be a list, not {_short(value)}")
    return tuple([parse(item, f"{name}[{i}]") for i, item in enumerate(value)])


_EMPTY_DNS = DNS()


def _dns(value: Any, where: str = "dns") -> DNS:
    """Parse a result's ``dns`` (absent and ``null`` are empty), unknown members kept."""
    if value is None:
        return _EMPTY_DNS
    if not isinstance(value, Mapping):
        raise DecodeError(f"{where}: must be an object, not {_short(value)}")
    if not value:
        return _EMPTY_DNS
    dns = DNS.from_dict(value, DecodeError, keep_unknown=True)
    if dns.extra:
        _check_json(dns.extra, where)
    return dns


def _check_version(instance: Any, attribute: Any, value: str) -> None:
    """attrs validator: the result class holds ``value``'s layout."""
    versions = type(instance).VERSIONS
    if value not in versions:
        raise VersionError(
            f"{type(instance).__name__} holds versions {', '.join(versions)}, not {value!r}"
        )


# --------------------------------------------------------------------------
# Route (0.3.0 and later)


@attrs.frozen
class Route:
    """A route of a 0.3.0-or-later result.

    ``dst`` is the destination in CIDR form (host bits kept, as written; its
    ``.network`` is the network), ``gw`` the next hop or ``None``; ``mtu``,
    ``advmss``, ``priority``, ``table`` and ``scope`` are ``None`` when absent.
    ``extra`` holds the fields this library does not know, kept as given.
    """

    dst: IPv4Interface | IPv6Interface
    gw: IPv4Address | IPv6Address | None = None
    mtu: int | None = None
    advmss: int | None = None
    priority: int | None = None
    table: int | None = None
    scope: int | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, hash=False, kw_only=True)

    KNOWN = frozenset({"dst", "gw", "mtu", "advmss", "priority", "table", "scope"})

    @classmethod
    def from_dict(cls, obj: Any, where: str = "route") -> Route:
        """Parse a JSON route object; a malformed field raises :class:`~libcni.errors.DecodeError` naming it."""
        obj = _object(obj, where)
        get = obj.get
        return cls(
            dst=_cidr(get("dst"), where, "dst"),
            gw=_ip(get("gw"), where, "gw"),
            mtu=_int(get("mtu"), where, "mtu"),
            advmss=_int(get("advmss"), where, "advmss"),
            priority=_int(get("priority"), where, "priority"),
            table=_int(get("table"), where, "table"),
            scope=_int(get("scope"), where, "scope"),
            extra=_extra(obj, cls.KNOWN, where),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON route object; absent fields omitted."""
        out: dict[str, Any] = {"dst": str(self.dst)}
        if self.gw is not None:
            out["gw"] = str(self.gw)
        if self.mtu is not None:
            out["mtu"] = self.mtu
        if self.advmss is not None:
            out["advmss"] = self.advmss
        if self.priority is not None:
            out["priority"] = self.priority
        if self.table is not None:
            out["table"] = self.table
        if self.scope is not None:
            out["scope"] = self.scope
        for key, value in self.extra.items():
            if key not in out and key not in self.KNOWN:
                out[key] = value
        return out
