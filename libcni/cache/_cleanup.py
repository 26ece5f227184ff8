"""GC's clean-up (:class:`CleanUp`, ``cache.cleanup``): what killed writers left and lock files
no one holds; never anything readable and valid, never a DEL (:mod:`._gc` decides what a
GC run removes)."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable

from ..errors import CacheError
from ._files import (
    TEMP_PREFIX,
    TEMP_STALE_AFTER,
    _opened,
    _rmdir_quietly,
)
from ._fs import open_subdir
from ._layout import CacheDirs
from ._lock import acquire

__all__ = ["CleanUp"]


class CleanUp:
    """Remove what is stale or corrupt in the cache; GC's (part of ``ResultCache``)."""

    def __init__(self, dirs: CacheDirs) -> None:
        self.dirs = dirs
        self.results_dir = dirs.results_dir
        self.records_dir = dirs.records_dir
        self.locks_dir = dirs.locks_dir

    def remove_stale_temporaries(self, names: Iterable[str] | None = None) -> list[str]:
        """Remove the regular ``.tmp-*`` files of ``results/`` older than ``TEMP_STALE_AFTER``
        (killed writers'; the Go library would list them); their names. Best effort.
        ``names``: the directory's names as GC listed them (else it is listed)."""
        with _opened(self.results_dir, action="remove stale temporary files") as dfd:
            if dfd is None:
                return []
            removed: list[str] = []
            try:
                prefix = f"{TEMP_PREFIX}tmp-"
                stale_before = time.time() - TEMP_STALE_AFTER
                for name in os.listdir(dfd) if names is None else names:
                    if not name.startswith(prefix):
                        continue
                    with contextlib.suppress(OSError):
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        if stat.S_ISREG(st.st_mode) and st.st_mtime < stale_before:
                            os.unlink(name, dir_fd=dfd)
                            removed.append(name)
            except OSError:
                pass
        return sorted(removed)

    def sweep_records(self, listed: dict[str, list[str]] | None = None) -> list[str]:
        """Remove the temporary records killed writers left; the paths removed. Best effort.

        ``.<name>`` goes once the lock of the attachment ``<name>`` is free (its
        writer held it), ``..<hex>`` after ``TEMP_STALE_AFTER``, then an emptied
        container directory; never a record. ``listed``: each container's names as
        GC listed them (else they are listed).
        """
        removed: list[str] = []
        try:
            with _opened(self.records_dir, action="clean up the records") as top:
                if top is None:
                    return removed
                containers = sorted(os.listdir(top) if listed is None else listed)
                for cid in containers:
                    names = None if listed is None else listed[cid]
                    if names and not any(n.startswith(TEMP_PREFIX) for n in names):
                        continue  # records only: nothing to sweep, and not empty
                    with contextlib.suppress(CacheError, OSError):
                        self._sweep_container(top, cid, removed)
        except (CacheError, OSError):
            pass
        return removed

    def _sweep_container(self, top: int, cid: str, removed: list[str]) -> None:
        path = os.path.join(self.records_dir, cid)
        dfd = open_subdir(top, cid, path, action="clean up the records", create=False)
        if dfd is None:
            return
        try:
            names = os.listdir(dfd)
            stale_before = time.time() - TEMP_STALE_AFTER
            for name in names:
                if not name.startswith(TEMP_PREFIX):
                    continue
                with contextlib.suppress(CacheError, OSError):
                    if name.startswith(".."):
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        if st.st_mtime < stale_before:
                            os.unlink(name, dir_fd=dfd)
                            removed.append(os.path.join(path, name))
                        continue
                    lk = acquire(
                        self.locks_dir,
                        name[1:],
                        exclusive=True,
                        timeout=0,
                        entry=os.path.join(self.results_dir, name[1:]),
                        dirs=self.dirs.lock_dir,
                    )
                    if lk is None:
                        continue  # its ADD runs
                    try:
                        os.unlink(name, dir_fd=dfd)
                        removed.append(os.path.join(path, name))
                    finally:
                        lk.release()
        finally:
            os.close(dfd)
        _rmdir_quietly(top, cid)

    def remove_orphan_locks(self, entries: Iterable[str] | None = None) -> list[str]:
        """Remove the lock files no one holds and that have no entry; their paths. Best effort.

        An attachment's has no ``results/`` file of its name; a network's, no
        ``results/`` file starting with ``<network>-``; a container's is always
        an orphan. Each is removed holding its exclusive lock (taken without
        waiting), so a waiter retries on a new file; nothing if ``results/``
        cannot be listed. ``entries``: its names as GC listed them (else it is listed).
        """
        try:
            entries = set(
                self._list_dir(self.results_dir, "clean up lock files")
                if entries is None
                else entries
            )
            locks = self._list_dir(self.locks_dir, "clean up lock files")
            networks = self._list_dir(os.path.join(self.locks_dir, "networks"), "")
            containers = self._list_dir(os.path.join(self.locks_dir, "containers"), "")
        except (CacheError, OSError):
            return []
        removed: list[str] = []
        # "networks" and "containers" are the directories of the other two kinds.
        self._sweep_locks(
            locks,
            "",
            lambda name: name in entries or name in ("networks", "containers"),
            removed,
            of_entry=True,
        )
        self._sweep_locks(
            networks,
            "networks",
            lambda name: any(e.startswith(f"{name}-") for e in entries),
            removed,
        )
        # A container lock holds no state: any file no one holds can go.
        self._sweep_locks(containers, "containers", lambda name: False, removed)
        return removed

    def _sweep_locks(
        self,
        names: list[str],
        subdir: str,
        keep: Callable[[str], bool],
        removed: list[str],
        *,
        of_entry: bool = False,
    ) -> None:
        """Remove the lock files ``names`` of ``locks/<subdir>`` that are not kept and that
        no one holds; their paths are appended to ``removed``."""
        for name in sorted(names):
            if name.startswith(".") or keep(name):
                continue
            with contextlib.suppress(CacheError, OSError):
                # An attachment lock is removed on release only if its entry is
                # still missing then (an ADD may have written it meanwhile).
                entry = os.path.join(self.results_dir, name) if of_entry else None
                lk = acquire(
                    self.locks_dir,
                    name,
                    subdir=subdir,
                    exclusive=True,
                    timeout=0,
                    entry=entry,
                    dirs=lambda action: self.dirs.lock_dir(action, subdir),
                )
                if lk is not None and lk._release(remove=not of_entry):
                    removed.append(lk.path)

    def _list_dir(self, path: str, action: str) -> list[str]:
        """The names in the (trusted) directory ``path``; ``[]`` when it is missing."""
        with _opened(path, action=action or f"list {path}") as dfd:
            if dfd is None:
                return []
            return os.listdir(dfd)
