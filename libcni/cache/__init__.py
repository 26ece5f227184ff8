"""The on-disk cache of attachments (behaviour §7): the only code touching the cache directory.

:class:`ResultCache` reads and writes ``<dir>/results/<network>-<containerID>-<ifname>``
files in the Go library's ``cniCacheV1`` format (:class:`CacheEntry`), atomically
and durably, and hands out per-attachment and per-network locks
(:class:`CacheLock`).
"""

from __future__ import annotations

from ._entry import CNI_CACHE_V1, CacheEntry
from ._lock import CacheLock
from ._store import ResultCache

__all__ = ["CNI_CACHE_V1", "CacheEntry", "CacheLock", "ResultCache"]
