"""Network namespaces: create, pin, enter and remove them (Linux).

A container runtime creates a network namespace for each container before
the networks are set up in it, and removes it after they are torn down. A
namespace lives as long as a process is in it or a file pins it; as
``ip netns add`` does, this module pins each one by a bind mount of the
namespace onto an empty file, ``<dir>/<name>`` (``/run/netns/<name>`` by
default), so that it can be given to the plugins as a path::

    from libcni import netns

    ns = netns.create()              # /run/netns/cni-<uuid>
    try:
        ...                          # manager.setup(container_id, ns.path) ...
    finally:
        ns.remove()

Neither the calling thread nor the process ever changes namespace: a new
namespace is made by a short-lived helper thread, which then ends, and
:meth:`NetNS.enter` moves the calling thread only for the ``with`` block.
When a step fails half-way, what was done is undone (no file and no mount
stay) and :class:`~libcni.errors.NamespaceError` says what failed and why.

Creating, pinning and removing need ``CAP_SYS_ADMIN``: root, or a process
that owns its user and mount namespaces (as rootless Podman does), with a
``dir`` it may write to.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterator
from types import TracebackType

from ._nspath import (
    _DENIED,
    _OWN,
    _away,
    _failed,
    _identity,
    _in_thread,
    _mount,
    _nsfs_dev,
    _open,
    _setns,
    _umount,
    _unshare_net,
    _why,
)
from ._nspath import _loopback_up as _loopback_up  # the manager's internal loopback
from ._nspath import _not_netns as _not_netns  # the operations' DEL (behaviour §11.3)
from .errors import NamespaceError

__all__ = ["DEFAULT_DIR", "NetNS", "create", "from_pid"]

#: Where namespaces are pinned unless told otherwise (as ``ip netns``).
DEFAULT_DIR = "/run/netns"

_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_SHARED = 1 << 20


def _new_namespace() -> int:
    """A descriptor of a new network namespace, made by a helper thread."""
    return _in_thread(lambda: _away(_unshare_net, lambda: _open(_OWN)), undo=os.close)


def _check_name(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a network namespace name must be a str, not {type(name).__name__}")
    try:
        size = len(os.fsencode(name))
    except UnicodeError:
        size = -1
    if not name or name in (".", "..") or "/" in name or "\0" in name or not 0 < size <= 255:
        raise NamespaceError(
            f"invalid network namespace name {name!r}: it must be one file name "
            "(1 to 255 bytes, no '/', not '.' or '..')"
        )
    return name


def _where(name: str | None, dir: str | os.PathLike[str]) -> tuple[str, str]:
    """The absolute directory and the path of the pin ``dir/name`` (``cni-<uuid>`` when no name)."""
    name = f"cni-{uuid.uuid4()}" if name is None else _check_name(name)
    where = _abspath(dir)
    return where, os.path.join(where, name)


def _abspath(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute; a NUL in it (no path has one) is a ``NamespaceError``."""
    where = os.path.abspath(path)
    if "\0" in where:
        raise NamespaceError(f"invalid path {where!r}: a path cannot hold a NUL")
    return where


def _prepare(dir: str) -> Callable[[], None]:
    """Make ``dir`` when needed, and make it a shared mount point, as ``ip netns add`` does.

    Shared, so that a removal unmounts the namespace in every mount namespace
    with a copy of the mount. Returns what undoes this when what follows fails.
    """
    made: list[str] = []
    d = os.path.abspath(dir)
    while not os.path.lexists(d) and d != os.path.dirname(d):
        made.append(d)
        d = os.path.dirname(d)
    bound: list[bool] = []

    def undo() -> None:
        if bound:  # not lazily: this fails (EBUSY) while a namespace is pinned there
            with contextlib.suppress(OSError):
                _umount(dir, lazy=False)
        for d in made:  # the deepest first; fails while not empty
            with contextlib.suppress(OSError):
                os.rmdir(d)

    try:
        with _prepare_lock:  # else two threads could both bind dir onto itself
            _make_shared(dir, bound)
    except BaseException:
        undo()
        raise
    return undo


_prepare_lock = threading.Lock()


def _make_shared(dir: str, bound: list[bool]) -> None:
    """:func:`_prepare`'s mounts; ``bound`` gets an item once dir is bound onto itself."""
    try:
        os.makedirs(dir, mode=0o755, exist_ok=True)
    except OSError as e:
        raise _failed(f"cannot make the network namespace directory {dir}", e) from None
    try:
        _mount("", dir, _MS_SHARED | _MS_REC)
        return
    except OSError as e:
        if e.errno != errno.EINVAL:  # EINVAL: not a mount point yet
            raise _failed(f"cannot make {dir} a shared mount point", e) from None
    try:
        _mount(dir, dir, _MS_BIND | _MS_REC)
    except OSError as e:
        raise _failed(f"cannot make {dir} a mount point (bind mount onto itself)", e) from None
    bound.append(True)
    try:
        _mount("", dir, _MS_SHARED | _MS_REC)
    except OSError as e:
        raise _failed(f"cannot make {dir} a shared mount point", e) from None


def _stale_pin(path: str) -> os.stat_result | None:
    """The file at ``path`` if it is a stale pin (an empty file of the directory's own file
    system: no namespace is mounted on it), else ``None``."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if _is_empty_file(st) and st.st_dev == os.lstat(os.path.dirname(path)).st_dev:
            return st
    return None


_FileIdent = tuple[int, int, int]


def _file_ident(st: os.stat_result) -> _FileIdent:
    """A file's identity: device and inode, and its change time (an inode number is
    reused at once by some file systems, ext4)."""
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _pin_file(path: str, what: str) -> tuple[_FileIdent, bool]:
    """The empty file to mount a namespace on: made now (``O_EXCL``), or a stale pin of that
    name; its identity (:func:`_file_ident`) and whether it was there before."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0)
    except FileExistsError:
        stale = _stale_pin(path)
        if stale is None:
            raise NamespaceError(
                f"cannot {what} {path}: the name is taken (a file of that name exists)"
            ) from None
        return _file_ident(stale), True
    except OSError as e:
        raise _failed(f"cannot {what} {path}: cannot create the file", e) from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return _file_ident(st), False


def _pin(ns_fd: int, path: str, what: str) -> tuple[tuple[int, int], _FileIdent]:
    """Pin the namespace ``ns_fd`` at ``path`` (a file made now or a stale pin); the identities
    of the namespace and of the file under the mount. On failure, nothing stays."""
    st = os.fstat(ns_fd)
    ident = st.st_dev, st.st_ino
    file, reused = _pin_file(path, what)
    try:  # the file is ours from here on
        try:
            _mount(f"/proc/self/fd/{ns_fd}", path, _MS_BIND)
        except OSError as e:
            raise _failed(f"cannot {what} {path}: bind mount failed", e) from None
        pinned = os.stat(path)
        if (pinned.st_dev, pinned.st_ino) != ident:
            raise NamespaceError(f"cannot {what} {path}: another file is mounted there")
    except BaseException:
        # Whether the mount is there is told by what the path shows (interrupted or not).
        with contextlib.suppress(OSError):
            shown = os.lstat(path)
            if (shown.st_dev, shown.st_ino) == ident:
                _umount(path)
        if not reused:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return ident, file


class NetNS:
    """A network namespace pinned at :attr:`path` (a bind mount on an empty file).

    ``NetNS(path)`` opens one pinned already (by ``ip netns add``, by a
    runtime before it restarted); :func:`create` and :func:`from_pid` make
    new ones. Used as a context manager, the namespace is removed at the end
    of the ``with`` block.
    """

    __slots__ = ("_file", "_ident", "_removed", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        #: The file that pins the namespace; give it to ``setup`` and the plugins.
        self.path: str = _abspath(path)
        self._ident = _identity(self.path)
        # The file under the mount, when this module made the pin (see remove()).
        self._file: _FileIdent | None = None
        self._removed = False

    @classmethod
    def _pinned(cls, path: str, ident: tuple[int, int], file: _FileIdent) -> NetNS:
        ns = cls.__new__(cls)
        ns.path, ns._ident, ns._file, ns._removed = path, ident, file, False
        return ns

    def __repr__(self) -> str:
        state = " (removed)" if self._removed else ""
        return f"<NetNS {self.path}{state}>"

    @property
    def name(self) -> str:
        """The file name of :attr:`path` (what ``ip -n NAME`` takes for ``/run/netns/NAME``)."""
        return os.path.basename(self.path)

    def closed(self) -> bool:
        """Whether the namespace is no longer pinned at :attr:`path` (removed, by anyone)."""
        if self._removed:
            return True
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self._ident

    def remove(self) -> None:
        """Unmount (detached, as ``umount -l``) and delete :attr:`path`; idempotent.

        Only this pin is removed: a file or namespace someone else put at the
        path since is left alone. The namespace itself ends when nothing else
        holds it (a process in it, another mount, an open descriptor).
        """
        if self._removed:
            return
        st = self._lstat()
        if st is not None and (st.st_dev, st.st_ino) == self._ident:
            try:
                _umount(self.path)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.ENOENT):
                    raise _failed(f"cannot unmount network namespace {self.path}", e) from None
            st = self._lstat()
            any_file = self._file is None  # NetNS(path): the empty file the unmount shows
        else:
            any_file = False
        if (
            st is not None
            and (any_file or _file_ident(st) == self._file)
            and _is_empty_file(st)
            and st.st_dev != _nsfs_dev()
        ):
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise _failed(f"cannot delete {self.path}", e) from None
        self._removed = True

    def _lstat(self) -> os.stat_result | None:
        try:
            return os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _failed(f"cannot remove network namespace {self.path}", e) from None

    @contextlib.contextmanager
    def enter(self) -> Iterator[None]:
        """Move the calling thread into the namespace for the ``with`` block, then back.

        Only the calling thread moves (processes started in the block start in
        the namespace); the block must not ``await`` another task's work.
        """
        try:
            own = _open(_OWN)
        except OSError as e:
            raise _failed("cannot open the calling thread's network namespace", e) from None
        try:
            target = self._open()
            try:
                _setns(target)
            except OSError as e:
                raise _failed(f"cannot enter network namespace {self.path}", e) from None
            finally:
                os.close(target)
            try:
                yield
            finally:
                try:
                    _setns(own)
                except OSError as e:
                    raise NamespaceError(
                        f"cannot return the thread from network namespace {self.path} to "
                        f"its own: {_why(e)}; the thread is still in {self.path}"
                    ) from None
        finally:
            os.close(own)

    def _open(self) -> int:
        """A descriptor of the namespace, checked to be this one."""
        if self._removed:
            raise NamespaceError(f"network namespace {self.path} was removed")
        try:
            fd = _open(self.path)
        except OSError as e:
            raise _failed(f"cannot open network namespace {self.path}", e) from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._ident:
            os.close(fd)
            raise NamespaceError(f"network namespace {self.path} is no longer pinned there")
        return fd

    def __enter__(self) -> NetNS:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def _is_empty_file(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def create(name: str | None = None, dir: str | os.PathLike[str] = DEFAULT_DIR) -> NetNS:
    """A new network namespace, pinned at ``dir/name`` (``cni-<uuid>`` when no name).

    ``dir`` is made when needed and made a shared mount point, as ``ip netns
    add`` does. A name that is taken is refused; on any failure nothing is left
    behind and :class:`~libcni.errors.NamespaceError` says what failed.
    """
    where, path = _where(name, dir)
    undo = _prepare(where)
    try:
        try:
            fd = _new_namespace()
        except OSError as e:
            raise _failed(f"cannot create network namespace {path}", e) from None
        try:
            ident, file = _pin(fd, path, "create network namespace")
        finally:
            os.close(fd)
    except BaseException:
        undo()
        raise
    return NetNS._pinned(path, ident, file)


def from_pid(pid: int, name: str | None = None, dir: str | os.PathLike[str] = DEFAULT_DIR) -> NetNS:
    """Pin the network namespace of process ``pid`` at ``dir/name`` (``cni-<uuid>`` when no name).

    The namespace pinned is the one the process is in when this is called;
    it outlives the process. Errors (no such process, not permitted, a name
    taken) are :class:`~libcni.errors.NamespaceError`, with nothing left behind.
    """
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"pid must be an int, not {type(pid).__name__}")
    if pid <= 0:
        raise ValueError(f"pid must be positive, not {pid}")
    where, path = _where(name, dir)
    try:
        fd = _open(f"/proc/{pid}/ns/net")
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ESRCH):
            alive = os.path.exists(f"/proc/{pid}")
            why = "it has exited" if alive else "no such process"
            raise NamespaceError(
                f"cannot pin the network namespace of process {pid}: {why}"
            ) from None
        if e.errno in _DENIED:
            raise NamespaceError(
                f"cannot open the network namespace of process {pid}: {e.strerror} "
                "(this needs root: CAP_SYS_ADMIN, and CAP_SYS_PTRACE over that process)"
            ) from None
        raise _failed(f"cannot open the network namespace of process {pid}", e) from None
    try:
        undo = _prepare(where)
        try:
            ident, file = _pin(fd, path, f"pin the network namespace of process {pid} at")
        except BaseException:
            undo()
            raise
    finally:
        os.close(fd)
    return NetNS._pinned(path, ident, file)
