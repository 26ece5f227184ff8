"""What the three result families share: the :class:`Result` base, the
:class:`Route` of 0.3.0 and later, and the one way they are read and written
(the declarations read by the converter of :mod:`libcni._codec`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any, ClassVar, TypeAlias, TypeVar

import attrs

from .._codec import Invalid, known_keys, short, structure, unstructure
from .._json import strict_loads
from ..errors import DecodeError, VersionError
from ..version import or_default

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

    #: The JSON names this class knows (the others are kept in ``extra``).
    KNOWN: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | None, cni_version: str = "") -> Result:
        """Parse a decoded JSON result with this layout, labelled ``cni_version`` (default:
        its ``cniVersion``). Malformed fields raise :class:`~libcni.errors.DecodeError`."""
        if obj is None:
            obj = {}
        elif not isinstance(obj, Mapping):
            raise DecodeError(f"result: must be an object, not {short(obj)}")
        if cni_version:
            if obj.get("cniVersion") != cni_version:
                obj = {**obj, "cniVersion": cni_version}
        else:
            given = obj.get("cniVersion")
            if given is None or given == "":
                obj = {**obj, "cniVersion": or_default("")}
        return decode(obj, cls)

    @abc.abstractmethod
    def _decoded(self) -> Result:
        """The family's rules across fields (raise ``Invalid``); returns the result to use."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the specification defines for this version.

        Unknown fields are included, their values shared with the result: do not mutate them.
        """
        return unstructure(self)

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text (compact unless ``indent`` is given)."""
        import json

        if indent is None:
            return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


class _Value:
    """The JSON form of a result's part, as declared (:mod:`libcni._codec`)."""

    __slots__ = ()

    #: The JSON names this class knows (the others are kept in ``extra``).
    KNOWN: ClassVar[frozenset[str]] = frozenset()
    #: What the object is called in messages, when parsed on its own.
    _WHERE: ClassVar[str] = ""

    @classmethod
    def from_dict(cls: type[_T], obj: Any, where: str = "") -> _T:
        """Parse a decoded JSON object; a malformed field raises a ``DecodeError`` naming it."""
        return decode(obj, cls, where or cls._WHERE)  # type: ignore[attr-defined]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: empty fields omitted, unknown fields (``extra``) written back."""
        return unstructure(self)


def decode(obj: Any, cls: type[_T], where: str = "") -> _T:
    """``obj`` read as ``cls``; :class:`Invalid` becomes :class:`~libcni.errors.DecodeError`."""
    try:
        return structure(obj, cls, where)
    except Invalid as e:
        raise DecodeError(f"{e.path or where or 'result'}: {e.reason}") from None


def _declared(where: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: ``KNOWN`` from the declared fields; ``where`` names the object."""

    def declare(cls: type[_T]) -> type[_T]:
        cls.KNOWN = known_keys(cls)  # type: ignore[attr-defined,arg-type]
        cls._WHERE = where  # type: ignore[attr-defined]
        return cls

    return declare


def loads(data: bytes | bytearray | str) -> Any:
    """Strict ``json.loads`` (no NaN/Infinity); every failure a :class:`~libcni.errors.DecodeError`."""
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


def _split_extra(
    extra: Mapping[str, Any], known: frozenset[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The unknown fields of a source split for a target that knows ``known``: (still
    unknown, now known)."""
    keep = {k: v for k, v in extra.items() if k not in known}
    return keep, {k: v for k, v in extra.items() if k in known}


def _absorb(obj: _T, taken: Mapping[str, Any], parse: Any) -> _T:
    """``obj`` with the fields ``taken`` interpreted, when it does not set them and they are
    valid; otherwise ``obj`` unchanged."""
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


def _non_negative(value: int | None) -> int | None:
    """An index: at least 0."""
    if value is not None and value < 0:
        raise Invalid(f"must be at least 0, not {value}")
    return value


def _check_version(instance: Any, attribute: Any, value: str) -> None:
    """attrs validator: the result class holds ``value``'s layout."""
    versions = type(instance).VERSIONS
    if value not in versions:
        raise VersionError(
            f"{type(instance).__name__} holds versions {', '.join(versions)}, not {value!r}"
        )


@_declared("route")
@attrs.frozen
class Route(_Value):
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
