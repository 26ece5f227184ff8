"""File-system helpers of the cache: name checks and safe directory handles."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import weakref

from ..errors import (
    CODE_INVALID_CONFIG,
    CODE_INVALID_ENV,
    CODE_UNKNOWN_CONTAINER,
    CacheError,
    ValidationError,
)

__all__ = [
    "NAME_MAX",
    "DirFds",
    "attachment_name",
    "check_name",
    "fit_name",
    "open_dir",
    "open_subdir",
    "untrusted",
]

NAME_MAX = 255  # bytes in one file name (Linux NAME_MAX)
DIR_MODE = 0o700

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_OR_WRITABLE = stat.S_IFMT(0o177777) | 0o022  # the file type and the group/other write bits

_CODES = {
    "network name": CODE_INVALID_CONFIG,
    "container ID": CODE_UNKNOWN_CONTAINER,
    "interface name": CODE_INVALID_ENV,
}


def check_name(value: object, what: str) -> str:
    """``value`` if it is usable as one part of a cache file name, else ``ValidationError``:
    a non-empty string, UTF-8 encodable, without ``/`` or NUL, not ``.`` or ``..``; a network
    name not starting with ``.`` (the cache's temporary files do)."""
    if not isinstance(value, str):
        raise ValidationError(
            f"invalid {what} for the cache: not a string", repr(value)[:200], code=CODE_INVALID_ENV
        )
    code, problem = _CODES.get(what, CODE_INVALID_ENV), ""
    if not value:
        problem = "must not be empty"
    elif not value.isascii() and not _encodable(value):  # a lone surrogate ("x\ud800")
        problem = "not encodable as UTF-8 (a lone surrogate)"
    elif "/" in value or "\0" in value or value in (".", ".."):
        problem = "must not be '.', '..' or contain '/' or NUL"
        code = CODE_INVALID_CONFIG if what == "network name" else CODE_INVALID_ENV
    elif what == "network name" and value.startswith("."):
        problem = "must not start with '.'"
    if problem:
        shown = repr(value)[:300] if value else ""
        raise ValidationError(f"invalid {what} for the cache: {problem}", shown, code=code)
    return value


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fit_name(name: str, what: str) -> str:
    """``name`` if it fits in one file name (``NAME_MAX`` bytes), else ``ValidationError``."""
    if len(name) * 4 > NAME_MAX:  # only then can the encoded form be too long
        try:
            size = len(os.fsencode(name))
        except UnicodeError:
            raise ValidationError(
                f"invalid {what} for the cache: not encodable as a file name", repr(name)[:300]
            ) from None
        if size > NAME_MAX:
            raise ValidationError(
                f"invalid {what} for the cache: the file name would be {size} bytes "
                f"(at most {NAME_MAX})",
                repr(name)[:300],
            )
    return name


def attachment_name(network: str, container_id: str, ifname: str) -> str:
    """``<network>-<containerID>-<ifname>`` after checking each part (``ValidationError``)."""
    name = (
        f"{check_name(network, 'network name')}-"
        f"{check_name(container_id, 'container ID')}-"
        f"{check_name(ifname, 'interface name')}"
    )
    return fit_name(name, "attachment (network, container ID, interface name)")


def _fsync_dir(path: str) -> None:
    """Best effort: make a new directory entry in ``path`` durable."""
    with contextlib.suppress(OSError):
        fd = os.open(path or ".", _DIR_FLAGS & ~os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _mkdirs(path: str) -> None:
    """Create ``path`` and its missing parents, each with mode 0700 and fsynced in its parent."""
    p = path.rstrip("/") or "/"
    try:
        os.mkdir(p, DIR_MODE)
    except FileExistsError:
        return
    except FileNotFoundError:
        parent = os.path.dirname(p)
        if not parent or parent == p:
            raise
        _mkdirs(parent)
        try:
            os.mkdir(p, DIR_MODE)
        except FileExistsError:
            return
    _fsync_dir(os.path.dirname(p))


def _open_dir_error(e: OSError, path: str, action: str) -> CacheError:
    """The error of a directory of the cache that could not be opened (a symlink or a
    file there: :func:`_not_dir_error`)."""
    if e.errno in (errno.ENOTDIR, errno.ELOOP):
        return _not_dir_error(path, action)
    return CacheError(f"cannot {action}: cannot open {path}", e.strerror or str(e))


def _create_dir_error(e: OSError, path: str, action: str) -> CacheError:
    """The error of a directory of the cache that could not be created."""
    return CacheError(f"cannot {action}: cannot create directory {path}", e.strerror or str(e))


def _not_dir_error(path: str, action: str) -> CacheError:
    try:
        problem = untrusted(os.lstat(path), path, action)
    except OSError:
        problem = None
    return problem or CacheError(f"cannot {action}: {path} is not a directory")


def _checked(fd: int, path: str, action: str) -> os.stat_result:
    """The status of the directory ``fd`` if it is trusted (:func:`untrusted`); else it is
    closed and ``CacheError`` names ``path``: a directory another user planted, or may
    write into, could hold entries or lock files of theirs."""
    try:
        st = os.fstat(fd)
    except OSError as e:  # pragma: no cover - fstat of an open descriptor
        os.close(fd)
        raise CacheError(f"cannot {action}: cannot stat {path}", e.strerror or str(e)) from None
    problem = untrusted(st, path, action)
    if problem is not None:
        os.close(fd)
        raise problem
    return st


def untrusted(st: os.stat_result, path: str, action: str) -> CacheError | None:
    """Why the directory whose (``lstat``) status is ``st`` must not be used, or ``None``: it
    must be a directory (no symlink), owned by the euid, writable by no one else."""
    if st.st_mode & _DIR_OR_WRITABLE == stat.S_IFDIR and st.st_uid == os.geteuid():
        return None  # the usual case, at once
    if not stat.S_ISDIR(st.st_mode):
        if stat.S_ISLNK(st.st_mode):
            return CacheError(f"cannot {action}: {path} is a symbolic link; refusing to follow it")
        return CacheError(f"cannot {action}: {path} is not a directory")
    euid = os.geteuid()
    if st.st_uid != euid:
        return CacheError(
            f"cannot {action}: {path} is owned by uid {st.st_uid}, not by this process's "
            f"uid {euid}; refusing to use it"
        )
    if st.st_mode & 0o022:
        return CacheError(
            f"cannot {action}: {path} is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing to use it"
        )
    return None


def open_dir(path: str, *, create: bool, action: str) -> int | None:
    """A checked descriptor of the directory ``path`` (:func:`untrusted`), never through a
    symlink; created (with its parents, 0700) if ``create``, else ``None`` when missing.
    ``CacheError`` says what ``action`` failed."""
    opened = _open_checked(path, create=create, action=action)
    return None if opened is None else opened[0]


def _open_checked(path: str, *, create: bool, action: str) -> tuple[int, os.stat_result] | None:
    """:func:`open_dir`, with the status of the directory opened."""
    for _ in range(2):
        try:
            fd = os.open(path, _DIR_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as e:
            raise _open_dir_error(e, path, action) from None
        else:
            return fd, _checked(fd, path, action)
        try:
            _mkdirs(path)
        except OSError as e:
            raise _create_dir_error(e, path, action) from None
    raise CacheError(f"cannot {action}: {path} vanished while being created")


class DirFds:
    """Descriptors of a cache's directories, kept open from one operation to the next.

    Each use checks with one ``lstat`` that the path is still the directory
    opened (device, inode) and still trusted, else opens it anew: a directory
    replaced or planted at the path is noticed at the next use, and operations
    go *through* the descriptor (``dir_fd``). Never list through one (the
    offset is shared): open the directory anew. A replaced descriptor stays
    open until the cache object goes; a forked child drops its copies.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, int, int]] = {}  # path -> (fd, st_dev, st_ino)
        self._replaced: list[int] = []
        self._lock = threading.Lock()
        _ALL.add(self)

    def fd(self, path: str, *, create: bool, action: str) -> int | None:
        """The checked descriptor of the directory ``path`` (``open_dir``'s rules); ``None`` when
        it is missing and not ``create``."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            if e.errno == errno.ENOTDIR:
                raise _not_dir_error(path, action) from None
            raise CacheError(f"cannot {action}: cannot open {path}", e.strerror or str(e)) from None
        if st is not None:
            kept = self._still(path, st)
            if kept is not None:
                return kept
            problem = untrusted(st, path, action)
            if problem is not None:
                raise problem
        elif not create:
            return None
        opened = _open_checked(path, create=create, action=action)
        if opened is None:
            return None
        return self._keep(path, *opened)

    def subdir(self, parent_fd: int, parent: str, name: str, *, action: str) -> int:
        """The checked descriptor of the directory ``name`` in ``parent`` (created 0700 if
        missing), checked with one ``lstat`` *through* ``parent_fd`` (``parent``'s, from
        :meth:`fd`), never through the path of ``parent``."""
        path = f"{parent}/{name}"
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError:
            st = None  # missing, or anything else: open_subdir says what
        kept = None if st is None else self._still(path, st)
        if kept is not None:
            return kept
        fd = open_subdir(parent_fd, name, path, action=action)
        assert fd is not None  # (created)
        try:
            fst = os.fstat(fd)
        except OSError as e:
            os.close(fd)
            raise CacheError(f"cannot {action}: cannot open {path}", e.strerror or str(e)) from None
        return self._keep(path, fd, fst)

    def _still(self, path: str, st: os.stat_result) -> int | None:
        """The descriptor kept for ``path`` if ``st`` (its ``lstat``) is still that directory and
        still trusted; else ``None``."""
        held = self._held.get(path)
        if (
            held is not None
            and held[2] == st.st_ino
            and held[1] == st.st_dev
            and st.st_mode & _DIR_OR_WRITABLE == stat.S_IFDIR
            and st.st_uid == os.geteuid()
        ):
            return held[0]
        return None

    def _keep(self, path: str, fd: int, fst: os.stat_result) -> int:
        """Keep ``fd`` (whose status is ``fst``) for ``path``; the one it replaces stays open."""
        with self._lock:
            old = self._held.get(path)
            self._held[path] = (fd, fst.st_dev, fst.st_ino)
            if old is not None:
                self._replaced.append(old[0])
        return fd

    def close(self) -> None:
        """Close every descriptor (the cache object is going)."""
        with self._lock:
            fds = [held[0] for held in self._held.values()] + self._replaced
            self._held.clear()
            self._replaced.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _forget_in_child(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it
        self.close()


_ALL: weakref.WeakSet[DirFds] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child opens them anew at its first use: it may close the numbers it inherited
    # (a daemon does) and reuse them for other files.
    for fds in list(_ALL):
        fds._forget_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def open_subdir(
    parent_fd: int, name: str, path: str, *, action: str, create: bool = True
) -> int | None:
    """A checked descriptor of the directory ``name`` in ``parent_fd`` (``path``, for messages),
    never through a symlink; created 0700 if missing, or ``None`` without ``create``."""
    for _ in range(2):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            _checked(fd, path, action)
            return fd
        except FileNotFoundError:
            if not create:
                return None
        except OSError as e:
            raise _open_dir_error(e, path, action) from None
        try:
            os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
        except FileExistsError:
            continue
        except OSError as e:
            raise _create_dir_error(e, path, action) from None
        with contextlib.suppress(OSError):
            os.fsync(parent_fd)
    raise CacheError(f"cannot {action}: {path} vanished while being created")
