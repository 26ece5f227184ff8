"""The entries a cache just read for a DEL to come, so that the DEL does not read them again.

The network manager's teardown and check read a container's entries (to
know its attachments and their configurations), then run a DEL or CHECK of
each, which reads its entry again under the attachment's lock; GC reads its
stale entries, then DELs each. The first read *remembers* the entry with the
identity of its file (:meth:`Recent.keep`); the second takes it back
(:meth:`Recent.take`) and uses it only while one ``lstat`` says the file at
its path is still the one read (device, inode, size, modification and
change times: a rename over it, or any write, changes them). Anything else
is read again. Nothing leaves the cache layer: the callers above it see
plain reads.

Bounded: an entry is taken at most once, and what is never taken (a DEL
that failed before it read) is dropped, oldest first, past
:data:`MAX_BYTES` of remembered files.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._entry import CacheEntry
    from ._files import FileIdent

__all__ = ["MAX_BYTES", "Recent"]

#: How many bytes of entry files (their sizes) a cache remembers at most.
MAX_BYTES = 8 << 20


class Recent:
    """Entries just read, by file name, each with the identity of its file."""

    __slots__ = ("_by_name", "_bytes", "_lock")

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[CacheEntry, FileIdent]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def keep(self, name: str, entry: CacheEntry, ident: FileIdent) -> None:
        """Remember ``entry``, read from the file ``name`` whose identity was ``ident``."""
        size = ident[2]
        if size > MAX_BYTES:
            return
        with self._lock:
            old = self._by_name.pop(name, None)
            if old is not None:
                self._bytes -= old[1][2]
            while self._by_name and self._bytes + size > MAX_BYTES:
                oldest = next(iter(self._by_name))
                self._bytes -= self._by_name.pop(oldest)[1][2]
            self._by_name[name] = (entry, ident)
            self._bytes += size

    def take(self, name: str) -> tuple[CacheEntry, FileIdent] | None:
        """The entry remembered for the file ``name`` (forgotten now), or ``None``."""
        if not self._by_name:  # the common case, without the lock
            return None
        with self._lock:
            got = self._by_name.pop(name, None)
            if got is not None:
                self._bytes -= got[1][2]
        return got

    def __len__(self) -> int:
        return len(self._by_name)
