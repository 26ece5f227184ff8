"""CNI specification versions: parsing, comparison, and plugin version info.

>>> parse_version("1")
(1, 0, 0)
>>> greater_than("0.10.0", "0.4.0")
True
"""

from __future__ import annotations

from typing import Any

import attrs

from ._codec import Invalid, field, structure
from ._json import strict_loads
from .errors import VersionError

__all__ = ["ALL", "CURRENT", "LEGACY", "PluginInfo", "greater_than", "greater_than_or_equal_to"]
__all__ += ["parse_version", "plugin_info_from_bytes"]

#: The versions whose results use ``ip4``/``ip6`` (one layout each family).
FAMILY_02: tuple[str, ...] = ("0.1.0", "0.2.0")
#: The versions whose results have ``ips`` with a ``version``.
FAMILY_04: tuple[str, ...] = ("0.3.0", "0.3.1", "0.4.0")
#: The 1.x versions.
FAMILY_1: tuple[str, ...] = ("1.0.0", "1.1.0")
#: Every specification version this library knows, oldest first.
ALL: tuple[str, ...] = FAMILY_02 + FAMILY_04 + FAMILY_1
#: The newest specification version; what the library speaks by default.
CURRENT: str = FAMILY_1[-1]
#: The versions whose results use ``ip4``/``ip6``.
LEGACY: tuple[str, ...] = FAMILY_02


#: The stdin of a VERSION probe: the request in the newest version (as Go's).
VERSION_REQUEST: bytes = b'{"cniVersion":"%s"}' % CURRENT.encode()


def or_default(version: str) -> str:
    """The version ``version`` stands for: an empty version means 0.1.0."""
    return version or "0.1.0"


_parsed_cache: dict[str, tuple[int, int, int]] = {}


def parse_version(version: str) -> tuple[int, int, int]:
    """Parse a CNI version string into ``(major, minor, micro)``.

    Up to three dot-separated non-negative integers; missing parts are 0 and
    the empty string means ``0.1.0``. Anything else raises :class:`~libcni.errors.VersionError`.

    >>> parse_version("")
    (0, 1, 0)
    >>> parse_version("0.4")
    (0, 4, 0)
    """
    cached = _parsed_cache.get(version) if isinstance(version, str) else None
    if cached is not None:
        return cached
    if not isinstance(version, str):
        raise VersionError("invalid version: not a string", repr(version))
    if version == "":
        return parse_version(or_default(version))
    parts = version.split(".")
    if len(parts) > 3:
        raise VersionError(f'invalid version "{version}": too many parts', version)
    numbers: list[int] = []
    for part in parts:
        if not (part.isascii() and part.isdigit()):
            raise VersionError(f'invalid version "{version}": "{part}" is not a number', version)
        numbers.append(int(part))
    numbers.extend([0] * (3 - len(numbers)))
    parsed = (numbers[0], numbers[1], numbers[2])
    if len(_parsed_cache) < 1024:
        _parsed_cache[version] = parsed
    return parsed


def greater_than(version: str, other: str) -> bool:
    """``version > other``, compared numerically. Raises :class:`~libcni.errors.VersionError` if either is invalid."""
    return parse_version(version) > parse_version(other)


def greater_than_or_equal_to(version: str, other: str) -> bool:
    """``version >= other``, compared numerically. Raises :class:`~libcni.errors.VersionError` if either is invalid."""
    return parse_version(version) >= parse_version(other)


@attrs.frozen
class PluginInfo:
    """What a plugin answered to ``VERSION``.

    ``cni_version`` is the version the plugin replied in and
    ``supported_versions`` every version it supports.
    """

    cni_version: str = field(key="cniVersion")
    supported_versions: list[str] = field(factory=list, key="supportedVersions")

    def supports(self, version: str) -> bool:
        """Whether the plugin supports ``version`` (the empty string means 0.1.0)."""
        return or_default(version) in self.supported_versions


#: What a plugin that predates the VERSION command supports.
LEGACY_PLUGIN_INFO = PluginInfo(or_default(""), [or_default("")])


def plugin_info_from_bytes(data: bytes | str) -> PluginInfo:
    """Decode a plugin's reply to ``VERSION``.

    A reply with ``cniVersion`` "0.2.0" and no ``supportedVersions`` means
    ``["0.1.0", "0.2.0"]`` (the legacy rule). Anything malformed raises
    :class:`~libcni.errors.VersionError`.

    >>> plugin_info_from_bytes(b'{"cniVersion":"0.2.0"}').supported_versions
    ['0.1.0', '0.2.0']
    """
    try:
        obj: Any = strict_loads(data)
    except (ValueError, RecursionError) as e:
        raise VersionError("decoding version info: reply is not JSON", _excerpt(data)) from e
    if not isinstance(obj, dict):
        raise VersionError("decoding version info: reply is not a JSON object", _excerpt(data))
    if not obj.get("cniVersion"):
        raise VersionError("decoding version info: missing field cniVersion", _excerpt(data))
    try:
        info = structure(obj, PluginInfo)
    except Invalid as e:
        raise VersionError(f"decoding version info: {e}", _excerpt(data)) from None
    if obj.get("supportedVersions") is None:
        if info.cni_version == FAMILY_02[-1]:
            return PluginInfo(info.cni_version, list(FAMILY_02))
        raise VersionError("decoding version info: missing field supportedVersions", _excerpt(data))
    return info


def _excerpt(data: bytes | str, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + "..."
