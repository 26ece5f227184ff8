"""Whose a cache file is: the rules on file names and the names an entry or record holds.

No I/O. Two attachments can share a file name (network ``a-b`` with container
``c``, network ``a`` with container ``b-c``): the names inside tell them apart.
"""

from __future__ import annotations

from typing import Any

from ..errors import CacheError
from ._entry import CNI_CACHE_V1, RECORD_V1, CacheEntry, CorruptEntryError, loads


def _names_held(obj: Any) -> tuple[str, str, str]:
    """The (network, container ID, interface name) a decoded ``cniCacheV1`` file holds; ``""``
    where none (a legacy result, a wrongly typed name)."""
    if type(obj) is not dict or obj.get("kind") != CNI_CACHE_V1:
        return "", "", ""
    network, cid, ifname = obj.get("networkName"), obj.get("containerId"), obj.get("ifName")
    return (
        network if type(network) is str else "",
        cid if type(cid) is str else "",
        ifname if type(ifname) is str else "",
    )


def _held_by_other(obj: Any, network: str, container_id: str, ifname: str) -> bool:
    """Whether the decoded file ``obj`` names another attachment than the one given (a name
    it lacks is the file name's, as a read takes it)."""
    held = _names_held(obj)
    return any(h and h != w for h, w in zip(held, (network, container_id, ifname), strict=True))


def _describe(network: str, container_id: str, ifname: str) -> str:
    return f"network {network!r}, container {container_id!r}, interface {ifname!r}"


def _splits(rest: str) -> bool:
    """Whether ``rest`` can be ``<containerID>-<ifname>`` (two non-empty parts)."""
    return rest.find("-", 1, len(rest) - 1) > 0


def _only_of(name: str, network: str, networks: set[str]) -> bool:
    """Whether the file ``name``, whose content names no network, is ``network``'s: it can be
    ``<network>-<containerID>-<ifname>`` and not so for another of the known ``networks``."""
    if not name.startswith(f"{network}-") or not _splits(name[len(network) + 1 :]):
        return False
    return not any(
        other != network and name.startswith(f"{other}-") and _splits(name[len(other) + 1 :])
        for other in networks
    )


def _is_candidate(name: str, part: str) -> bool:
    """Whether the file ``name`` can be ``<network>-<containerID>-<ifname>`` for ``part``
    (``-<containerID>-``, with something before and after it)."""
    i = name.find(part, 1)
    return i > 0 and i + len(part) < len(name)


def _named_as(entry: CacheEntry, name: str) -> bool:
    """Whether the names an entry holds are those of its file name (one lacking a name is).

    A mismatch is a file tampered with or copied: listed under its names, GC
    would DEL that other attachment at every run and never remove the file.
    """
    parts = (entry.network_name, entry.container_id, entry.ifname)
    return not all(parts) or name == "-".join(parts)


def _shared_name(name: str, container_id: str) -> bool:
    """Whether the record file ``name`` of ``container_id`` can be two attachments': when
    ``-<containerID>-`` occurs twice in it (network ``a-c-b`` with interface ``x``, network
    ``a`` with interface ``b-c-x``); only then do the names inside tell whose it is."""
    part = f"-{container_id}-"
    first = name.find(part)
    return first >= 0 and name.find(part, first + 1) >= 0


def _usable_record(data: bytes, path: str, *, container_id: str, name: str) -> CacheEntry | None:
    """The record ``data`` of the file ``name`` of ``records/<container_id>/`` if usable: a
    ``libcniRecordV1`` object of this container, its names making up its file name."""
    try:
        record = CacheEntry.from_dict(loads(data, path), source=path, kind=RECORD_V1)
    except CorruptEntryError:
        return None
    if (
        record.container_id != container_id
        or not record.network_name
        or not record.ifname
        or not _named_as(record, name)
    ):
        return None
    return record


def _usable_listed(obj: dict[str, Any], name: str, path: str) -> bool:
    """Whether the decoded listed file ``name`` is a usable entry (or a legacy result)."""
    return obj.get("kind") != CNI_CACHE_V1 or _usable_entry(obj, name, path) is not None


def _usable_entry(obj: dict[str, Any], name: str, path: str) -> CacheEntry | None:
    """The ``cniCacheV1`` entry ``obj`` of the listed file ``name``, if it is usable."""
    try:
        entry = CacheEntry.from_dict(obj, source=path)
    except CacheError:
        return None
    return entry if _named_as(entry, name) else None
