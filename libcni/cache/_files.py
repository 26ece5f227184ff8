"""One file of the cache: its bounded read and identity, writing it, removing it.

Every read of an entry or a record goes through :func:`_read_ident_at`
(tests count them by patching it here).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from ..errors import CacheError
from ._entry import CorruptEntryError
from ._fs import open_dir

__all__ = ["MAX_ENTRY_SIZE", "TEMP_PREFIX", "TEMP_STALE_AFTER", "FileIdent"]

FILE_MODE = 0o600
TEMP_PREFIX = "."  # no entry name starts with a dot (see check_name)
TEMP_STALE_AFTER = 600.0
"""Seconds after which a temporary file is one a killed writer left (a write takes far less)."""

MAX_ENTRY_SIZE = 16 << 20
"""Bytes: a larger entry is corrupt and never read into memory."""

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def _opened(path: str, *, action: str) -> Iterator[int | None]:
    """Open the directory ``path`` (``open_dir``), use it, close it; ``None`` if it is missing."""
    dfd = open_dir(path, create=False, action=action)
    try:
        yield dfd
    finally:
        if dfd is not None:
            os.close(dfd)


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


#: What tells one version of an entry file from another: device, inode, size,
#: modification and change times, mode (a rename over it, or any write, changes it).
FileIdent = tuple[int, int, int, int, int, int]

COMPLETE_MODE = FILE_MODE | stat.S_ISVTX
"""The mode of a record whose ADD completed: its sticky bit is the mark (no creation sets it)."""


def _ident(st: os.stat_result) -> FileIdent:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


def _complete(ident: FileIdent) -> bool:
    """Whether the record file of ``ident`` is marked complete (its ADD returned)."""
    return bool(ident[5] & stat.S_ISVTX)


def _read_at(dfd: int, name: str, path: str) -> bytes:
    """The content of the regular file ``name`` in ``dfd``; ``FileNotFoundError`` if absent (see :func:`_read_ident_at`)."""
    return _read_ident_at(dfd, name, path)[0]


def _read_ident_at(dfd: int, name: str, path: str) -> tuple[bytes, FileIdent]:
    """The content of the regular file ``name`` in ``dfd`` and its identity.

    ``FileNotFoundError`` if absent. Never follows a symlink, never blocks on a
    FIFO, never reads over ``MAX_ENTRY_SIZE``: those are ``CorruptEntryError``;
    a failure to open or read is a plain ``CacheError`` naming ``path``.
    """
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CorruptEntryError(
                f"cache entry {path} is a symbolic link; refusing to follow it"
            ) from None
        raise CacheError(f"cannot read cache entry {path}", _strerror(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptEntryError(f"cache entry {path} is not a regular file")
        size = st.st_size
        if size > MAX_ENTRY_SIZE:
            raise _too_large(path, size)
        # One read asks for one byte more than the file holds: the size it holds is the
        # whole file, read without a second read to see its end.
        data = os.read(fd, size + 1)
        if len(data) == size:
            return data, _ident(st)
        chunks = [data]
        total = len(data)
        while data:
            # Shorter, or longer (it grew meanwhile): read on to the end, bounded.
            data = chunk = os.read(fd, min(max(size, 4096), MAX_ENTRY_SIZE + 1 - total))
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_ENTRY_SIZE:
                raise _too_large(path, total)
        return b"".join(chunks), _ident(st)
    except OSError as e:
        raise CacheError(f"cannot read cache entry {path}", _strerror(e)) from None
    finally:
        os.close(fd)


def _listed(dfd: int, path: str, action: str) -> list[str]:
    """The names in the directory ``dfd`` (``path``); ``CacheError`` if it cannot be listed."""
    try:
        return os.listdir(dfd)
    except OSError as e:
        raise CacheError(f"cannot {action}: cannot list {path}", _strerror(e)) from None


def _too_large(path: str, size: int) -> CorruptEntryError:
    return CorruptEntryError(
        f"cache entry {path} is larger than {MAX_ENTRY_SIZE >> 20} MiB; not reading it",
        f"{size} bytes",
    )


def _check_cap(data: bytes, error: str) -> None:
    """Refuse (``CacheError(error)`` naming the cap) to write ``data`` larger than reads accept."""
    if len(data) > MAX_ENTRY_SIZE:
        raise CacheError(
            f"{error}: it would be larger than the cache's size cap of "
            f"{MAX_ENTRY_SIZE >> 20} MiB (no read accepts a larger file)",
            f"{len(data)} bytes",
        )


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (one call, almost always)."""
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def _fill(
    fd: int,
    data: bytes,
    *,
    dfd: int,
    name: str,
    error: str,
    fsync: bool = False,
    keep: bool = False,
) -> None:
    """Write ``data`` to the new file ``fd`` (``name`` in ``dfd``), fsync it if ``fsync``, close
    it unless ``keep``; on failure it is closed and removed, ``CacheError(error)`` raised."""
    with _removed_on_failure(dfd, name, error):
        try:
            _write_all(fd, data)  # all of it, in one call, almost always
            if fsync:
                os.fsync(fd)
        except BaseException:
            keep = False
            raise
        finally:
            if not keep:
                os.close(fd)


def _rename_or_remove(dfd: int, tmp: str, *, to: str, error: str) -> None:
    """Rename ``tmp`` to ``to`` in ``dfd`` (the new file takes its place at once); on
    failure ``tmp`` is removed and ``CacheError(error)`` raised (anything else re-raised)."""
    with _removed_on_failure(dfd, tmp, error):
        os.rename(tmp, to, src_dir_fd=dfd, dst_dir_fd=dfd)


@contextlib.contextmanager
def _removed_on_failure(dfd: int, name: str, error: str) -> Iterator[None]:
    """Remove the file ``name`` of ``dfd`` if the block fails: ``CacheError(error)`` for an
    ``OSError``, anything else re-raised."""
    try:
        yield
    except OSError as e:
        _unlink_quietly(dfd, name)
        raise CacheError(error, _strerror(e)) from None
    except BaseException:
        _unlink_quietly(dfd, name)
        raise


def _unlink_quietly(dfd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dfd)


def _rmdir_quietly(dfd: int, name: str) -> None:
    """Remove the directory ``name`` of ``dfd`` if it is empty (a writer re-creates it)."""
    try:  # noqa: SIM105 - on DEL's hot path, contextlib.suppress costs as much as the call
        os.rmdir(name, dir_fd=dfd)
    except OSError:
        pass
