"""The network namespace files, read without blocking, and the system calls on them.

Private to the library: :mod:`libcni.netns` pins and removes namespaces
with these, and the operations ask :func:`_not_netns` whether a DEL's netns
is still one (behaviour §11.3). The system calls go through :mod:`ctypes`
(not Python 3.12's ``os.setns``), so that Python 3.10 and 3.11 work the same.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import NamespaceError

_CLONE_NEWNET = 0x40000000
_NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), Linux 4.11
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in the union (40 bytes)
_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_OWN = "/proc/thread-self/ns/net"

_T = TypeVar("_T")


class _Libc:
    """``setns``, ``unshare``, ``mount`` and ``umount2`` of the C library, with ``errno``."""

    def __init__(self) -> None:
        import ctypes

        lib = ctypes.CDLL(None, use_errno=True)
        self.get_errno = ctypes.get_errno
        self.setns = lib.setns
        self.setns.argtypes = (ctypes.c_int, ctypes.c_int)
        self.unshare = lib.unshare
        self.unshare.argtypes = (ctypes.c_int,)
        self.mount = lib.mount
        self.mount.argtypes = (*(ctypes.c_char_p,) * 3, ctypes.c_ulong, ctypes.c_void_p)
        self.umount2 = lib.umount2
        self.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
        for fn in (self.setns, self.unshare, self.mount, self.umount2):
            fn.restype = ctypes.c_int


@functools.cache
def _libc() -> _Libc:
    return _Libc()


def _check(ret: int) -> None:
    if ret != 0:
        e = _libc().get_errno()
        raise OSError(e, os.strerror(e))


def _setns(fd: int) -> None:
    """Move the calling thread into the network namespace ``fd`` refers to."""
    _check(_libc().setns(fd, _CLONE_NEWNET))


def _unshare_net() -> None:
    """Move the calling thread into a new network namespace."""
    _check(_libc().unshare(_CLONE_NEWNET))


def _mount(source: str, target: str, flags: int) -> None:
    _check(_libc().mount(os.fsencode(source), os.fsencode(target), b"none", flags, None))


def _umount(target: str, lazy: bool = True) -> None:
    """Unmount ``target`` (``lazy``: detached, as ``umount -l``); a symlink is not followed."""
    flags = _UMOUNT_NOFOLLOW | (_MNT_DETACH if lazy else 0)
    _check(_libc().umount2(os.fsencode(target), flags))


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


def _open(path: str) -> int:
    """A descriptor of the file at ``path`` for reading, if it can be a namespace file.

    Never blocks: opened with ``O_PATH`` first, anything but a regular file is refused.
    """
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            what = _KINDS.get(kind, "not a regular file")
            raise NamespaceError(f"{path} is not a network namespace: it is {what}")
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(fd)


_DENIED = (errno.EPERM, errno.EACCES)


def _why(e: OSError) -> str:
    why = e.strerror or str(e)
    if e.errno in _DENIED:
        if os.geteuid() != 0:
            why += " (not root: this needs root, or CAP_SYS_ADMIN in user and mount namespaces of its own)"
        else:
            why += " (this needs CAP_SYS_ADMIN)"
    return why


def _failed(what: str, e: OSError) -> NamespaceError:
    return NamespaceError(f"{what}: {_why(e)}")


def _in_thread(fn: Callable[[], _T], undo: Callable[[_T], Any] | None = None) -> _T:
    """``fn()`` in a new thread that ends right after (its namespace dies with it).

    Interrupted, the caller still waits, applies ``undo`` to what ``fn`` returned, re-raises.
    """
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as e:  # handed to the caller
            outcome.append((False, e))

    thread = threading.Thread(target=run, name="libcni-netns", daemon=True)
    interrupted: BaseException | None = None
    thread.start()
    while True:
        try:
            thread.join()
            break
        except BaseException as e:  # the thread is still working: wait for it
            interrupted = interrupted or e
    ok, value = outcome[0]
    if interrupted is not None:
        if ok and undo is not None:
            undo(value)
        raise interrupted
    if not ok:
        raise value
    result: _T = value
    return result


def _away(go: Callable[[], None], then: Callable[[], _T]) -> _T:
    """In a helper thread: ``go()`` (into another network namespace), then ``then()``; back
    home after, so that nothing of the interpreter's thread clean-up runs elsewhere."""
    own = _open(_OWN)
    try:
        go()
        try:
            return then()
        finally:
            with contextlib.suppress(OSError):
                _setns(own)
    finally:
        os.close(own)


def _is_netns(fd: int) -> bool:
    """Whether ``fd`` refers to a network namespace."""
    import fcntl

    try:
        return fcntl.ioctl(fd, _NS_GET_NSTYPE) == _CLONE_NEWNET
    except OSError as e:
        if e.errno != errno.ENOTTY:
            return False
    # ENOTTY: no namespace, or a kernel older than 4.11: a namespace file is on nsfs.
    try:
        return os.fstat(fd).st_dev == _nsfs_dev()
    except OSError:
        return False


def _nsfs_dev() -> int:
    """The device of nsfs, where every namespace file is."""
    return os.stat(_OWN).st_dev


def _identity(path: str) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of the network namespace pinned at ``path``, or NamespaceError."""
    try:
        fd = _open(path)
    except OSError as e:
        raise _failed(f"cannot open network namespace {path}", e) from None
    try:
        st = os.fstat(fd)
        netns = _is_netns(fd)
    finally:
        os.close(fd)
    if not netns:
        raise NamespaceError(f"{path} is not a network namespace (none is mounted there)")
    return st.st_dev, st.st_ino


def _not_netns(path: str) -> str | None:
    """Why the file at ``path`` is not a network namespace, or ``None``: it is one, or it
    cannot be told (no such file, no permission). Never blocks (:func:`_open`)."""
    try:
        fd = _open(path)
    except NamespaceError as e:
        return e.msg
    except OSError:
        return None
    except ValueError:  # a NUL in it
        return f"invalid path {path!r}: a path cannot hold a NUL"
    try:
        if _is_netns(fd):
            return None
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_dev == _nsfs_dev():
        return f"{path} is not a network namespace: it is another kind of namespace"
    if st.st_size == 0:
        return f"{path} is not a network namespace: it is an empty file (a pin whose namespace is gone)"
    return f"{path} is not a network namespace: it is a regular file"


def _loopback_up(path: str) -> None:
    """Bring ``lo`` up in the network namespace at ``path``, without moving the calling thread."""
    import fcntl
    import socket
    import struct

    if not path:
        raise NamespaceError(
            "no network namespace given: the internal loopback brings lo up inside it"
        )
    try:
        fd = _open(path)
    except OSError as e:
        raise _failed(f"cannot open network namespace {path} to bring lo up", e) from None
    try:
        if not _is_netns(fd):
            raise NamespaceError(f"cannot bring lo up: {path} is not a network namespace")

        def open_socket() -> socket.socket:
            return socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

        try:
            sock = _in_thread(lambda: _away(lambda: _setns(fd), open_socket), socket.socket.close)
        except OSError as e:
            raise _failed(f"cannot enter network namespace {path} to bring lo up", e) from None
    finally:
        os.close(fd)
    with sock:
        try:
            got = fcntl.ioctl(sock, _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
            flags = struct.unpack(_IFREQ, got)[1]
            if not flags & _IFF_UP:
                fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
        except OSError as e:
            raise _failed(f"cannot bring lo up in network namespace {path}", e) from None
