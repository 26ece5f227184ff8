"""The kernel's change notification (inotify), shared by every configuration watcher.

One inotify instance serves the whole process (the kernel allows 128 per
user by default, so one per manager would not do with many managers); each
:class:`~libcni.manager._config.ConfigWatcher` subscribes an :class:`Inbox`
to the directories it watches. Nothing runs in the background: the queue is
read without blocking (:meth:`Notifier.drain`) at the start of each check,
and what was read is handed to the inboxes of the directories concerned.

What can go wrong, and what the watchers do then (the stat scan,
``libcni/manager/_config.py``):

- no instance (``EMFILE``, ``ENFILE``, ``ENOMEM``, no inotify at all) or a
  watch that cannot be added (``ENOSPC``: ``max_user_watches`` reached):
  :func:`notifier` returns ``None`` / :meth:`Notifier.watch` raises
  ``OSError``, and the watcher falls back to the stat scan;
- the kernel's queue overflowed (``IN_Q_OVERFLOW``: events were lost): every
  inbox is marked ``overflow`` and its watcher re-reads everything once;
- a fork: the child must not read the parent's queue (it would steal its
  events), so the child closes its copy of the descriptor
  (``os.register_at_fork``; a pid check as well) and its watchers start over
  with an instance of their own. The descriptor is close-on-exec.

A watcher whose manager is garbage collected gives its watches back
(``weakref.finalize`` → :meth:`Notifier.release`); the descriptor is closed
when no watch is left.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import threading
from typing import Any

__all__ = [
    "DIR_EVENTS",
    "IN_IGNORED",
    "IN_ISDIR",
    "IN_Q_OVERFLOW",
    "Inbox",
    "Notifier",
    "notifier",
]

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: What a watched directory reports: its names created, deleted, renamed in or
#: out; its files written (also through ``mmap``: the close after writing),
#: truncated or changed in mode; the directory itself removed or renamed.
DIR_EVENTS = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_READ_SIZE = 1 << 16


class Inbox:
    """What one watcher was told since it last looked: ``(wd, mask, name)`` events."""

    __slots__ = ("events", "overflow")

    def __init__(self) -> None:
        self.events: list[tuple[int, int, str]] = []
        self.overflow = False


class _LibC:
    """``inotify_init1``, ``inotify_add_watch`` and ``inotify_rm_watch`` through ctypes."""

    def __init__(self) -> None:
        import ctypes  # here: only the manager's first watcher needs it

        libc = ctypes.CDLL(None, use_errno=True)
        self._init1 = libc.inotify_init1
        self._init1.argtypes = [ctypes.c_int]
        self._init1.restype = ctypes.c_int
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._add.restype = ctypes.c_int
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        self._rm.restype = ctypes.c_int
        self._errno = ctypes.get_errno
        # read(2) through PyDLL: the GIL stays held. The descriptor never
        # blocks, and a check made by every operation must not hand the GIL
        # to another thread (each hand-off costs a context switch).
        self._read = ctypes.PyDLL(None, use_errno=True).read
        self._read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        self._read.restype = ctypes.c_ssize_t
        self._buffer = ctypes.create_string_buffer(_READ_SIZE)
        self._address = ctypes.addressof(self._buffer)
        self._raw = ctypes.string_at

    def _check(self, value: int, what: str, path: str | None = None) -> int:
        if value < 0:
            code = self._errno()
            raise OSError(code, f"{what}: {os.strerror(code)}", path)
        return value

    def init(self) -> int:
        return self._check(self._init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")

    def add_watch(self, fd: int, path: str, mask: int) -> int:
        return self._check(self._add(fd, os.fsencode(path), mask), "inotify_add_watch", path)

    def read(self, fd: int) -> bytes | None:
        """What the queue holds (``b""``: nothing), ``None`` on an error other than EAGAIN."""
        n = self._read(fd, self._address, _READ_SIZE)
        if n > 0:
            return bytes(self._raw(self._address, n))
        if n == 0:  # pragma: no cover - never at EOF
            return b""
        code = self._errno()
        if code in (errno.EAGAIN, errno.EINTR):
            return b""
        return None

    def rm_watch(self, fd: int, wd: int) -> None:
        self._rm(fd, wd)  # EINVAL: the kernel dropped it already (IN_IGNORED)


_libc: _LibC | None = None
_lock = threading.Lock()
_current: Notifier | None = None
#: Set by a test to make inotify unavailable (as ``EMFILE`` would).
DISABLED = False


class Notifier:
    """The process's inotify instance: watches shared by the inboxes that asked for them."""

    def __init__(self, libc: _LibC, fd: int) -> None:
        self._libc = libc
        self.fd = fd
        self.pid = os.getpid()
        self.closed = False
        self.users = 0  # watchers subscribed (the descriptor is closed when none is left)
        self._inboxes: dict[int, dict[Inbox, int]] = {}  # wd -> inbox -> how many times
        # From finalizers, done under the lock (at once, or at the next drain).
        self._released: list[tuple[Inbox, list[int]]] = []

    # Every method but release() is called with _lock held.

    def watch(self, path: str, inbox: Inbox, mask: int = DIR_EVENTS) -> int:
        """Watch the directory ``path`` for ``inbox``; its watch descriptor (``OSError`` if not)."""
        wd = self._libc.add_watch(self.fd, path, mask)
        users = self._inboxes.setdefault(wd, {})
        users[inbox] = users.get(inbox, 0) + 1
        return wd

    def unwatch(self, wd: int, inbox: Inbox) -> None:
        """``inbox`` no longer needs ``wd`` (the watch is removed when nobody does)."""
        users = self._inboxes.get(wd)
        if users is None or inbox not in users:
            return
        users[inbox] -= 1
        if users[inbox] <= 0:
            del users[inbox]
        if not users:
            del self._inboxes[wd]
            self._libc.rm_watch(self.fd, wd)

    def release(self, inbox: Inbox, wds: list[int]) -> None:
        """``inbox``'s watcher is gone: give back its watches ``wds``, and the descriptor when
        it was the last watcher. From a finalizer (any thread, maybe inside a drain): done
        now if the lock is free, else at the next drain."""
        self._released.append((inbox, wds))
        if _lock.acquire(blocking=False):
            try:
                self._collect()
            finally:
                _lock.release()

    def _collect(self) -> None:
        while self._released:
            inbox, wds = self._released.pop()
            self.users -= 1
            if not self.closed:
                for wd in wds:
                    self.unwatch(wd, inbox)
        if self.users <= 0 and not self.closed:
            self.close()

    def close(self) -> None:
        global _current
        if not self.closed:
            self.closed = True
            self._inboxes.clear()
            if self.pid == os.getpid():
                os.close(self.fd)
        if _current is self:
            _current = None

    def drain(self) -> None:
        """Read every pending event (without waiting) and hand each to its inboxes."""
        self._collect()
        if self.closed:
            return
        while True:
            data = self._libc.read(self.fd)
            if data is None:  # pragma: no cover - no such error is known
                self._overflowed()
                return
            if not data:
                return
            self._dispatch(data)
            if len(data) <= _READ_SIZE - 4096:  # the queue is empty: save a failing read
                return

    def _overflowed(self) -> None:
        for users in self._inboxes.values():
            for inbox in users:
                inbox.overflow = True

    def _dispatch(self, data: bytes) -> None:
        at = 0
        while at < len(data):
            wd, mask, _, size = _HEADER.unpack_from(data, at)
            at += _HEADER.size
            name = os.fsdecode(data[at : at + size].rstrip(b"\0"))
            at += size
            if mask & IN_Q_OVERFLOW:
                self._overflowed()
                continue
            users = self._inboxes.get(wd)
            if not users:
                continue
            for inbox in users:
                inbox.events.append((wd, mask, name))
            if mask & IN_IGNORED:  # the kernel removed the watch (directory gone)
                del self._inboxes[wd]


def _forget_in_child() -> None:
    """After ``fork``, in the child: never read the parent's queue."""
    global _current, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    current, _current = _current, None
    if current is not None:
        current.closed = True
        with contextlib.suppress(OSError):
            os.close(current.fd)


os.register_at_fork(after_in_child=_forget_in_child)


def notifier() -> Notifier | None:
    """The process's notifier (created at the first call), ``None`` when inotify cannot be had."""
    global _current, _libc
    current = _current
    if current is not None and not current.closed and current.pid == os.getpid():
        return current
    if DISABLED:
        return None
    try:
        if _libc is None:
            _libc = _LibC()
        fd = _libc.init()
    except (OSError, AttributeError):  # EMFILE, ENFILE, ENOMEM, ENOSYS; no such function
        return None
    _current = Notifier(_libc, fd)
    return _current


def lock() -> Any:
    """The lock held while reading the queue or changing watches."""
    return _lock
