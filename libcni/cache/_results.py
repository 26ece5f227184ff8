"""The entries of ``<dir>/results/`` (:class:`Entries`, ``cache.results``): write, read,
remove and list them (the rules: docs/cache.rst)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import CacheError
from . import _files
from ._entry import CNI_CACHE_V1, CacheEntry, CorruptEntryError, loads
from ._files import (
    _TEMP_FLAGS,
    FILE_MODE,
    TEMP_PREFIX,
    FileIdent,
    _check_cap,
    _fill,
    _ident,
    _opened,
    _rename_or_remove,
    _strerror,
)
from ._fs import attachment_name, check_name, fit_name
from ._layout import CacheDirs
from ._names import _describe, _held_by_other, _is_candidate, _named_as, _names_held

__all__ = ["Entries"]


class Entries:
    """Write, read, remove and list the entries of ``results/`` (part of ``ResultCache``)."""

    def __init__(self, dirs: CacheDirs) -> None:
        self.dirs = dirs
        self.results_dir = dirs.results_dir

    def entry_path(self, network: str, container_id: str, ifname: str) -> str:
        """The path of the entry of one attachment (names checked as everywhere)."""
        return os.path.join(self.results_dir, attachment_name(network, container_id, ifname))

    def write(self, entry: CacheEntry, data: bytes | None = None) -> None:
        """Store ``entry`` (``data``: its JSON if made already), replacing the attachment's previous one.

        Atomic and durable: a temporary file of ``results/`` is fsynced, renamed
        over the entry, and the directory fsynced; a symlink at the path is
        replaced, never written through. On failure nothing is left but the
        previous entry and ``CacheError`` names the path. Never written: an entry
        over ``MAX_ENTRY_SIZE``, or over *another* attachment's (:meth:`check_owner`).
        Call it holding the attachment's lock.
        """
        name = attachment_name(entry.network_name, entry.container_id, entry.ifname)
        if data is None:
            data = entry.to_json()
        path = os.path.join(self.results_dir, name)
        _check_cap(data, f"cannot write cache entry {path}")
        dfd = self.dirs.fd(self.results_dir, create=True, action=f"write cache entry {path}")
        assert dfd is not None  # created, or CacheError
        self._check_owner_at(dfd, name, path, entry.network_name, entry.container_id, entry.ifname)
        tmp = self._write_temp(dfd, data, path)
        _rename_or_remove(dfd, tmp, to=name, error=f"cannot write cache entry {path}")
        try:
            os.fsync(dfd)
        except OSError as e:
            raise CacheError(
                f"cache entry {path} was written but its directory could not be synced",
                _strerror(e),
            ) from None

    def _write_temp(self, dfd: int, data: bytes, path: str) -> str:
        """Write ``data`` to a new fsynced temporary file in ``dfd``; return its name."""
        for _ in range(10):
            # os.urandom, not secrets: the same bytes, without importing hashlib and random.
            tmp = f"{TEMP_PREFIX}tmp-{os.urandom(8).hex()}"
            try:
                fd = os.open(tmp, _TEMP_FLAGS, FILE_MODE, dir_fd=dfd)
                break
            except FileExistsError:
                continue
            except OSError as e:
                raise CacheError(
                    f"cannot write cache entry {path}: cannot create a temporary file in "
                    f"{self.results_dir}",
                    _strerror(e),
                ) from None
        else:  # pragma: no cover - 10 collisions of 64 random bits
            raise CacheError(f"cannot write cache entry {path}: no free temporary name")
        _fill(fd, data, dfd=dfd, name=tmp, error=f"cannot write cache entry {path}", fsync=True)
        return tmp

    def check_owner(self, network: str, container_id: str, ifname: str) -> None:
        """Raise ``CacheError`` if the entry path holds another attachment's entry (what
        :meth:`write` checks; an absent, corrupt or legacy one is fine, an unreadable one raises)."""
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self.dirs.fd(self.results_dir, create=False, action=f"write cache entry {path}")
        if dfd is not None:
            self._check_owner_at(dfd, name, path, network, container_id, ifname)

    @staticmethod
    def _check_owner_at(
        dfd: int, name: str, path: str, network: str, container_id: str, ifname: str
    ) -> None:
        try:
            obj: Any = loads(_files._read_at(dfd, name, path), path)
        except (FileNotFoundError, CorruptEntryError):
            return
        except CacheError as e:
            raise CacheError(
                f"cannot write cache entry {path}: cannot read the entry there to check "
                "whose it is",
                e.details,
            ) from None
        if _held_by_other(obj, network, container_id, ifname):
            held = _names_held(obj)
            raise CacheError(
                f"cannot write cache entry {path} for {_describe(network, container_id, ifname)}: "
                f"it holds the entry of another attachment, {_describe(*held)}",
                "two attachments share this file name; DEL the other one first",
            )

    def read(self, network: str, container_id: str, ifname: str) -> CacheEntry | None:
        """The entry of one attachment, or ``None`` (none, or another attachment's sharing its file name).

        A legacy bare result gives ``kind=""``, ``config=b""`` and the names given.
        Unusable content (empty, corrupt, oversized, a symlink, not a regular
        file): :class:`CorruptEntryError`; a file that cannot be read: ``CacheError``.
        """
        return self.read_ident(network, container_id, ifname)[0]

    def read_ident(
        self, network: str, container_id: str, ifname: str
    ) -> tuple[CacheEntry | None, FileIdent | None]:
        """:meth:`read`, and the identity of the file read (for :meth:`remove_read`)."""
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self.dirs.fd(self.results_dir, create=False, action=f"read cache entry {path}")
        if dfd is None:
            return None, None
        try:
            data, ident = _files._read_ident_at(dfd, name, path)
        except FileNotFoundError:
            return None, None
        obj: Any = loads(data, path)
        if _held_by_other(obj, network, container_id, ifname):
            return None, None
        entry = CacheEntry.from_object(
            obj,
            network_name=network,
            container_id=container_id,
            ifname=ifname,
            source=path,
        )
        return entry, ident

    def remove_read(
        self, network: str, container_id: str, ifname: str, ident: FileIdent | None
    ) -> bool:
        """:meth:`remove` of the entry :meth:`read_ident` gave with ``ident``: unlinked unread while
        the file is still that one, else read again to tell whose it is."""
        if ident is None:
            return self.remove(network, container_id, ifname)
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self.dirs.fd(self.results_dir, create=False, action=f"remove cache entry {path}")
        if dfd is not None:
            try:
                unchanged = _ident(os.stat(name, dir_fd=dfd, follow_symlinks=False)) == ident
                if unchanged:
                    os.unlink(name, dir_fd=dfd)
                    return True
            except FileNotFoundError:
                return False
            except OSError as e:
                raise CacheError(f"cannot remove cache entry {path}", _strerror(e)) from None
        return self.remove(network, container_id, ifname)

    def remove(self, network: str, container_id: str, ifname: str) -> bool:
        """Remove the entry of one attachment; whether a file was removed.

        Another attachment's entry is left; a corrupt one (or a symlink, itself)
        removed; one that cannot be read raises ``CacheError``, removing nothing.
        """
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self.dirs.fd(self.results_dir, create=False, action=f"remove cache entry {path}")
        if dfd is None:
            return False
        try:
            try:
                obj: Any = loads(_files._read_at(dfd, name, path), path)
                if _held_by_other(obj, network, container_id, ifname):
                    return False
            except FileNotFoundError:
                return False
            except CorruptEntryError:
                pass
            except CacheError as e:
                raise CacheError(
                    f"cannot remove cache entry {path}: cannot read it to check whose it is",
                    e.details,
                ) from None
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise CacheError(f"cannot remove cache entry {path}", _strerror(e)) from None
        return True

    def entries(self, container_id: str = "") -> list[CacheEntry]:
        """Every readable ``cniCacheV1`` entry, of one container if ``container_id``, by file name.

        Skipped: unreadable or undecodable files, legacy ones, entries lacking a
        network or interface name or not named as their file, temporaries. With a
        container ID only the files whose name holds ``-<containerID>-`` are read.
        """
        if container_id:
            # The shortest file name that could hold it must fit, as in every method.
            fit_name(f"n-{check_name(container_id, 'container ID')}-i", "container ID")
        action = "list the cache entries"
        with _opened(self.results_dir, action=action) as dfd:
            if dfd is None:
                return []
            try:
                names = os.listdir(dfd)
            except OSError as e:
                raise CacheError(
                    f"cannot {action}: cannot list {self.results_dir}", _strerror(e)
                ) from None
            if container_id:
                part = f"-{container_id}-"
                names = [n for n in names if _is_candidate(n, part)]
            names.sort()
            out: list[CacheEntry] = []
            for name in names:
                if name.startswith(TEMP_PREFIX):
                    continue
                entry = self.load_listed(dfd, name)
                if entry is not None and container_id in ("", entry.container_id):
                    out.append(entry)
            return out

    def load_listed(self, dfd: int, name: str) -> CacheEntry | None:
        """The ``cniCacheV1`` entry in the listed file ``name``, or ``None``."""
        path = os.path.join(self.results_dir, name)
        try:
            obj: Any = loads(_files._read_at(dfd, name, path), path)
            if not isinstance(obj, dict) or obj.get("kind") != CNI_CACHE_V1:
                return None
            entry = CacheEntry.from_dict(obj, source=path)
        except (CacheError, FileNotFoundError):
            return None
        if not entry.network_name or not entry.ifname or not _named_as(entry, name):
            return None
        return entry
