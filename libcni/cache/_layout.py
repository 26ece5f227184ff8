""":class:`CacheDirs`: the paths of ``results/``, ``locks/`` and ``records/``, their kept
descriptors (:class:`~._fs.DirFds`) and the checked ``records/<containerID>/``; the one
object every part of :class:`~._store.ResultCache` holds."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator

from ..errors import CacheError
from ._files import _strerror
from ._fs import DirFds, open_subdir, untrusted

__all__ = ["CacheDirs"]


class CacheDirs:
    """The directories of the cache under ``dir`` (see :class:`~._store.ResultCache`)."""

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir: str = os.fspath(dir)
        """The cache directory (``/var/lib/cni`` by default in the API)."""
        self.results_dir: str = os.path.join(self.dir, "results")
        """The directory of the entries."""
        self.locks_dir: str = os.path.join(self.dir, "locks")
        """The directory of the lock files."""
        self.records_dir: str = os.path.join(self.dir, "records")
        """The directory of the write-ahead records, one directory per container."""
        # results/, records/ and the lock directories stay open between operations,
        # checked by one lstat each use.
        self._fds = DirFds()
        weakref.finalize(self, self._fds.close)

    def fd(self, path: str, *, create: bool, action: str) -> int | None:
        """The kept descriptor of ``results_dir``, ``records_dir`` or ``locks_dir`` (:class:`DirFds`)."""
        return self._fds.fd(path, create=create, action=action)

    def lock_dir(self, action: str, subdir: str = "") -> int:
        """The kept, checked descriptor of ``locks/`` or ``locks/<subdir>`` (created if missing);
        ``action`` is for errors (``lock <the lock file>``)."""
        top = self.fd(self.locks_dir, create=True, action=action)
        assert top is not None  # (create=True)
        return top if not subdir else self._fds.subdir(top, self.locks_dir, subdir, action=action)

    @contextlib.contextmanager
    def container_dir(self, container_id: str, *, action: str) -> Iterator[tuple[int, int] | None]:
        """``(records_fd, container_fd)`` of ``records/<containerID>``, both checked (``open_dir``'s
        rules); ``None`` if it is missing."""
        top = self.fd(self.records_dir, create=False, action=action)
        sub = None if top is None else self.open_container(top, container_id, action=action)
        if top is None or sub is None:
            yield None
            return
        try:
            yield top, sub
        finally:
            os.close(sub)

    def open_container(self, top: int, container_id: str, *, action: str) -> int | None:
        """The checked descriptor of ``records/<containerID>`` (``top``: ``records/``'s)."""
        path = f"{self.records_dir}/{container_id}"
        return open_subdir(top, container_id, path, action=action, create=False)

    def container_checked(self, top: int, container_id: str, action: str) -> bool:
        """Whether ``records/<containerID>`` exists, checked with one ``lstat`` through ``top``
        (``records/``); anything but a trusted directory raises ``CacheError``."""
        try:
            st = os.stat(container_id, dir_fd=top, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise CacheError(f"cannot {action}", _strerror(e)) from None
        problem = untrusted(st, f"{self.records_dir}/{container_id}", action)
        if problem is not None:
            raise problem
        return True
