"""The on-disk cache of attachments: the only code touching the cache directory.

:class:`ResultCache` reads and writes ``<dir>/results/<network>-<containerID>-<ifname>``
files in the Go library's ``cniCacheV1`` format (:class:`CacheEntry`), atomically
and durably, keeps the write-ahead records of attachments in
``<dir>/records/<containerID>/`` (invisible to the Go library), and hands out
per-attachment, per-network and per-container locks (:class:`CacheLock`).
:class:`CorruptEntryError` (a ``CacheError``) tells an entry whose content is
unusable from one that could not be read.
"""

from __future__ import annotations

import os

from ._entry import CNI_CACHE_V1, RECORD_V1, CacheEntry, CorruptEntryError, completed_json
from ._gc import GCScan, GCWork
from ._lock import CacheLock
from ._records import OpenRecord
from ._store import FileIdent, ResultCache

__all__ = [
    "CNI_CACHE_V1",
    "RECORD_V1",
    "ROOT_CACHE_DIR",
    "CacheEntry",
    "CacheLock",
    "CorruptEntryError",
    "FileIdent",
    "GCScan",
    "GCWork",
    "OpenRecord",
    "ResultCache",
    "completed_json",
    "default_cache_dir",
]

#: The cache directory of a process running as root: the one Go's libcni,
#: cnitool, containerd and CRI-O use.
ROOT_CACHE_DIR = "/var/lib/cni"


def default_cache_dir() -> str:
    """The cache directory used when none is given: the one place that decides it.

    ``/var/lib/cni`` when the process runs as root (effective user ID 0), as
    Go's libcni, cnitool, containerd and CRI-O use; otherwise the per-user
    state directory of ``platformdirs`` (``user_state_dir("cni")``, e.g.
    ``~/.local/state/cni``), so that an unprivileged runtime, a test suite or
    CI works without configuration. Decided at each call (a process that
    drops its privileges gets the directory of its new user), never at import.
    """
    if os.geteuid() == 0:
        return ROOT_CACHE_DIR
    import platformdirs  # here: ``import libcni`` stays free of it

    return str(platformdirs.user_state_dir("cni"))
