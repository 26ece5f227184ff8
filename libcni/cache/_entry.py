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

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from .._codec import Invalid, field, short, structure, unstructure
from .._json import strict_loads
from ..errors import CacheError
from ..values import NetworkAttachment, RuntimeConf

__all__ = ["CNI_CACHE_V1", "RECORD_V1", "CacheEntry", "CorruptEntryError"]

CNI_CACHE_V1 = "cniCacheV1"
RECORD_V1 = "libcniRecordV1"
"""The kind of a write-ahead record (``<dir>/records/``): an entry without ``result``."""


@functools.cache
def _encoder() -> Callable[[Any], str]:
    """The compact JSON encoder of entries, made once (``import libcni`` spares ``json``)."""
    import json

    return json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


_RECORD_HEAD = b'{"kind":"' + RECORD_V1.encode() + b'"'
_ENTRY_HEAD = b'{"kind":"' + CNI_CACHE_V1.encode() + b'"'


def completed_json(record_json: bytes, result: dict[str, Any] | None) -> bytes:
    """The ``cniCacheV1`` JSON of the entry a record becomes when its ADD returned ``result``.

    ``record_json`` is the record's :meth:`CacheEntry.to_json`; the bytes are
    those of the entry's ``to_json()``, made without encoding the rest again
    (``result`` is the last field in Go's order, asserted below the class).
    """
    if not record_json.startswith(_RECORD_HEAD) or not record_json.endswith(b"}"):
        raise ValueError("not the JSON of a record")
    body = _ENTRY_HEAD + record_json[len(_RECORD_HEAD) :]
    if not result:  # omitted when empty, as every member
        return body
    try:
        encoded = _encoder()(result).encode("ascii")
    except (TypeError, ValueError, RecursionError) as e:
        raise CacheError(
            "cannot encode the result for the cache", str(e) or type(e).__name__
        ) from None
    return body[:-1] + b',"result":' + encoded + b"}"


def _dump_kind(kind: str) -> str:
    """The ``kind`` written: a record's own, else ``cniCacheV1`` (a legacy entry is rewritten so)."""
    return RECORD_V1 if kind == RECORD_V1 else CNI_CACHE_V1


class CorruptEntryError(CacheError):
    """A cache entry whose *content* is unusable: empty, not JSON, wrongly typed, too large.

    Internal (callers see a ``CacheError``): a broken entry, which DEL goes
    past and GC may remove, unlike one that could not be read.
    """


def _pairs(value: Iterable[Iterable[str]]) -> tuple[tuple[str, str], ...]:
    """Converter of ``cni_args``: any iterable of pairs becomes a tuple of 2-tuples."""
    if isinstance(value, tuple) and all(type(p) is tuple and len(p) == 2 for p in value):
        return value
    return tuple((k, v) for k, v in value)


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
        raise CorruptEntryError(
            f"cache entry {source} is not valid JSON", "nested too deeply"
        ) from None
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise CorruptEntryError(f"cache entry {source} is not valid JSON", str(e)) from None


#: Go leaves a missing field at its zero value: the fields every entry names.
_ABSENT: dict[str, Any] = {"containerId": None, "networkName": None, "ifName": None, "config": None}


@attrs.frozen
class CacheEntry:
    """One cached attachment: what ADD stored, what DEL, CHECK and GC read back.

    ``config`` is the original bytes of the network configuration list (or
    single plugin configuration); ``result`` the final result as a raw JSON
    object (the cache does not interpret it); ``kind`` is ``"cniCacheV1"``,
    or ``""`` for an entry read from a legacy file holding a bare result, or
    ``"libcniRecordV1"`` for a write-ahead record (:meth:`as_record`: what
    ADD writes before its first plugin runs; no ``result``).
    """

    container_id: str = field(key="containerId", always=True)
    network_name: str = field(key="networkName", always=True)
    ifname: str = field(key="ifName", always=True)
    config: bytes = field(always=True)
    netns: str = ""
    cni_args: tuple[tuple[str, str], ...] = field(default=(), converter=_pairs, key="cniArgs")
    capability_args: dict[str, Any] = field(factory=dict, key="capabilityArgs")
    result: dict[str, Any] | None = None
    # Written as "cniCacheV1" (a legacy entry is written back in the current format),
    # or as "libcniRecordV1" for a record.
    kind: str = field(default=CNI_CACHE_V1, always=True, dump=_dump_kind)

    # Go's cachedInfo order.
    _json_order = (
        "kind", "container_id", "config", "ifname", "network_name",
        "netns", "cni_args", "capability_args", "result",
    )  # fmt: skip

    @classmethod
    def from_runtime(
        cls, rt: RuntimeConf, *, network: str, config: bytes, kind: str = RECORD_V1
    ) -> CacheEntry:
        """The entry (a record by default, as ADD writes first) of the attachment ``rt``
        describes to ``network``, whose configuration's bytes are ``config``: the one place
        a runtime configuration becomes cache fields."""
        return cls(
            container_id=rt.container_id,
            network_name=network,
            ifname=rt.ifname,
            config=config,
            netns=rt.netns,
            cni_args=rt.args,
            capability_args=dict(rt.capability_args),
            kind=kind,
        )

    def runtime_conf(
        self, *, netns: str | None = None, cache_dir: str | os.PathLike[str] | None = None
    ) -> RuntimeConf:
        """The runtime configuration cached (its ``netns``, unless one is given): what a DEL,
        CHECK or teardown of this attachment passes; the one place cache fields become one."""
        return RuntimeConf(
            container_id=self.container_id,
            netns=self.netns if netns is None else netns,
            ifname=self.ifname,
            args=self.cni_args,
            capability_args=self.capability_args,
            cache_dir=cache_dir,
        )

    def attachment(self) -> NetworkAttachment:
        """The public view of this entry (``complete=False`` for a record)."""
        return NetworkAttachment(
            container_id=self.container_id,
            network=self.network_name,
            ifname=self.ifname,
            config=self.config,
            netns=self.netns,
            cni_args=self.cni_args,
            capability_args=self.capability_args,
            complete=not self.is_record,
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``cniCacheV1`` JSON object, in the Go field order, empty fields omitted.

        The ``kind`` written is always ``"cniCacheV1"`` (an entry read from a
        legacy file is written back in the current format).

        >>> CacheEntry("c1", "net", "eth0", b"{}").to_dict()
        {'kind': 'cniCacheV1', 'containerId': 'c1', 'config': 'e30=', 'ifName': 'eth0', \
'networkName': 'net'}
        """
        return unstructure(self)

    @property
    def is_record(self) -> bool:
        """Whether this is a write-ahead record (an ADD in progress or unfinished), not an entry."""
        return self.kind == RECORD_V1

    def as_record(self) -> CacheEntry:
        """The write-ahead record of this attachment: the same fields, no ``result``.

        >>> CacheEntry("c1", "net", "eth0", b"{}").as_record().to_dict()
        {'kind': 'libcniRecordV1', 'containerId': 'c1', 'config': 'e30=', 'ifName': 'eth0', \
'networkName': 'net'}
        """
        return attrs.evolve(self, result=None, kind=RECORD_V1)

    def to_json(self) -> bytes:
        """The compact ``cniCacheV1`` JSON bytes; ``CacheError`` if a value cannot be encoded."""
        try:
            return _encoder()(self.to_dict()).encode("ascii")
        except (TypeError, ValueError, RecursionError) as e:
            raise CacheError(
                f"cannot encode the cache entry of network {self.network_name!r}, "
                f"container {self.container_id!r}, interface {self.ifname!r}",
                str(e) or type(e).__name__,
            ) from None

    @classmethod
    def from_dict(
        cls, obj: Any, *, source: str = "<cache entry>", kind: str = CNI_CACHE_V1
    ) -> CacheEntry:
        """Decode a ``cniCacheV1`` object (or, with ``kind``, a record); ``CorruptEntryError``
        naming ``source`` and the bad field. Missing and ``null`` fields take their zero value,
        as in Go; a record holds no ``result``."""
        if not isinstance(obj, dict):
            raise CorruptEntryError(
                f"cache entry {source} is not a JSON object", type(obj).__name__
            )
        found = obj.get("kind")
        if found != kind:
            raise CorruptEntryError(f"cache entry {source} has kind {found!r}, not {kind!r}")
        if kind == RECORD_V1 and obj.get("result") is not None:
            raise CorruptEntryError(f"cache entry {source}: a record holds no result")
        try:
            return structure({**_ABSENT, **obj}, cls)
        except Invalid as e:
            raise CorruptEntryError(
                f"cache entry {source}: field {e.path!r} {e.reason}", short(obj, 200)
            ) from None

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
        """Decode a cache file's content, either format; ``CorruptEntryError`` naming ``source``.

        A ``cniCacheV1`` object gives its entry (the names it lacks from the
        arguments); any other JSON object is a legacy bare result (``kind=""``,
        ``config=b""``, the names from the arguments).
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
            return cls(container_id, network_name, ifname, b"", result=obj, kind="")
        entry = cls.from_dict(obj, source=source)
        given = {"container_id": container_id, "network_name": network_name, "ifname": ifname}
        lacking: dict[str, Any] = {k: v for k, v in given.items() if v and not getattr(entry, k)}
        return attrs.evolve(entry, **lacking) if lacking else entry


# completed_json appends the result to the record's JSON: it must be the last field.
assert CacheEntry._json_order[-1] == "result", "completed_json needs result last"
