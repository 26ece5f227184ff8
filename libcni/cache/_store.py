"""``ResultCache``: the on-disk cache of attachments (``<dir>/results/``) and its locks."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import CacheError, LockTimeoutError
from ._entry import CNI_CACHE_V1, RECORD_V1, CacheEntry, CorruptEntryError, loads
from ._fs import (
    DIR_MODE,
    NAME_MAX,
    DirFds,
    attachment_name,
    check_name,
    fit_name,
    open_dir,
    open_subdir,
    untrusted,
)
from ._lock import CacheLock, acquire

__all__ = ["KnownEntry", "ResultCache"]

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


@contextlib.contextmanager
def _created(path: str, *, action: str) -> Iterator[int]:
    """As :func:`_opened`, creating the directory (and its parents) when missing."""
    dfd = open_dir(path, create=True, action=action)
    assert dfd is not None  # open_dir(create=True) creates it or raises
    try:
        yield dfd
    finally:
        os.close(dfd)


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


#: What tells one version of an entry file from another: device, inode, size,
#: modification and change times (a rename over it, or any write, changes it).
FileIdent = tuple[int, int, int, int, int]


def _ident(st: os.stat_result) -> FileIdent:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _read_at(dfd: int, name: str, path: str) -> bytes:
    """The content of the regular file ``name`` in ``dfd``; ``FileNotFoundError`` if absent (see :func:`_read_ident_at`)."""
    return _read_ident_at(dfd, name, path)[0]


def _read_ident_at(dfd: int, name: str, path: str) -> tuple[bytes, FileIdent]:
    """The content of the regular file ``name`` in ``dfd`` and its identity; ``FileNotFoundError`` if absent.

    Never follows a symlink, never blocks on a FIFO and never reads more than
    ``MAX_ENTRY_SIZE`` bytes: a symlink, a non-regular file or a larger file
    is a ``CorruptEntryError``. A failure to open or read (too many open
    files, EIO, permission denied) is a plain ``CacheError`` naming ``path``:
    the entry may be fine.
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


def _names_held(obj: Any) -> tuple[str, str, str]:
    """The (network, container ID, interface name) a decoded file holds; ``""`` where none.

    Only a ``cniCacheV1`` object holds names (a legacy bare result holds
    none); a wrongly typed name counts as none.
    """
    if type(obj) is not dict or obj.get("kind") != CNI_CACHE_V1:
        return "", "", ""
    network, cid, ifname = obj.get("networkName"), obj.get("containerId"), obj.get("ifName")
    return (
        network if type(network) is str else "",
        cid if type(cid) is str else "",
        ifname if type(ifname) is str else "",
    )


def _held_by_other(obj: Any, network: str, container_id: str, ifname: str) -> bool:
    """Whether the decoded file ``obj`` names another attachment than the one given.

    Two attachments can share a file name (network ``a-b`` with container
    ``c``, network ``a`` with container ``b-c``): the names inside tell them
    apart. A name the file lacks is taken from the file name, as a read does.
    """
    held = _names_held(obj)
    return any(h and h != w for h, w in zip(held, (network, container_id, ifname), strict=True))


def _describe(network: str, container_id: str, ifname: str) -> str:
    return f"network {network!r}, container {container_id!r}, interface {ifname!r}"


def _splits(rest: str) -> bool:
    """Whether ``rest`` can be ``<containerID>-<ifname>`` (two non-empty parts)."""
    return rest.find("-", 1, len(rest) - 1) > 0


def _only_of(name: str, network: str, networks: set[str]) -> bool:
    """Whether the file ``name``, whose content names no network, is one of ``network``'s.

    It must be ``<network>-<containerID>-<ifname>``, and not also
    ``<other>-<containerID>-<ifname>`` for another of the known ``networks``.
    """
    if not name.startswith(f"{network}-") or not _splits(name[len(network) + 1 :]):
        return False
    return not any(
        other != network and name.startswith(f"{other}-") and _splits(name[len(other) + 1 :])
        for other in networks
    )


def _is_candidate(name: str, part: str) -> bool:
    """Whether the file ``name`` can be ``<network>-<containerID>-<ifname>`` for ``part``.

    ``part`` is ``-<containerID>-``; it must have something before and after it.
    The first match at index >= 1 is the one that leaves the most room after it.
    """
    i = name.find(part, 1)
    return i > 0 and i + len(part) < len(name)


def _named_as(entry: CacheEntry, name: str) -> bool:
    """Whether the names an entry holds are the ones its file name is made of.

    Both libcni and the Go library name the file after the entry, so a
    mismatch means the file was tampered with or copied: listed under the
    names it holds, GC would DEL that other attachment again at every run and
    never remove the file. An entry lacking a name (the file name supplies
    it, as on a read) is not a mismatch.
    """
    parts = (entry.network_name, entry.container_id, entry.ifname)
    return not all(parts) or name == "-".join(parts)


def _shared_name(name: str, container_id: str) -> bool:
    """Whether the record file ``name`` of ``container_id`` can be two attachments'.

    In ``records/<containerID>/`` a file ``<network>-<containerID>-<ifname>``
    names one attachment unless ``-<containerID>-`` occurs in it more than
    once (network ``a-c-b`` with interface ``x``, network ``a`` with
    interface ``b-c-x``): only then do the names inside tell whose it is.
    """
    part = f"-{container_id}-"
    first = name.find(part)
    return first >= 0 and name.find(part, first + 1) >= 0


def _usable_record(data: bytes, path: str, container_id: str, name: str) -> CacheEntry | None:
    """The record ``data`` of the file ``name`` of ``records/<container_id>/``, if usable.

    It must decode as a ``libcniRecordV1`` object holding this container and
    a network and interface name that make up its file name.
    """
    try:
        record = CacheEntry.from_dict(loads(data, path), source=path, kind=RECORD_V1)
    except CorruptEntryError:
        return None
    if (
        record.container_id != container_id
        or not record.network_name
        or not record.ifname
        or not _named_as(record, name)
    ):
        return None
    return record


class KnownEntry:
    """An entry as ``ResultCache._entries`` read it, and the identity of its file.

    Internal, for the network manager's teardown, which lists a container's
    entries and then DELs each: the DEL reuses ``entry`` while the file at
    its path is still the one read (``ResultCache._read_known``).
    """

    __slots__ = ("entry", "ident")

    def __init__(self, entry: CacheEntry, ident: FileIdent) -> None:
        self.entry = entry
        self.ident = ident


class ResultCache:
    """The cache of attachments under ``dir`` (the Go library's cache layout).

    Entries are ``<dir>/results/<network>-<containerID>-<ifname>`` files in
    the ``cniCacheV1`` format; locks are files of ``<dir>/locks/``. The
    directories are created (mode 0700) on first use, entry and lock files
    have mode 0600. Every method checks the three names first and raises
    :class:`~libcni.errors.ValidationError` for one that is empty, ``.``,
    ``..`` or holds ``/`` or NUL, for a network name starting with ``.``, and
    for a file name longer than 255 bytes: nothing is ever read, written or
    removed outside ``<dir>/results/``.

    An attachment's lock file goes away with its entry (when the lock is
    released and the attachment has no entry), and
    :meth:`remove_orphan_locks` (run by GC) removes the ones no one holds
    that have no entry; a waiter that locked a file removed meanwhile
    retries on the file now at the path, so exclusion always holds.
    """

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir: str = os.fspath(dir)
        """The cache directory (``/var/lib/cni`` by default in the API)."""
        self.results_dir: str = os.path.join(self.dir, "results")
        """The directory of the entries."""
        self.locks_dir: str = os.path.join(self.dir, "locks")
        """The directory of the lock files."""
        self.records_dir: str = os.path.join(self.dir, "records")
        """The directory of the write-ahead records, one directory per container."""
        # results/ and records/ stay open between operations, checked by one lstat each use.
        self._fds = DirFds()
        weakref.finalize(self, self._fds.close)

    def _dir(self, path: str, *, create: bool, action: str) -> int | None:
        """The kept descriptor of ``results_dir`` or ``records_dir`` (:class:`DirFds`)."""
        return self._fds.fd(path, create=create, action=action)

    def __repr__(self) -> str:
        return f"ResultCache({self.dir!r})"

    def entry_path(self, network: str, container_id: str, ifname: str) -> str:
        """The path of the entry of one attachment (names checked as everywhere)."""
        return os.path.join(self.results_dir, attachment_name(network, container_id, ifname))

    # -- entries -------------------------------------------------------------

    def write(self, entry: CacheEntry, data: bytes | None = None) -> None:
        """Store ``entry``, replacing any previous one of the same attachment.

        ``data``: the entry's JSON (``entry.to_json()``) when the caller has it
        already (ADD makes it from its record's, ``completed_json``).

        Atomic and durable: the JSON goes to a temporary file of the results
        directory, which is fsynced, renamed over the entry, and the directory
        is fsynced. A symlink at the entry path is replaced, never written
        through; a symlinked results directory is refused. On failure the
        temporary file is removed, the previous entry is left as it was
        (unless only the final directory fsync failed) and ``CacheError`` is
        raised naming the path.

        An entry of *another* attachment at the same path (two attachments
        can share a file name) is never replaced: ``CacheError`` naming both
        (see :meth:`check_owner`). Call it holding the attachment's
        :meth:`lock`, which is the same for both.
        """
        name = attachment_name(entry.network_name, entry.container_id, entry.ifname)
        if data is None:
            data = entry.to_json()
        path = os.path.join(self.results_dir, name)
        dfd = self._dir(self.results_dir, create=True, action=f"write cache entry {path}")
        assert dfd is not None  # created, or CacheError
        self._check_owner_at(dfd, name, path, entry.network_name, entry.container_id, entry.ifname)
        tmp = self._write_temp(dfd, data, path)
        try:
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as e:
            self._unlink_quietly(dfd, tmp)
            raise CacheError(f"cannot write cache entry {path}", _strerror(e)) from None
        try:
            os.fsync(dfd)
        except OSError as e:
            raise CacheError(
                f"cache entry {path} was written but its directory could not be synced",
                _strerror(e),
            ) from None

    @staticmethod
    def _unlink_quietly(dfd: int, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dfd)

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
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self._unlink_quietly(dfd, tmp)
            raise CacheError(f"cannot write cache entry {path}", _strerror(e)) from None
        except BaseException:
            self._unlink_quietly(dfd, tmp)
            raise
        return tmp

    def check_owner(self, network: str, container_id: str, ifname: str) -> None:
        """Raise ``CacheError`` if the attachment's entry path holds another attachment's entry.

        What :meth:`write` checks, for a caller that wants to know before
        doing anything (ADD, before its plugins run). An absent, corrupt or
        legacy entry is fine; one that cannot be read (an I/O error) raises,
        since it cannot be told apart.
        """
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self._dir(self.results_dir, create=False, action=f"write cache entry {path}")
        if dfd is not None:
            self._check_owner_at(dfd, name, path, network, container_id, ifname)

    @staticmethod
    def _check_owner_at(
        dfd: int, name: str, path: str, network: str, container_id: str, ifname: str
    ) -> None:
        try:
            obj: Any = loads(_read_at(dfd, name, path), path)
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
        """The entry of one attachment, or ``None`` when there is none.

        A legacy file holding a bare result gives ``kind=""``, ``config=b""``
        and the names from the arguments. A file holding another attachment's
        entry (two attachments can share a file name: network ``a-b`` with
        container ``c``, network ``a`` with container ``b-c``) gives
        ``None``. An empty or corrupt file, one larger than
        ``MAX_ENTRY_SIZE``, a symlink, or a non-regular file raises
        :class:`CorruptEntryError`; a file that cannot be read (too many open
        files, EIO, permission denied) a plain ``CacheError``; both name it.
        """
        return self.read_ident(network, container_id, ifname)[0]

    def read_ident(
        self, network: str, container_id: str, ifname: str
    ) -> tuple[CacheEntry | None, FileIdent | None]:
        """:meth:`read`, and the identity of the file read (``None`` when it gives ``None``).

        For :meth:`remove_read`: DEL reads the entry before its plugins run
        and removes it after, without reading it twice.
        """
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self._dir(self.results_dir, create=False, action=f"read cache entry {path}")
        if dfd is None:
            return None, None
        try:
            data, ident = _read_ident_at(dfd, name, path)
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
        """:meth:`remove`, for an entry :meth:`read_ident` gave with identity ``ident``.

        While the file at the entry path is still the one read (same device,
        inode, size, modification and change times) it is known to be this
        attachment's and is unlinked without being read again. Otherwise
        (``ident`` is ``None``, or the file was replaced or written since, by
        a writer outside this cache's locks) it is :meth:`remove`, which reads
        it again to tell whose it is.
        """
        if ident is None:
            return self.remove(network, container_id, ifname)
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self._dir(self.results_dir, create=False, action=f"remove cache entry {path}")
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

    def _read_known(
        self, network: str, container_id: str, ifname: str, known: KnownEntry
    ) -> tuple[CacheEntry | None, FileIdent | None]:
        """:meth:`read_ident`, without reading again an entry that is already known.

        ``known`` comes from :meth:`_entries` (the network manager's teardown,
        which lists the container's entries and then DELs each). When it
        names this attachment and the file at its path is still the one it
        was read from (same device, inode, size, modification and change
        times), its entry is what :meth:`read` would decode, and is returned
        as it is. Anything else (another attachment's entry, a file
        rewritten, replaced, removed or unreadable meanwhile) is what
        :meth:`read_ident` gives.
        """
        entry = known.entry
        if (entry.network_name, entry.container_id, entry.ifname) == (
            network,
            container_id,
            ifname,
        ):
            path = os.path.join(self.results_dir, attachment_name(network, container_id, ifname))
            try:
                if _ident(os.lstat(path)) == known.ident:
                    return entry, known.ident
            except OSError:
                pass
        return self.read_ident(network, container_id, ifname)

    def remove(self, network: str, container_id: str, ifname: str) -> bool:
        """Remove the entry of one attachment; return whether a file was removed.

        An absent entry is fine, and so is one holding another attachment's
        entry, which is left alone (see :meth:`read`). A corrupt entry is
        removed; one that cannot be read (an I/O error) cannot be told apart
        and raises ``CacheError``, removing nothing. A symlink at the entry
        path is removed itself (never its target).
        """
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.results_dir, name)
        dfd = self._dir(self.results_dir, create=False, action=f"remove cache entry {path}")
        if dfd is None:
            return False
        try:
            try:
                obj: Any = loads(_read_at(dfd, name, path), path)
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
        """Every readable ``cniCacheV1`` entry, of one container if ``container_id``.

        Sorted by file name. Entries that cannot be read or decoded, legacy
        files, entries without a network or interface name, entries whose
        names are not the ones their file name is made of, and temporary
        files are skipped. With a container ID only the files whose name holds
        ``-<containerID>-`` are opened, and their ``containerId`` must match.
        A missing results directory gives ``[]``; one that cannot be listed
        raises ``CacheError``.
        """
        return self._entries(container_id, None)

    def _entries(self, container_id: str, known: list[KnownEntry] | None) -> list[CacheEntry]:
        """:meth:`entries`; ``known`` (the network manager's teardown) receives a
        ``KnownEntry`` of each entry returned, in the same order, for
        :meth:`_read_known`."""
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
                loaded = self._load_listed(dfd, name)
                if loaded is None:
                    continue
                entry, ident = loaded
                if container_id and entry.container_id != container_id:
                    continue
                out.append(entry)
                if known is not None:
                    known.append(KnownEntry(entry, ident))
            return out

    def _container(self, container_id: str) -> tuple[list[KnownEntry], list[CacheEntry]]:
        """What the cache holds of one container: its complete entries (with the identity of
        each file read) and its records without an entry (in progress), each by file name.

        The container's records directory is its index: an ADD records every
        attachment there before its first plugin runs, and the record stays
        until the attachment is DELeted. So only ``records/<containerID>/`` is
        listed, and each attachment's entry is read by its name: the cost does
        not depend on what else is cached. A container without that directory
        (or with nothing in it) was set up by the Go library or an older
        libcni: it is found as :meth:`entries` finds it, by a listing of
        ``results/``. A records directory that is refused (another owner,
        writable by others, a symlink) raises ``CacheError``.
        """
        fit_name(f"n-{check_name(container_id, 'container ID')}-i", "container ID")
        action = f"list the attachments of container {container_id!r}"
        listed = self._container_names(container_id, action)
        if not listed:
            known: list[KnownEntry] = []
            self._entries(container_id, known)
            complete = {(k.entry.network_name, k.entry.ifname) for k in known}
            return known, [
                r for r in self.records(container_id) if (r.network_name, r.ifname) not in complete
            ]
        top, names = listed
        rdfd = self._dir(self.results_dir, create=False, action=action)
        known = []
        for name in names:
            if rdfd is None:
                break
            loaded = self._load_listed(rdfd, name)
            if loaded is not None and loaded[0].container_id == container_id:
                known.append(KnownEntry(*loaded))
        complete = {(k.entry.network_name, k.entry.ifname) for k in known}
        done = {f"{k.entry.network_name}-{container_id}-{k.entry.ifname}" for k in known}
        base = f"{self.records_dir}/{container_id}"
        records: list[CacheEntry] = []
        for name in names:
            if name in done and not _shared_name(name, container_id):
                continue  # complete: its record is not needed
            path = f"{base}/{name}"
            try:
                data, _ = _read_ident_at(top, f"{container_id}/{name}", path)
            except (FileNotFoundError, CacheError):
                continue  # gone, or unusable or unreadable now: as records() skips it
            record = _usable_record(data, path, container_id, name)
            if record is not None and (record.network_name, record.ifname) not in complete:
                records.append(record)
        return known, records

    def _container_checked(self, top: int, container_id: str, action: str) -> bool:
        """Whether ``records/<containerID>`` exists, checked with one ``lstat`` through
        ``top`` (``records/``): a directory, owned by the euid, writable by no one else, no
        symlink; anything else raises ``CacheError``."""
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

    def _container_names(self, container_id: str, action: str) -> tuple[int, list[str]] | None:
        """The descriptor of ``records/`` and the sorted record names of the container's
        directory, or ``None`` when it has none (no directory, or nothing in it).

        The directory is checked with one ``lstat`` through ``records/`` (a
        directory, owned by the euid, writable by no one else, no symlink) and
        listed by its path: only this user and root can make anything in
        ``records/``, so nothing can be swapped in between.
        """
        top = self._dir(self.records_dir, create=False, action=action)
        if top is None or not self._container_checked(top, container_id, action):
            return None
        path = f"{self.records_dir}/{container_id}"
        try:
            names = os.listdir(path)
        except FileNotFoundError:
            return None  # its last record was DELeted meanwhile
        except OSError as e:
            raise CacheError(f"cannot {action}: cannot list {path}", _strerror(e)) from None
        names = sorted(n for n in names if not n.startswith(TEMP_PREFIX))
        return (top, names) if names else None

    def remove_stale_temporaries(self, names: Iterable[str] | None = None) -> list[str]:
        """Remove the temporary files that writers killed mid-write left; return their names.

        Only regular ``.tmp-*`` files last modified more than
        ``TEMP_STALE_AFTER`` seconds ago: no live write keeps its temporary
        file that long. libcni never reads them, but a reader that lists the
        directory naively (the Go library does) would take a complete one for
        an attachment. Best effort: failures (a read-only cache, a file gone
        meanwhile) are ignored. ``names``: the directory's names as GC listed
        them (else it is listed).
        """
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

    def remove_unreadable(
        self,
        network: str,
        valid: Iterable[tuple[str, str]] = (),
        older_than: float = 30.0,
    ) -> tuple[list[str], list[CacheError]]:
        """Remove the entries of ``network`` whose content is unusable; GC's clean-up.

        Returns the file names removed and the errors met (GC collects them;
        none stops the clean-up). An entry is unusable when it is empty, not
        JSON, not an object, larger than ``MAX_ENTRY_SIZE``, a symlink or
        not a regular file, or a ``cniCacheV1`` object with wrongly typed
        fields or with names that are not the ones its file name is made of
        (a legacy bare result is usable). Never removed:

        - an entry that cannot be *read* (too many open files, EIO,
          permission denied): its content may be fine; the error is returned;
        - an entry named in ``valid`` (``(container ID, interface name)``
          pairs), by its file name or by the names inside;
        - an entry of another network: one whose ``networkName`` is another,
          or, for content that names no network, one whose file name can also
          be ``<other>-<containerID>-<ifname>`` for a network ``<other>``
          met in this scan (``a-b-c-eth0`` can be network ``a-b``'s when
          collecting ``a``);
        - a file modified less than ``older_than`` seconds ago: a writer that
          does not write atomically (the Go library writes in place) may be
          filling it right now;
        - a file whose attachment lock is held (the lock of every attachment
          with that file name): an operation may be writing it right now.
        """
        from ._gc import GCScan  # (it builds on this module)

        scan = GCScan(self)
        scan.survey((network,), fresh=True)
        work = scan.collect(network, tuple(valid), older_than, records=False)
        return work.removed, work.errors

    def _try_lock_file(self, network: str, name: str) -> CacheLock | None:
        """The attachment lock of the entry file ``name`` of ``network``, without waiting.

        ``None`` if it is busy, or if no attachment can have that file name
        (then no one can be writing it).
        """
        rest = name[len(network) + 1 :]
        i = rest.find("-", 1, len(rest) - 1)
        if i <= 0:
            return None
        # Any split gives the same lock file: the one of every attachment named so.
        return self.try_lock(network, rest[:i], rest[i + 1 :])

    @staticmethod
    def _usable(obj: dict[str, Any], name: str, path: str) -> bool:
        """Whether the decoded listed file ``name`` is a usable entry (or a legacy result)."""
        if obj.get("kind") != CNI_CACHE_V1:
            return True
        return ResultCache._usable_entry(obj, name, path) is not None

    @staticmethod
    def _usable_entry(obj: dict[str, Any], name: str, path: str) -> CacheEntry | None:
        """The ``cniCacheV1`` entry ``obj`` of the listed file ``name``, if it is usable."""
        try:
            entry = CacheEntry.from_dict(obj, source=path)
        except CacheError:
            return None
        return entry if _named_as(entry, name) else None

    def _load_listed(self, dfd: int, name: str) -> tuple[CacheEntry, FileIdent] | None:
        """The ``cniCacheV1`` entry in the listed file ``name`` and the file's identity, or ``None``."""
        path = os.path.join(self.results_dir, name)
        try:
            data, ident = _read_ident_at(dfd, name, path)
            obj: Any = loads(data, path)
            if not isinstance(obj, dict) or obj.get("kind") != CNI_CACHE_V1:
                return None
            entry = CacheEntry.from_dict(obj, source=path)
        except (CacheError, FileNotFoundError):
            return None
        if not entry.network_name or not entry.ifname or not _named_as(entry, name):
            return None
        return entry, ident

    # -- write-ahead records -------------------------------------------------
    #
    # ``<dir>/records/<containerID>/<network>-<containerID>-<ifname>``: what ADD
    # writes before its first plugin runs, kept until the attachment is DELeted.
    # Go libcni never looks outside ``results/``. A per-container directory
    # makes it the container's index: its attachments are found by listing it.

    def record_path(self, network: str, container_id: str, ifname: str) -> str:
        """The path of the write-ahead record of one attachment (names checked as everywhere)."""
        return os.path.join(
            self.records_dir, container_id, attachment_name(network, container_id, ifname)
        )

    @contextlib.contextmanager
    def _container_dir(
        self, container_id: str, *, create: bool, action: str
    ) -> Iterator[tuple[int, int] | None]:
        """``(records_fd, container_fd)`` of ``records/<containerID>``; ``None`` if it is missing.

        Both directories are checked as ``results/`` is (``open_dir``,
        ``open_subdir``: owned by the euid, writable by no one else, never
        through a symlink); ``create`` makes them (mode 0700).
        """
        top = self._dir(self.records_dir, create=create, action=action)
        sub = (
            None
            if top is None
            else self._open_container(top, container_id, create=create, action=action)
        )
        if top is None or sub is None:
            yield None
            return
        try:
            yield top, sub
        finally:
            os.close(sub)

    def _open_container(
        self, top: int, container_id: str, *, create: bool, action: str
    ) -> int | None:
        """The checked descriptor of ``records/<containerID>`` (``top``: ``records/``'s)."""
        path = f"{self.records_dir}/{container_id}"
        for _ in range(10):
            sub = open_subdir(top, container_id, path, action=action, create=False)
            if sub is not None or not create:
                return sub
            # A DEL of the container's last record may remove it again meanwhile.
            try:
                os.mkdir(container_id, DIR_MODE, dir_fd=top)
            except FileExistsError:
                pass
            except OSError as e:
                raise CacheError(
                    f"cannot {action}: cannot create directory {path}", _strerror(e)
                ) from None
        raise CacheError(f"cannot {action}: {path} keeps being removed")

    @staticmethod
    def _record_at(
        dfd: int, name: str, path: str, network: str, container_id: str, ifname: str
    ) -> tuple[CacheEntry | None, FileIdent | None]:
        """The record in the file ``name`` of ``dfd`` if it is this attachment's, and its identity.

        ``(None, None)`` when there is no file; ``(None, ident)`` when it holds
        another attachment's record (two attachments can share a file name).
        Unusable content (a symlink, a non-regular or oversized file, not a
        ``libcniRecordV1`` object, missing names): ``CorruptEntryError``; a
        file that cannot be read: ``CacheError``.
        """
        try:
            data, ident = _read_ident_at(dfd, name, path)
        except FileNotFoundError:
            return None, None
        record = CacheEntry.from_dict(loads(data, path), source=path, kind=RECORD_V1)
        held = (record.network_name, record.container_id, record.ifname)
        if not all(held):
            raise CorruptEntryError(f"record {path} lacks a network, container or interface name")
        if held != (network, container_id, ifname):
            return None, ident
        return record, ident

    def write_record(self, entry: CacheEntry) -> bytes:
        """Record the attachment of ``entry`` as in progress (its fields but ``result``).

        ADD calls it before its first plugin runs, holding the attachment's
        :meth:`lock`. A new record is written in place: if the process is
        killed while writing it, no plugin has run yet, and what is left is
        an unusable record, which nothing DELs and GC removes. A record that
        is there already (of an earlier ADD of the attachment) is replaced
        atomically (a temporary file renamed over it), so that it is never
        lost half-way; the record of *another* attachment sharing the file
        name is never replaced (``CacheError`` naming both), an unusable one
        is. Not fsynced: a power loss takes the namespaces and interfaces
        along. On failure nothing is left and ``CacheError`` names the path.
        Returns the record's JSON (for ``completed_json``).
        """
        network, container_id, ifname = entry.network_name, entry.container_id, entry.ifname
        name = attachment_name(network, container_id, ifname)
        path = f"{self.records_dir}/{container_id}/{name}"
        data = (entry if entry.is_record else entry.as_record()).to_json()
        action = f"write the record {path}"
        # The hot path of every ADD (5 system calls): records/ checked with one lstat
        # (its descriptor is kept), the container's directory checked with one lstat
        # (only this user and root can make anything in records/), the record created
        # through them.
        top = self._dir(self.records_dir, create=True, action=action)
        assert top is not None  # created, or CacheError
        made = False
        # Bounded: a DEL of the container's last record removes the directory; each
        # turn re-creates it, and only ADDs and DELs of one container racing loop.
        for _ in range(100):
            if not made:  # (one this call made is this user's, mode 0700)
                try:
                    st = os.stat(container_id, dir_fd=top, follow_symlinks=False)
                except FileNotFoundError:
                    made = self._mkdir_at(top, container_id, action)
                    continue
                except OSError as e:
                    raise CacheError(f"cannot {action}", _strerror(e)) from None
                problem = untrusted(st, f"{self.records_dir}/{container_id}", action)
                if problem is not None:
                    raise problem
            made = False
            try:
                fd = os.open(f"{container_id}/{name}", _TEMP_FLAGS, FILE_MODE, dir_fd=top)
            except FileNotFoundError:
                continue  # the directory was removed meanwhile (its last record DELeted)
            except FileExistsError:
                # One is there (an earlier ADD of it): replaced atomically.
                dfd = self._open_container(top, container_id, create=False, action=action)
                if dfd is None:
                    continue
                try:
                    if self._replace_existing(dfd, name, data, path, entry):
                        return data
                finally:
                    os.close(dfd)
                continue
            except OSError as e:
                raise CacheError(f"cannot {action}", _strerror(e)) from None
            self._fill(fd, top, f"{container_id}/{name}", data, action)
            return data
        raise CacheError(f"cannot {action}: its directory keeps being removed")

    @staticmethod
    def _mkdir_at(top: int, name: str, action: str) -> bool:
        """Make the directory ``name`` of ``top`` (0700); whether this call made it."""
        try:
            os.mkdir(name, DIR_MODE, dir_fd=top)
        except FileExistsError:
            return False
        except OSError as e:
            raise CacheError(f"cannot {action}: cannot create its directory", _strerror(e)) from None
        return True

    @staticmethod
    def _fill(fd: int, dfd: int, name: str, data: bytes, action: str) -> None:
        """Write ``data`` to the new file ``fd`` (``name`` in ``dfd``) and close it; on
        failure the file is removed and ``CacheError`` raised."""
        try:
            try:
                written = os.write(fd, data)  # all of it, in one call, almost always
                if written < len(data):
                    view = memoryview(data)[written:]
                    while view:
                        view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as e:
            ResultCache._unlink_quietly(dfd, name)
            raise CacheError(f"cannot {action}", _strerror(e)) from None
        except BaseException:
            ResultCache._unlink_quietly(dfd, name)
            raise

    def _replace_existing(
        self, dfd: int, name: str, data: bytes, path: str, entry: CacheEntry
    ) -> bool:
        """Replace the record ``name`` of ``dfd`` with ``data``, unless it is another
        attachment's (``CacheError``); ``False`` if the directory went meanwhile."""
        network, container_id, ifname = entry.network_name, entry.container_id, entry.ifname
        if _shared_name(name, container_id):
            self._check_record_owner(dfd, name, path, network, container_id, ifname)
        return self._replace_at(dfd, name, data, path)

    def _check_record_owner(
        self, dfd: int, name: str, path: str, network: str, container_id: str, ifname: str
    ) -> None:
        """Refuse (``CacheError``) to replace the record there if it is another attachment's."""
        try:
            mine, ident = self._record_at(dfd, name, path, network, container_id, ifname)
        except CorruptEntryError:
            return  # replaced
        except CacheError as e:
            raise CacheError(
                f"cannot write the record {path}: cannot read the record there to check "
                "whose it is",
                e.details,
            ) from None
        if mine is None and ident is not None:
            raise CacheError(
                f"cannot write the record {path} for "
                f"{_describe(network, container_id, ifname)}: it holds the record of another "
                "attachment",
                "two attachments share this file name; DEL the other one first",
            )

    @staticmethod
    def _replace_at(dfd: int, name: str, data: bytes, path: str) -> bool:
        """Write ``data`` to a temporary file of ``dfd`` and rename it to ``name``.

        ``False`` (nothing written) if the directory was removed meanwhile (a
        DEL removed its last record): the caller opens it again. The temporary
        file is ``.<name>``: the writer holds the attachment's lock, so one
        left there by a killed writer is removed, and GC removes it as soon as
        that lock is free (:meth:`sweep_records`). A name too long for the dot
        gets a random ``..<hex>`` one, removed after ``TEMP_STALE_AFTER``.
        """
        fixed = len(name) * 4 < NAME_MAX or len(os.fsencode(name)) < NAME_MAX
        tmp = f".{name}"
        for _ in range(10):
            if not fixed:
                tmp = f"..{os.urandom(8).hex()}"
            try:
                fd = os.open(tmp, _TEMP_FLAGS, FILE_MODE, dir_fd=dfd)
                break
            except FileExistsError:
                if fixed:
                    ResultCache._unlink_quietly(dfd, tmp)  # a killed writer's
            except FileNotFoundError:
                return False
            except OSError as e:
                raise CacheError(
                    f"cannot write the record {path}: cannot create a temporary file",
                    _strerror(e),
                ) from None
        else:  # pragma: no cover - a temporary file re-created ten times meanwhile
            raise CacheError(f"cannot write the record {path}: no free temporary name")
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as e:
            ResultCache._unlink_quietly(dfd, tmp)
            raise CacheError(f"cannot write the record {path}", _strerror(e)) from None
        except BaseException:
            ResultCache._unlink_quietly(dfd, tmp)
            raise
        return True

    def read_record(self, network: str, container_id: str, ifname: str) -> CacheEntry | None:
        """The write-ahead record of one attachment, or ``None`` when there is none.

        ``None`` too for another attachment's record sharing the file name.
        Unusable content (or a symlink, a non-regular or oversized file):
        :class:`CorruptEntryError`; a file that cannot be read, or a records
        directory not owned by the euid or writable by others: ``CacheError``.
        A record is only ever a record: whether the attachment completed is
        told by ``results/`` (:meth:`read`).
        """
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.records_dir, container_id, name)
        with self._container_dir(container_id, create=False, action=f"read the record {path}") as d:
            if d is None:
                return None
            return self._record_at(d[1], name, path, network, container_id, ifname)[0]

    def remove_record(self, network: str, container_id: str, ifname: str) -> bool:
        """Remove the record of one attachment (DEL, once every plugin succeeded); whether it was there.

        Another attachment's record sharing the file name is left; an
        unusable one is removed (a symlink itself, never its target); one that
        cannot be read raises ``CacheError``, removing nothing. The
        container's directory goes when it is empty.
        """
        name = attachment_name(network, container_id, ifname)
        path = f"{self.records_dir}/{container_id}/{name}"
        action = f"remove the record {path}"
        if not _shared_name(name, container_id):
            # DEL's hot path (4 system calls): the file names this attachment alone.
            top = self._dir(self.records_dir, create=False, action=action)
            if top is None or not self._container_checked(top, container_id, action):
                return False
            return self._unlink_record(top, f"{container_id}/{name}", top, container_id, action)
        with self._container_dir(container_id, create=False, action=action) as dirs:
            if dirs is None:
                return False
            top, dfd = dirs
            # A name two attachments can share: the names inside tell whose it is.
            try:
                record, _ = self._record_at(dfd, name, path, network, container_id, ifname)
                if record is None:
                    return False
            except CorruptEntryError:
                pass
            except CacheError as e:
                raise CacheError(
                    f"cannot {action}: cannot read it to check whose it is", e.details
                ) from None
            return self._unlink_record(dfd, name, top, container_id, action)

    def _unlink_record(self, dfd: int, name: str, top: int, container_id: str, action: str) -> bool:
        """Unlink the record ``name`` of ``dfd``, then the container's directory (in ``top``)
        if it is empty; whether the record was there."""
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise CacheError(f"cannot {action}", _strerror(e)) from None
        self._rmdir_quietly(top, container_id)
        return True

    @staticmethod
    def _rmdir_quietly(dfd: int, name: str) -> None:
        """Remove the directory ``name`` of ``dfd`` if it is empty (a writer re-creates it)."""
        try:  # noqa: SIM105 - on DEL's hot path, contextlib.suppress costs as much as the call
            os.rmdir(name, dir_fd=dfd)
        except OSError:
            pass

    def forget(
        self, network: str, container_id: str, ifname: str, ident: FileIdent | None = None
    ) -> bool:
        """What DEL does once every plugin succeeded: :meth:`remove_read` the entry, then
        :meth:`remove_record`; whether an entry was removed.

        If the entry cannot be removed the record stays (``CacheError``).
        """
        removed = self.remove_read(network, container_id, ifname, ident)
        self.remove_record(network, container_id, ifname)
        return removed

    def records(self, container_id: str = "") -> list[CacheEntry]:
        """Every usable write-ahead record, of one container if ``container_id``; sorted by file name.

        A record stays from the start of its ADD until its attachment is
        DELeted: the attachment is *in progress* when ``results/`` holds no
        entry of it. With a container ID only ``records/<containerID>/`` is
        listed. Unusable records (see :meth:`read_record`), records whose
        names are not those of their file and directory, and temporary files
        are skipped; so, when listing every container, are container
        directories that are refused (not owned by the euid, writable by
        others). A records directory that cannot be listed raises ``CacheError``.
        """
        return [record for record, _ in self._records(container_id)]

    def _records(
        self,
        container_id: str = "",
        unusable: list[tuple[str, str, FileIdent]] | None = None,
    ) -> list[tuple[CacheEntry, FileIdent]]:
        """:meth:`records` with the identity of each file; ``unusable`` receives
        ``(containerID, file name, identity)`` of every record whose *content*
        is unusable (not those that cannot be read), for GC."""
        action = "list the records"
        out: list[tuple[CacheEntry, FileIdent]] = []
        if container_id:
            fit_name(check_name(container_id, "container ID"), "container ID")
            containers = [container_id]
        else:
            with _opened(self.records_dir, action=action) as top:
                if top is None:
                    return out
                containers = _listed(top, self.records_dir, action)
        for cid in sorted(containers):
            try:
                with self._container_dir(cid, create=False, action=action) as dirs:
                    if dirs is not None:
                        self._records_in(dirs[1], cid, out, unusable)
            except CacheError:
                if container_id:
                    raise
        out.sort(key=lambda r: f"{r[0].network_name}-{r[0].container_id}-{r[0].ifname}")
        return out

    def _records_in(
        self,
        dfd: int,
        container_id: str,
        out: list[tuple[CacheEntry, FileIdent]],
        unusable: list[tuple[str, str, FileIdent]] | None,
    ) -> None:
        """The usable records of the directory ``dfd`` of ``container_id``, appended to ``out``."""
        try:
            names = os.listdir(dfd)
        except OSError as e:
            raise CacheError(
                f"cannot list the records of container {container_id!r}", _strerror(e)
            ) from None
        base = os.path.join(self.records_dir, container_id)
        for name in sorted(names):
            if name.startswith(TEMP_PREFIX):
                continue
            path = os.path.join(base, name)
            try:
                data, ident = _read_ident_at(dfd, name, path)
            except FileNotFoundError:
                continue
            except CorruptEntryError:  # a symlink, a non-regular or oversized file
                if unusable is not None:
                    with contextlib.suppress(OSError):
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        unusable.append((container_id, name, _ident(st)))
                continue
            except CacheError:
                continue  # cannot be read now: neither used nor removed
            record = _usable_record(data, path, container_id, name)
            if record is None:
                if unusable is not None:
                    unusable.append((container_id, name, ident))
                continue
            out.append((record, ident))

    def remove_unusable_record(self, container_id: str, name: str, ident: FileIdent) -> bool:
        """Remove the record file ``name`` of ``container_id`` that a listing found
        unusable, if it is still that file (``ident``); GC's. Whether it was removed.

        Such a file is never DELeted on its word, only removed; not while the
        lock of an attachment of that file name is held (an ADD writes a new
        record in place), nor once it was rewritten (a new file).
        """
        path = os.path.join(self.records_dir, container_id, name)
        action = f"remove the unusable record {path}"
        lk = acquire(
            self.locks_dir, fit_name(name, "record"), exclusive=True, blocking=False,
            entry=os.path.join(self.results_dir, name),
        )
        if lk is None:
            return False
        try:
            with self._container_dir(container_id, create=False, action=action) as dirs:
                if dirs is None:
                    return False
                top, dfd = dirs
                try:
                    if _ident(os.stat(name, dir_fd=dfd, follow_symlinks=False)) != ident:
                        return False
                except FileNotFoundError:
                    return False
                except OSError as e:
                    raise CacheError(f"cannot {action}", _strerror(e)) from None
                return self._unlink_record(dfd, name, top, container_id, action)
        finally:
            lk.release()

    def sweep_records(self, listed: dict[str, list[str]] | None = None) -> list[str]:
        """Remove what killed writers left among the records; return the paths removed. GC's.

        A temporary file ``.<name>`` goes as soon as the lock of the
        attachment ``<name>`` is free (its writer held it, so it is dead); a
        random one (``..<hex>``) once it is ``TEMP_STALE_AFTER`` seconds old;
        then a container directory left empty goes too. Never a record. Best
        effort: failures are ignored. ``listed``: each container's names as
        GC listed them (else they are listed); only the directories that held
        a temporary file or nothing are opened.
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
                        self.locks_dir, name[1:], exclusive=True, blocking=False,
                        entry=os.path.join(self.results_dir, name[1:]),
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
        self._rmdir_quietly(top, cid)

    # -- locks ---------------------------------------------------------------

    def lock(
        self, network: str, container_id: str, ifname: str, *, timeout: float | None = None
    ) -> CacheLock:
        """Take the exclusive lock of one attachment, waiting for it; returns the held lock.

        Use it as ``with cache.lock(net, cid, ifname): ...`` or call
        ``release()``. It excludes other threads and other processes working on
        the same attachment; different attachments never block each other.
        ``timeout`` bounds the wait (seconds; ``None`` or ``math.inf``: as long
        as it takes): :class:`~libcni.errors.LockTimeoutError` when it runs out.
        On release, the lock file is removed if the attachment has no entry.
        """
        name = attachment_name(network, container_id, ifname)
        lk = acquire(
            self.locks_dir, name, exclusive=True, blocking=True, timeout=timeout,
            entry=os.path.join(self.results_dir, name),
        )
        if lk is None:
            raise _timed_out(
                timeout,
                f"attachment (network {network!r}, container {container_id!r}, "
                f"interface {ifname!r})",
                os.path.join(self.locks_dir, name),
            )
        return lk

    def try_lock(self, network: str, container_id: str, ifname: str) -> CacheLock | None:
        """:meth:`lock` without waiting: ``None`` if someone else holds it (for async callers)."""
        name = attachment_name(network, container_id, ifname)
        return acquire(
            self.locks_dir, name, exclusive=True, blocking=False,
            entry=os.path.join(self.results_dir, name),
        )

    def network_lock(
        self, network: str, exclusive: bool, *, timeout: float | None = None
    ) -> CacheLock:
        """Take the lock of a whole network, waiting for it; returns the held lock.

        ADD and DEL hold it shared (they run in parallel with each other), GC
        exclusive (it excludes them). The lock file is
        ``<dir>/locks/networks/<network>``, which no attachment lock can be.
        ``timeout`` bounds the wait, as for :meth:`lock`.
        """
        name = self._network_lock_name(network)
        lk = acquire(
            self.locks_dir, name, subdir="networks", exclusive=exclusive, blocking=True,
            timeout=timeout,
        )
        if lk is None:
            raise _timed_out(
                timeout, f"network {network!r}", os.path.join(self.locks_dir, "networks", name)
            )
        return lk

    def try_network_lock(self, network: str, exclusive: bool) -> CacheLock | None:
        """:meth:`network_lock` without waiting: ``None`` if it is busy (for async callers)."""
        name = self._network_lock_name(network)
        return acquire(self.locks_dir, name, subdir="networks", exclusive=exclusive, blocking=False)

    @staticmethod
    def _network_lock_name(network: str) -> str:
        return fit_name(check_name(network, "network name"), "network name")

    # -- per-container locks (libcni.manager) ------------------------------

    def container_lock(self, container_id: str, timeout: float | None = None) -> CacheLock:
        """Take the exclusive lock of a whole container, waiting at most ``timeout`` seconds.

        The network manager holds it across a setup, teardown or check so
        that those of one container never interleave, across threads and
        processes. The lock file is ``<dir>/locks/containers/<containerID>``,
        which no attachment lock (always ``<network>-<id>-<ifname>``, directly
        in ``locks/``) nor network lock can be. ``timeout`` bounds the wait,
        as for :meth:`lock`. On release the lock file is removed when the
        container has no records (``records/<containerID>`` is missing: libcni
        holds nothing of it), so a container torn down leaves no lock file;
        GC removes the lock files no one holds.
        """
        name = self._container_lock_name(container_id)
        lk = acquire(
            self.locks_dir, name, subdir="containers", exclusive=True, blocking=True,
            timeout=timeout, entry=os.path.join(self.records_dir, name),
        )
        if lk is None:
            raise _timed_out(
                timeout,
                f"container {container_id!r}",
                os.path.join(self.locks_dir, "containers", name),
            )
        return lk

    def try_container_lock(self, container_id: str) -> CacheLock | None:
        """:meth:`container_lock` without waiting: ``None`` if it is busy (for async callers)."""
        name = self._container_lock_name(container_id)
        return acquire(
            self.locks_dir,
            name,
            subdir="containers",
            exclusive=True,
            blocking=False,
            entry=os.path.join(self.records_dir, name),
        )

    @staticmethod
    def _container_lock_name(container_id: str) -> str:
        return fit_name(check_name(container_id, "container ID"), "container ID")

    def remove_orphan_locks(self, entries: Iterable[str] | None = None) -> list[str]:
        """Remove the lock files that no one holds and that have no entry; return their paths.

        An attachment's lock file is an orphan when ``results/`` has no file of
        its name; a network's (``locks/networks/<network>``) when no file of
        ``results/`` starts with ``<network>-``; a container's
        (``locks/containers/<containerID>``, the network manager's) whenever
        no one holds it. Each is removed only while
        holding its exclusive lock (taken without waiting: a held lock is
        kept), so a waiter on it retries on a new file and exclusion holds.
        Best effort: failures are ignored; a results directory that cannot be
        listed removes nothing. ``entries``: the names of ``results/`` as GC
        listed them (else it is listed).
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

        def sweep(
            names: list[str], subdir: str, keep: Callable[[str], bool], *, of_entry: bool = False
        ) -> None:
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
                        blocking=False,
                        entry=entry,
                    )
                    if lk is not None and lk._release(remove=not of_entry):
                        removed.append(lk.path)

        # "networks" and "containers" are the directories of the other two kinds.
        sweep(
            locks,
            "",
            lambda name: name in entries or name in ("networks", "containers"),
            of_entry=True,
        )
        sweep(networks, "networks", lambda name: any(e.startswith(f"{name}-") for e in entries))
        # A container lock holds no state: any file no one holds can go.
        sweep(containers, "containers", lambda name: False)
        return removed

    def _list_dir(self, path: str, action: str) -> list[str]:
        """The names in the (trusted) directory ``path``; ``[]`` when it is missing."""
        with _opened(path, action=action or f"list {path}") as dfd:
            if dfd is None:
                return []
            return os.listdir(dfd)


def _timed_out(timeout: float | None, what: str, path: str) -> LockTimeoutError:
    return LockTimeoutError(
        f"timed out after {timeout or 0:.3g}s waiting for the cache lock of {what}; "
        "another operation holds it",
        path,
    )
