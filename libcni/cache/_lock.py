"""Advisory ``flock`` locks on files of ``<cache dir>/locks/``."""

from __future__ import annotations

import contextlib
import fcntl
import os
from types import TracebackType

from ..errors import CacheError
from ._fs import open_dir, open_subdir

__all__ = ["CacheLock", "acquire"]

_LOCK_FILE_FLAGS = (
    os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)


class CacheLock:
    """A held lock; :meth:`release` it, or use it as a context manager.

    Each acquisition opens its own file description, so a lock excludes
    other threads of this process as well as other processes.
    """

    __slots__ = ("_fd", "exclusive", "path")

    def __init__(self, fd: int, path: str, exclusive: bool) -> None:
        self._fd = fd
        self.path = path
        """The lock file."""
        self.exclusive = exclusive
        """``True`` for an exclusive lock, ``False`` for a shared one."""

    @property
    def held(self) -> bool:
        """Whether the lock is still held (not yet released)."""
        return self._fd >= 0

    def release(self) -> None:
        """Release the lock. Releasing twice is harmless."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            # Unlock explicitly: a forked child may share the file description.
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> CacheLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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


def acquire(
    dir_path: str, name: str, *, subdir: str = "", exclusive: bool, blocking: bool
) -> CacheLock | None:
    """Lock ``<dir_path>/[<subdir>/]<name>``; ``None`` if busy and not ``blocking``.

    The directories (0700) and the lock file (0600) are created as needed;
    none of them is reached through a symlink.
    """
    base = os.path.join(dir_path, subdir) if subdir else dir_path
    path = os.path.join(base, name)
    action = f"lock {path}"
    dfd = open_dir(dir_path, create=True, action=action)
    if dfd is None:  # pragma: no cover - open_dir(create=True) never returns None
        raise CacheError(f"cannot {action}: {dir_path} is missing")
    try:
        if subdir:
            parent, dfd = dfd, -1
            try:
                dfd = open_subdir(parent, subdir, base, action=action)
            finally:
                os.close(parent)
        try:
            fd = os.open(name, _LOCK_FILE_FLAGS, 0o600, dir_fd=dfd)
        except OSError as e:
            raise CacheError(f"cannot open lock file {path}", e.strerror or str(e)) from None
    finally:
        if dfd >= 0:
            os.close(dfd)
    op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    if not blocking:
        op |= fcntl.LOCK_NB
    try:
        fcntl.flock(fd, op)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as e:
        os.close(fd)
        raise CacheError(f"cannot lock {path}", e.strerror or str(e)) from None
    except BaseException:  # KeyboardInterrupt while waiting: do not leak the fd
        os.close(fd)
        raise
    return CacheLock(fd, path, exclusive)
