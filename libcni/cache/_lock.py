"""Advisory ``flock`` locks on files of ``<cache dir>/locks/``, whose files can be removed safely.

Take: open (or create) the file, ``flock`` it, then check it is still the
file at the path (else close it and start again on the one there now).
Only a holder of the *exclusive* lock removes a lock file, while it is still
at the path. A child forked without ``exec`` closes its copies of every held
lock at once (:func:`os.register_at_fork`): it never keeps the runtime's
locks alive.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable

from .._deadline import NO_LIMIT, Deadline, poll
from ..errors import CacheError

__all__ = ["CacheLock", "acquire"]

_LOCK_FILE_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

# -- the locks of this process, for fork ---------------------------------------

_held: set[int] = set()
"""Descriptors of this process's lock files, held or being taken."""
_generation = 0
"""Bumped in a forked child: a ``CacheLock`` of an older generation is the parent's."""
_fork_guard = threading.RLock()
"""Held while a descriptor is opened and registered (or unregistered and closed),
so that a ``fork`` never happens between the two. Reentrant: a dropped lock's
``__del__`` may run inside a guarded section."""
_guard_taken_for_fork = False


def _before_fork() -> None:
    global _guard_taken_for_fork
    # Bounded: a fork from a signal handler that interrupted a guarded section
    # must not deadlock (the guarded sections are a few system calls long).
    _guard_taken_for_fork = _fork_guard.acquire(timeout=1.0)


def _after_fork_in_parent() -> None:
    global _guard_taken_for_fork
    if _guard_taken_for_fork:
        _guard_taken_for_fork = False
        _fork_guard.release()


def _after_fork_in_child() -> None:
    """Close the child's copies of the parent's lock files (never unlock them: shared)."""
    global _generation
    _generation += 1
    for fd in _held:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _after_fork_in_parent()  # the guard is released in both


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def _open_registered(name: str, dfd: int, path: str) -> int:
    with _fork_guard:
        try:
            fd = os.open(name, _LOCK_FILE_FLAGS, 0o600, dir_fd=dfd)
        except OSError as e:
            raise CacheError(f"cannot open lock file {path}", e.strerror or str(e)) from None
        _held.add(fd)
    return fd


def _close_registered(fd: int) -> None:
    with _fork_guard:
        _held.discard(fd)
        with contextlib.suppress(OSError):
            os.close(fd)


def _remove_locked(ident: tuple[int, int], path: str) -> bool:
    """Remove the lock file ``path``, locked exclusively (``ident``: its ``(st_dev, st_ino)``),
    if it is still the one there."""
    try:
        if _at_path(ident, path):
            os.unlink(path)
            return True
    except OSError:
        pass
    return False


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _at_path(ident: tuple[int, int], path: str) -> bool:
    """Whether the file of ``ident`` is the one at ``path`` (not a removed one)."""
    try:
        cur = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return (cur.st_dev, cur.st_ino) == ident


class CacheLock:
    """A held lock; :meth:`release` it, or use it as a context manager.

    Each acquisition opens its own file description, so a lock excludes
    other threads of this process as well as other processes. An exclusive
    lock taken with an ``entry`` path removes its lock file on release when
    there is no file at ``entry`` (the attachment has no cache entry): lock
    files go away with their entries.
    """

    __slots__ = ("_entry", "_fd", "_generation", "_ident", "exclusive", "path")

    def __init__(
        self,
        fd: int,
        path: str,
        exclusive: bool,
        entry: str | None = None,
        ident: tuple[int, int] | None = None,
    ) -> None:
        self._fd = fd
        self._ident = ident if ident is not None else _ident(fd)
        self._generation = _generation
        self._entry = entry if exclusive else None
        self.path = path
        """The lock file."""
        self.exclusive = exclusive
        """``True`` for an exclusive lock, ``False`` for a shared one."""

    @property
    def held(self) -> bool:
        """Whether the lock is still held (not yet released, nor inherited through ``fork``)."""
        return self._fd >= 0 and self._generation == _generation

    def fileno(self) -> int:
        """The lock file's descriptor (-1 once released): a plugin of an ADD inherits it."""
        return self._fd if self.held else -1

    def release(self) -> None:
        """Release the lock. Releasing twice is harmless."""
        self._release()

    def _release(self, remove: bool = False) -> bool:
        """Release the lock; whether its lock file was removed (exclusive, and ``remove`` or its
        ``entry`` missing)."""
        fd, self._fd = self._fd, -1
        if fd < 0 or self._generation != _generation:
            return False  # released, or the parent's lock (its copy was closed at fork)
        removed = False
        try:
            if self.exclusive and (remove or self._orphan()):
                removed = _remove_locked(self._ident, self.path)
            # Unlock explicitly: a child forked by other means than os.fork
            # may still share the file description.
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            _close_registered(fd)
        return removed

    def _orphan(self) -> bool:
        """Whether this attachment lock has no entry (a failure to tell says no)."""
        if self._entry is None:
            return False
        try:
            os.lstat(self._entry)
        except FileNotFoundError:
            return True
        except OSError:
            pass
        return False

    def __enter__(self) -> CacheLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # A lock dropped without release() must not stay held (nor leak its fd).
        # (Errors are possible only at interpreter shutdown.)
        if getattr(self, "_fd", -1) >= 0:
            with contextlib.suppress(Exception):
                self.release()

    def __repr__(self) -> str:
        mode = "exclusive" if self.exclusive else "shared"
        state = "held" if self.held else "released"
        return f"<CacheLock {mode} {state} {self.path!r}>"


def _try_flock(fd: int, op: int) -> bool | None:
    """One ``flock`` of ``fd`` that does not wait: ``True``, or ``None`` if it is busy."""
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return None


def _flock(fd: int, op: int, deadline: Deadline | None, wait: bool, path: str) -> bool:
    """``flock`` ``fd``: ``wait`` for it, try until ``deadline`` (the shared back-off of
    ``libcni._deadline``), or try once; whether it got it."""
    try:
        if wait:
            fcntl.flock(fd, op)
            return True
        if deadline is None:
            return _try_flock(fd, op) is not None
        return poll(lambda: _try_flock(fd, op), deadline) is not None
    except OSError as e:  # (a busy lock is a BlockingIOError, caught by _try_flock)
        raise CacheError(f"cannot lock {path}", e.strerror or str(e)) from None


def acquire(
    dir_path: str,
    name: str,
    *,
    subdir: str = "",
    exclusive: bool,
    timeout: float | None,
    dirs: Callable[[str], int],
    entry: str | None = None,
) -> CacheLock | None:
    """Lock ``<dir_path>/[<subdir>/]<name>``; ``None`` if still busy after ``timeout``.

    ``timeout`` 0 (or less) tries once; a number waits at most that long, trying
    again after the pauses of ``libcni._deadline.LOCK_WAIT``; ``None`` or more
    than ``NO_LIMIT`` waits in ``flock``. ``dirs(action)`` gives the checked,
    kept descriptor of the lock file's directory (created as needed, 0700;
    asked again at each try); the file is created 0600, never through a
    symlink. ``entry``: see :class:`CacheLock`.
    """
    base = os.path.join(dir_path, subdir) if subdir else dir_path
    path = os.path.join(base, name)
    op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    wait = timeout is None or timeout > NO_LIMIT
    deadline = Deadline(timeout) if timeout is not None and 0 < timeout <= NO_LIMIT else None
    while True:
        fd = _open_registered(name, dirs(f"lock {path}"), path)
        try:
            if not _flock(fd, op, deadline, wait, path):
                _close_registered(fd)
                return None
            ident = _ident(fd)
            if _at_path(ident, path):
                return CacheLock(fd, path, exclusive, entry, ident)
        except OSError as e:
            _close_registered(fd)
            raise CacheError(f"cannot lock {path}", e.strerror or str(e)) from None
        except BaseException:  # KeyboardInterrupt while waiting: do not leak the fd
            _close_registered(fd)
            raise
        # The file was removed since it was opened (its last holder cleaned it
        # up, or an operator did): take the lock of the file now at the path.
        _close_registered(fd)
