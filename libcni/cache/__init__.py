"""The on-disk cache of attachments (behaviour §7): the only code touching the cache directory.

:class:`ResultCache` reads and writes ``<dir>/results/<network>-<containerID>-<ifname>``
files in the Go library's ``cniCacheV1`` format (:class:`CacheEntry`), atomically
and durably, and hands out per-attachment and per-network locks
(:class:`CacheLock`). :class:`CorruptEntryError` (a ``CacheError``) tells an
entry whose content is unusable from one that could not be read.
"""

from __future__ import annotations

from ._entry import CNI_CACHE_V1, CacheEntry, CorruptEntryError
from ._lock import CacheLock
from ._store import ResultCache

__all__ = ["CNI_CACHE_V1", "CacheEntry", "CacheLock", "CorruptEntryError", "ResultCache"]
