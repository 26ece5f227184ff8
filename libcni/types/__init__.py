"""CNI results of every specification version, and their conversions.

Three families share the abstract base :class:`Result`:

=====================  ==================  =========================================
versions               class               parts
=====================  ==================  =========================================
1.0.0, 1.1.0           :class:`Result100`  :class:`Interface100`, :class:`IPConfig100`,
                                           :class:`Route`, :class:`DNS`
0.3.0, 0.3.1, 0.4.0    :class:`Result040`  :class:`Interface040`, :class:`IPConfig040`,
                                           :class:`Route`, :class:`DNS`
0.1.0, 0.2.0           :class:`Result020`  :class:`IPConfig020` (``ip4``/``ip6``),
                                           :class:`Route020`, :class:`DNS`
=====================  ==================  =========================================

``Interface`` and ``IPConfig`` are the 1.x (current) classes.

All are frozen; sequence fields are tuples. Each object keeps the JSON fields
it does not know in ``extra`` and writes them back in ``to_dict()``.

>>> r = result_from_bytes(b'{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/16"}]}')
>>> r.ips[0].address
IPv4Interface('10.1.0.5/16')
>>> r.as_version("0.2.0").to_dict()
{'cniVersion': '0.2.0', 'ip4': {'ip': '10.1.0.5/16'}, 'dns': {}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._codec import short
from ..errors import DecodeError, VersionError
from ..version import ALL, FAMILY_02, FAMILY_04, or_default
from ._base import IPAddress, IPInterface, Result, Route, _excerpt, loads
from .dns import DNS
from .v1 import Interface100, IPConfig100, Result100

if TYPE_CHECKING:
    from .v02 import IPConfig020, Result020, Route020
    from .v04 import Interface040, IPConfig040, Result040

__all__ = ["DNS", "IPAddress", "IPConfig", "IPConfig020", "IPConfig040", "IPConfig100"]
__all__ += ["IPInterface", "Interface", "Interface040", "Interface100", "Result", "Result020"]
__all__ += ["Result040", "Result100", "Route", "Route020", "create_result", "family_of"]
__all__ += ["result_from_bytes", "result_from_dict"]

#: The interface class of the current (1.x) results.
Interface = Interface100
#: The IP class of the current (1.x) results.
IPConfig = IPConfig100

# The 0.x families are imported when first met (a version decoded, or a name asked for).
_OLD_NAMES = dict.fromkeys(("IPConfig020", "Result020", "Route020"), "v02")
_OLD_NAMES |= dict.fromkeys(("IPConfig040", "Interface040", "Result040"), "v04")


def __getattr__(name: str) -> Any:
    module = _OLD_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OLD_NAMES))


#: The result class of each known version; the 0.x ones added when first met.
_FAMILY: dict[str, type[Result]] = dict.fromkeys(Result100.VERSIONS, Result100)


def family_of(version: str) -> type[Result]:
    """The result class for ``version`` (the empty string means 0.1.0).

    An unknown version raises :class:`~libcni.errors.VersionError`.

    >>> family_of("0.3.1").__name__
    'Result040'
    """
    cls = _FAMILY.get(or_default(version)) if isinstance(version, str) else None
    if cls is None:
        if isinstance(version, str) and or_default(version) in FAMILY_02 + FAMILY_04:
            from .v02 import Result020
            from .v04 import Result040

            _FAMILY.update(dict.fromkeys(Result020.VERSIONS, Result020))
            _FAMILY.update(dict.fromkeys(Result040.VERSIONS, Result040))
            return _FAMILY[or_default(version)]
        raise VersionError(f"unknown CNI version {version!r}", ", ".join(ALL))
    return cls


def _as_object(obj: Any) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if type(obj) is dict or isinstance(obj, Mapping):
        return obj
    raise DecodeError(f"result must be a JSON object, not {short(obj)}")


def result_from_dict(obj: Any, default_version: str = "") -> Result:
    """Decode a result from an already decoded JSON value.

    ``obj`` must be a JSON object (or ``None``). The version is its ``cniVersion``,
    else ``default_version``, else 0.1.0. An unknown version raises
    :class:`~libcni.errors.VersionError`; a malformed field a
    :class:`~libcni.errors.DecodeError` naming it. Unknown fields are kept, shared
    with ``obj``: do not mutate ``obj`` afterwards.

    >>> result_from_dict({"ip4": {"ip": "10.0.0.2/8"}}).cni_version
    '0.1.0'
    >>> result_from_dict(None, "1.0.0").to_dict()
    {'cniVersion': '1.0.0'}
    """
    obj = _as_object(obj)
    version = obj.get("cniVersion")
    if version is None or version == "":
        version = or_default(default_version)
    elif type(version) is not str:
        raise DecodeError(f"cniVersion: must be a string, not {short(version)}")
    return family_of(version).from_dict(obj, version)


def result_from_bytes(data: bytes | bytearray | str, default_version: str = "") -> Result:
    """Decode a plugin's result (its standard output) from JSON text.

    The same rules as :func:`result_from_dict`; text that is not JSON (NaN and
    Infinity refused) raises :class:`~libcni.errors.DecodeError`.

    >>> result_from_bytes(b'null', default_version="0.4.0").to_json()
    '{"cniVersion":"0.4.0","dns":{}}'
    """
    if not isinstance(data, (bytes, bytearray, str)):
        raise DecodeError(f"result must be bytes or str, not {type(data).__name__}")
    return result_from_dict(loads(data), default_version)


def create_result(version: str, data: bytes | bytearray | str | Mapping[str, Any] | None) -> Result:
    """Decode ``data`` (JSON text, or an already decoded object) as a result of
    ``version`` (the empty string means 0.1.0).

    A non-empty ``cniVersion`` in the data must have the same layout as
    ``version`` (e.g. "0.3.1" for "0.4.0"), else
    :class:`~libcni.errors.VersionError`. The result keeps the data's own
    ``cniVersion``, as Go's does; data without one is labelled ``version``.

    >>> create_result("1.1.0", '{"ips":[{"address":"fd00::2/64"}]}').ips[0].address.version
    6
    """
    cls = family_of(version)
    version = or_default(version)
    obj = _as_object(loads(data) if isinstance(data, (bytes, bytearray, str)) else data)
    given = obj.get("cniVersion")
    if given is not None and given != "":
        if type(given) is not str:
            raise DecodeError(f"cniVersion: must be a string, not {short(given)}")
        if family_of(given) is not cls:
            raise VersionError(
                f"result of version {given} cannot be read as version {version}", _excerpt(obj)
            )
        version = given
    return cls.from_dict(obj, version)
