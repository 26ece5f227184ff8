"""``CacheEntry``: one cached attachment, and its ``cniCacheV1`` JSON encoding.

The encoding is the one of the Go library's ``cachedInfo`` struct
(``libcni/api.go``), field for field and in the same order::

    {"kind": "cniCacheV1", "containerId": ..., "config": <std base64>,
     "ifName": ..., "networkName": ..., "netns": ...,   (omitempty)
     "cniArgs": [["K", "V"], ...],                        (omitempty)
     "capabilityArgs": {...},                             (omitempty)
     "result": {...}}                                     (omitempty)

Decoding follows Go's ``encoding/json`` where it matters for files written by
other runtimes: a JSON ``null`` leaves a field at its zero value, and a field
of the wrong type is an error (here a :class:`CorruptEntryError`, a
:class:`~libcni.errors.CacheError`, naming the field).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

import attrs

from .._json import strict_loads
from ..errors import CacheError

__all__ = ["CNI_CACHE_V1", "CacheEntry", "CorruptEntryError"]

CNI_CACHE_V1 = "cniCacheV1"


class CorruptEntryError(CacheError):
    """A cache entry whose *content* is unusable: empty, not JSON, wrongly typed, too large.

    Internal to libcni (callers see a :class:`~libcni.errors.CacheError`): it
    tells an entry that is broken, which DEL goes past and GC may remove, from
    one that could not be read (too many open files, EIO, permission denied),
    which nothing removes.
    """


def _pairs(value: Iterable[Iterable[str]]) -> tuple[tuple[str, str], ...]:
    """Converter of ``cni_args``: any iterable of pairs becomes a tuple of 2-tuples."""
    if isinstance(value, tuple) and all(type(p) is tuple and len(p) == 2 for p in value):
        return value
    out: list[tuple[str, str]] = []
    for pair in value:
        k, v = pair
        out.append((k, v))
    return tuple(out)


def loads(data: bytes | str, source: str) -> Any:
    """Parse JSON ``data`` (the content of ``source``), raising only ``CorruptEntryError``."""
    # Go replaces invalid UTF-8 by U+FFFD instead of failing; so do we.
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    if not text or text.isspace():
        raise CorruptEntryError(f"cache entry {source} is empty")
    try:
        # Go's encoding/json has no NaN / Infinity; neither does a valid cache file.
        return strict_loads(text)
    except RecursionError:
        raise CorruptEntryError(f"cache entry {source} is not valid JSON", "nested too deeply") from None
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise CorruptEntryError(f"cache entry {source} is not valid JSON", str(e)) from None


def _field_error(source: str, key: str, what: str, value: Any) -> CorruptEntryError:
    return CorruptEntryError(
        f"cache entry {source}: field {key!r} must be {what}, not {type(value).__name__}",
        repr(value)[:200],
    )


def _get_str(obj: dict[str, Any], key: str, source: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _field_error(source, key, "a string", value)
    return value


def _decode_config(obj: dict[str, Any], source: str) -> bytes:
    value = obj.get("config")
    if value is None:
        return b""
    if not isinstance(value, str):
        raise _field_error(source, "config", "a base64 string", value)
    if "\n" in value or "\r" in value:  # Go's decoder skips line breaks
        value = value.replace("\n", "").replace("\r", "")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CorruptEntryError(
            f"cache entry {source}: field 'config' is not valid standard base64", str(e)
        ) from None


def _decode_args(obj: dict[str, Any], source: str) -> tuple[tuple[str, str], ...]:
    value = obj.get("cniArgs")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _field_error(source, "cniArgs", "a list of [key, value] pairs", value)
    out: list[tuple[str, str]] = []
    for pair in value:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not isinstance(pair[1], str)
        ):
            raise CorruptEntryError(
                f"cache entry {source}: field 'cniArgs' must hold [key, value] string pairs",
                repr(pair)[:200],
            )
        out.append((pair[0], pair[1]))
    return tuple(out)


def _decode_object(obj: dict[str, Any], key: str, source: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _field_error(source, key, "an object", value)
    return value


@attrs.frozen
class CacheEntry:
    """One cached attachment: what ADD stored, what DEL, CHECK and GC read back.

    ``config`` is the original bytes of the network configuration list (or
    single plugin configuration); ``result`` the final result as a raw JSON
    object (the cache does not interpret it); ``kind`` is ``"cniCacheV1"``,
    or ``""`` for an entry read from a legacy file holding a bare result.
    """

    container_id: str
    network_name: str
    ifname: str
    config: bytes
    netns: str = ""
    cni_args: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    capability_args: dict[str, Any] = attrs.field(factory=dict)
    result: dict[str, Any] | None = None
    kind: str = CNI_CACHE_V1

    def to_dict(self) -> dict[str, Any]:
        """The ``cniCacheV1`` JSON object, in the Go field order, empty fields omitted.

        The ``kind`` written is always ``"cniCacheV1"`` (an entry read from a
        legacy file is written back in the current format).

        >>> CacheEntry("c1", "net", "eth0", b"{}").to_dict()
        {'kind': 'cniCacheV1', 'containerId': 'c1', 'config': 'e30=', 'ifName': 'eth0', \
'networkName': 'net'}
        """
        out: dict[str, Any] = {
            "kind": CNI_CACHE_V1,
            "containerId": self.container_id,
            "config": base64.b64encode(self.config).decode("ascii"),
            "ifName": self.ifname,
            "networkName": self.network_name,
        }
        if self.netns:
            out["netns"] = self.netns
        if self.cni_args:
            out["cniArgs"] = [[k, v] for k, v in self.cni_args]
        if self.capability_args:
            out["capabilityArgs"] = self.capability_args
        if self.result:
            out["result"] = self.result
        return out

    def to_json(self) -> bytes:
        """The compact ``cniCacheV1`` JSON bytes; ``CacheError`` if a value cannot be encoded."""
        try:
            return json.dumps(
                self.to_dict(), separators=(",", ":"), allow_nan=False
            ).encode("ascii")
        except (TypeError, ValueError, RecursionError) as e:
            raise CacheError(
                f"cannot encode the cache entry of network {self.network_name!r}, "
                f"container {self.container_id!r}, interface {self.ifname!r}",
                str(e) or type(e).__name__,
            ) from None

    @classmethod
    def from_dict(cls, obj: Any, *, source: str = "<cache entry>") -> CacheEntry:
        """Decode a ``cniCacheV1`` object; ``CorruptEntryError`` naming ``source`` and the bad field.

        Missing and ``null`` fields take their zero value (``""``, ``b""``,
        ``()``, ``{}``, ``None``), as the Go decoder leaves them.
        """
        if not isinstance(obj, dict):
            raise CorruptEntryError(
                f"cache entry {source} is not a JSON object", type(obj).__name__
            )
        kind = obj.get("kind")
        if kind != CNI_CACHE_V1:
            raise CorruptEntryError(
                f"cache entry {source} has kind {kind!r}, not {CNI_CACHE_V1!r}"
            )
        return cls(
            container_id=_get_str(obj, "containerId", source),
            network_name=_get_str(obj, "networkName", source),
            ifname=_get_str(obj, "ifName", source),
            config=_decode_config(obj, source),
            netns=_get_str(obj, "netns", source),
            cni_args=_decode_args(obj, source),
            capability_args=_decode_object(obj, "capabilityArgs", source) or {},
            result=_decode_object(obj, "result", source),
            kind=CNI_CACHE_V1,
        )

    @classmethod
    def from_json(
        cls,
        data: bytes | str,
        *,
        network_name: str = "",
        container_id: str = "",
        ifname: str = "",
        source: str = "<cache entry>",
    ) -> CacheEntry:
        """Decode a cache file's content, either format.

        A ``cniCacheV1`` object gives its entry; the names it lacks are taken
        from the arguments. Any other JSON object is a legacy bare result:
        ``kind=""``, ``config=b""`` and the names from the arguments. Empty
        content, invalid JSON, a non-object or a wrongly typed ``cniCacheV1``
        field raise ``CorruptEntryError`` naming ``source``.
        """
        return cls.from_object(
            loads(data, source),
            network_name=network_name,
            container_id=container_id,
            ifname=ifname,
            source=source,
        )

    @classmethod
    def from_object(
        cls,
        obj: Any,
        *,
        network_name: str = "",
        container_id: str = "",
        ifname: str = "",
        source: str = "<cache entry>",
    ) -> CacheEntry:
        """:meth:`from_json` of an already decoded JSON value (no second parse)."""
        if not isinstance(obj, dict):
            raise CorruptEntryError(
                f"cache entry {source} is not a JSON object", type(obj).__name__
            )
        if obj.get("kind") != CNI_CACHE_V1:
            return cls(
                container_id=container_id,
                network_name=network_name,
                ifname=ifname,
                config=b"",
                result=obj,
                kind="",
            )
        entry = cls.from_dict(obj, source=source)
        if (
            (container_id and not entry.container_id)
            or (network_name and not entry.network_name)
            or (ifname and not entry.ifname)
        ):
            entry = attrs.evolve(
                entry,
                container_id=entry.container_id or container_id,
                network_name=entry.network_name or network_name,
                ifname=entry.ifname or ifname,
            )
        return entry
