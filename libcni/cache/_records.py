"""The write-ahead records of ``<dir>/records/<containerID>/`` (:class:`Records`, ``cache.wal``).

What ADD writes before its first plugin runs, marked complete once the entry
is written, kept until the attachment is DELeted: the container's index (the
rules: docs/cache.rst).
"""

from __future__ import annotations

import contextlib
import os

from ..errors import CacheError
from . import _files
from ._entry import RECORD_V1, CacheEntry, CorruptEntryError, loads
from ._files import (
    _READ_FLAGS,
    _TEMP_FLAGS,
    COMPLETE_MODE,
    FILE_MODE,
    TEMP_PREFIX,
    FileIdent,
    _check_cap,
    _complete,
    _fill,
    _ident,
    _listed,
    _opened,
    _rename_or_remove,
    _rmdir_quietly,
    _strerror,
    _unlink_quietly,
)
from ._fs import DIR_MODE, NAME_MAX, attachment_name, check_name, fit_name
from ._layout import CacheDirs
from ._lock import acquire
from ._names import _describe, _shared_name, _usable_record

__all__ = ["OpenRecord", "Records"]


class OpenRecord:
    """A record ``cache.wal.begin`` wrote, kept open until its ADD ends (a context
    manager); ``json``: the record's JSON (for ``completed_json``)."""

    __slots__ = ("_fd", "json")

    def __init__(self, data: bytes, fd: int) -> None:
        self.json = data
        self._fd = fd

    def complete(self) -> None:
        """Mark the record complete once the ADD's entry is written: one ``fchmod`` (its sticky
        bit), no fsync. A failure leaves it unmarked: complete while its entry exists, else in
        progress (a DEL too many, never a leak)."""
        if self._fd < 0:
            return  # closed: its number may be another file's now
        try:  # noqa: SIM105 - on ADD's hot path, contextlib.suppress costs as much as the call
            os.fchmod(self._fd, COMPLETE_MODE)
        except OSError:
            pass

    def close(self) -> None:
        """Close the record's descriptor (once)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> OpenRecord:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Records:
    """Write, read, remove and list the write-ahead records (part of ``ResultCache``)."""

    def __init__(self, dirs: CacheDirs) -> None:
        self.dirs = dirs
        self.results_dir = dirs.results_dir
        self.records_dir = dirs.records_dir
        self.locks_dir = dirs.locks_dir

    def path(self, network: str, container_id: str, ifname: str) -> str:
        """The path of the write-ahead record of one attachment (names checked as everywhere)."""
        return os.path.join(
            self.records_dir, container_id, attachment_name(network, container_id, ifname)
        )

    def write(self, entry: CacheEntry) -> bytes:
        """:meth:`begin`, closed at once (never marked complete); the record's JSON."""
        with self.begin(entry) as record:
            return record.json

    def begin(self, entry: CacheEntry) -> OpenRecord:
        """Record the attachment of ``entry`` as in progress; kept open until its ADD ends.

        Called holding the attachment's lock, before the first plugin. A new
        record is written in place (killed meanwhile, no plugin ran: an unusable
        record GC removes); one already there is replaced atomically (a temporary
        file renamed over it); *another* attachment's sharing the file name never
        (``CacheError`` naming both). Not fsynced; never over ``MAX_ENTRY_SIZE``.
        On failure nothing is left and ``CacheError`` names the path.
        """
        network, container_id, ifname = entry.network_name, entry.container_id, entry.ifname
        name = attachment_name(network, container_id, ifname)
        path = f"{self.records_dir}/{container_id}/{name}"
        data = (entry if entry.is_record else entry.as_record()).to_json()
        action = f"write the record {path}"
        _check_cap(data, f"cannot {action}")
        # The hot path of every ADD (5 system calls): records/ checked with one lstat
        # (its descriptor is kept), the container's directory checked with one lstat
        # (only this user and root can make anything in records/), the record created
        # through them.
        top = self.dirs.fd(self.records_dir, create=True, action=action)
        assert top is not None  # created, or CacheError
        made = False
        # Bounded: a DEL of the container's last record removes the directory; each
        # turn re-creates it, and only ADDs and DELs of one container racing loop.
        for _ in range(100):
            # (A directory this call made is this user's, mode 0700: not checked.)
            if not made and not self.dirs.container_checked(top, container_id, action):
                made = _mkdir_at(top, container_id, action)
                continue
            made = False
            fd = self._create_record(top, container_id, name, data, path, entry)
            if fd is not None:
                return OpenRecord(data, fd)
        raise CacheError(f"cannot {action}: its directory keeps being removed")

    def _create_record(
        self, top: int, container_id: str, name: str, data: bytes, path: str, entry: CacheEntry
    ) -> int | None:
        """Write the record ``name`` of ``container_id`` (``top``: ``records/``), in place or over
        an existing one; its open descriptor, or ``None`` if the directory was removed meanwhile."""
        action = f"write the record {path}"
        try:
            fd = os.open(f"{container_id}/{name}", _TEMP_FLAGS, FILE_MODE, dir_fd=top)
        except FileNotFoundError:
            return None  # the directory was removed meanwhile (its last record DELeted)
        except FileExistsError:
            # One is there (an earlier ADD of it): replaced atomically.
            dfd = self.dirs.open_container(top, container_id, action=action)
            if dfd is None:
                return None
            try:
                if _shared_name(name, container_id):  # another attachment's is never replaced
                    names = (entry.network_name, container_id, entry.ifname)
                    self._check_record_owner(dfd, name, path, *names)
                return _replace_at(dfd, name, data, path)
            finally:
                os.close(dfd)
        except OSError as e:
            raise CacheError(f"cannot {action}", _strerror(e)) from None
        _fill(fd, data, dfd=top, name=f"{container_id}/{name}", error=f"cannot {action}", keep=True)
        return fd

    def _check_record_owner(
        self, dfd: int, name: str, path: str, network: str, container_id: str, ifname: str
    ) -> None:
        """Refuse (``CacheError``) to replace the record there if it is another attachment's."""
        try:
            mine, ident = _record_at(dfd, name, path, network, container_id, ifname)
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

    def read(self, network: str, container_id: str, ifname: str) -> CacheEntry | None:
        """The write-ahead record of one attachment, or ``None`` (none, another attachment's, or
        complete with its entry gone: dropped). Unusable: :class:`CorruptEntryError`; unreadable
        or a refused directory: ``CacheError``."""
        name = attachment_name(network, container_id, ifname)
        path = os.path.join(self.records_dir, container_id, name)
        with self.dirs.container_dir(container_id, action=f"read the record {path}") as d:
            if d is None:
                return None
            record, ident = _record_at(d[1], name, path, network, container_id, ifname)
        if record is None or ident is None or self.gone(container_id, name, ident):
            return None
        return record

    def remove(self, network: str, container_id: str, ifname: str) -> bool:
        """Remove the record of one attachment (DEL's end); whether it was there.

        Another attachment's is left, an unusable one removed (a symlink itself),
        an unreadable one raises ``CacheError``. An emptied directory goes too.
        """
        name = attachment_name(network, container_id, ifname)
        path = f"{self.records_dir}/{container_id}/{name}"
        action = f"remove the record {path}"
        if not _shared_name(name, container_id):
            # DEL's hot path (4 system calls): the file names this attachment alone.
            top = self.dirs.fd(self.records_dir, create=False, action=action)
            if top is None or not self.dirs.container_checked(top, container_id, action):
                return False
            return _unlink_record(
                top, f"{container_id}/{name}", top=top, container_id=container_id, action=action
            )
        with self.dirs.container_dir(container_id, action=action) as dirs:
            if dirs is None:
                return False
            top, dfd = dirs
            # A name two attachments can share: the names inside tell whose it is.
            try:
                record, _ = _record_at(dfd, name, path, network, container_id, ifname)
                if record is None:
                    return False
            except CorruptEntryError:
                pass
            except CacheError as e:
                raise CacheError(
                    f"cannot {action}: cannot read it to check whose it is", e.details
                ) from None
            return _unlink_record(dfd, name, top=top, container_id=container_id, action=action)

    def drop(self, container_id: str, name: str, ident: FileIdent) -> bool:
        """Remove the record ``name`` of ``container_id`` a read found unusable (or complete with
        its entry gone), if it is still that file (``ident``), ``results/<name>`` still absent
        and no one holds the attachment's lock (an ADD); whether it was removed."""
        path = os.path.join(self.records_dir, container_id, name)
        action = f"remove the record {path}"
        entry = os.path.join(self.results_dir, name)
        lk = acquire(
            self.locks_dir,
            fit_name(name, "record"),
            exclusive=True,
            timeout=0,
            entry=entry,
            dirs=self.dirs.lock_dir,
        )
        if lk is None:
            return False
        try:
            with self.dirs.container_dir(container_id, action=action) as dirs:
                if dirs is None or self._has_entry(name):
                    return False
                top, dfd = dirs
                try:
                    if _ident(os.stat(name, dir_fd=dfd, follow_symlinks=False)) != ident:
                        return False
                except FileNotFoundError:
                    return False
                except OSError as e:
                    raise CacheError(f"cannot {action}", _strerror(e)) from None
                return _unlink_record(dfd, name, top=top, container_id=container_id, action=action)
        finally:
            lk.release()

    def unmark(self, container_id: str, name: str) -> None:
        """Take the complete mark off the record ``name`` of ``container_id``: GC removes its
        entry as unusable, but no one DELeted it (in progress again). ``CacheError`` on failure."""
        path = f"{self.records_dir}/{container_id}/{name}"
        try:
            top = self.dirs.fd(self.records_dir, create=False, action=f"unmark the record {path}")
            if top is None:
                return
            fd = os.open(f"{container_id}/{name}", _READ_FLAGS, dir_fd=top)
            try:
                os.fchmod(fd, FILE_MODE)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return
        except OSError as e:
            raise CacheError(f"cannot unmark the record {path}", _strerror(e)) from None

    def _has_entry(self, name: str) -> bool:
        """Whether ``results/<name>`` exists (an entry, of any content; ``True`` when it
        cannot be told)."""
        try:
            dfd = self.dirs.fd(self.results_dir, create=False, action="read the cache entries")
            if dfd is not None:
                os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except (OSError, CacheError):
            return True
        return dfd is not None

    def gone(self, container_id: str, name: str, ident: FileIdent) -> bool:
        """Whether the record ``name``, read with ``ident``, is complete with its entry gone (another
        tool DELeted it): then it is dropped (best effort), never in progress."""
        if not _complete(ident) or self._has_entry(name):
            return False
        with contextlib.suppress(CacheError):  # else left for the next reader or GC
            self.drop(container_id, name, ident)
        return True

    def records(self, container_id: str = "") -> list[CacheEntry]:
        """Every usable record, of one container if ``container_id`` (only its directory is listed),
        by file name. Skipped as :meth:`read` does, and records not named as their file,
        temporaries and (listing all) refused container directories."""
        action = "list the records"
        out: list[CacheEntry] = []
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
                with self.dirs.container_dir(cid, action=action) as dirs:
                    if dirs is not None:
                        self._records_in(dirs[1], cid, out)
            except CacheError:
                if container_id:
                    raise
        out.sort(key=lambda r: f"{r.network_name}-{r.container_id}-{r.ifname}")
        return out

    def _records_in(self, dfd: int, container_id: str, out: list[CacheEntry]) -> None:
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
                data, ident = _files._read_ident_at(dfd, name, path)
            except (FileNotFoundError, CacheError):
                continue  # gone, unusable (GC's) or cannot be read now: neither used nor removed
            record = _usable_record(data, path, container_id=container_id, name=name)
            if record is not None and not self.gone(container_id, name, ident):
                out.append(record)

    def container_names(self, container_id: str, action: str) -> tuple[int, list[str]] | None:
        """``records/``'s descriptor and the container's sorted record names, or ``None`` when it
        has none. Its directory is checked with one ``lstat`` through ``records/`` and listed by
        path: only this user and root can make anything in ``records/``."""
        top = self.dirs.fd(self.records_dir, create=False, action=action)
        if top is None or not self.dirs.container_checked(top, container_id, action):
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


def _unlink_record(dfd: int, name: str, *, top: int, container_id: str, action: str) -> bool:
    """Unlink the record ``name`` of ``dfd``, then the container's directory (in ``top``)
    if it is empty; whether the record was there."""
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise CacheError(f"cannot {action}", _strerror(e)) from None
    _rmdir_quietly(top, container_id)
    return True


def _record_at(
    dfd: int, name: str, path: str, network: str, container_id: str, ifname: str
) -> tuple[CacheEntry | None, FileIdent | None]:
    """The record in the file ``name`` of ``dfd`` if it is this attachment's, and its identity.

    ``(None, None)``: no file; ``(None, ident)``: another attachment's record.
    Unusable: ``CorruptEntryError``; unreadable: ``CacheError``.
    """
    try:
        data, ident = _files._read_ident_at(dfd, name, path)
    except FileNotFoundError:
        return None, None
    record = CacheEntry.from_dict(loads(data, path), source=path, kind=RECORD_V1)
    held = (record.network_name, record.container_id, record.ifname)
    if not all(held):
        raise CorruptEntryError(f"record {path} lacks a network, container or interface name")
    if held != (network, container_id, ifname):
        return None, ident
    return record, ident


def _mkdir_at(top: int, name: str, action: str) -> bool:
    """Make the directory ``name`` of ``top`` (0700); whether this call made it."""
    try:
        os.mkdir(name, DIR_MODE, dir_fd=top)
    except FileExistsError:
        return False
    except OSError as e:
        raise CacheError(f"cannot {action}: cannot create its directory", _strerror(e)) from None
    return True


def _replace_at(dfd: int, name: str, data: bytes, path: str) -> int | None:
    """Write ``data`` to a temporary file of ``dfd`` renamed to ``name``; its open descriptor,
    or ``None`` if the directory was removed meanwhile.

    The temporary file is ``.<name>`` (its writer holds the attachment's lock:
    a killed writer's is removed here, or by GC once the lock is free); a name
    too long for the dot gets ``..<hex>``, removed after ``TEMP_STALE_AFTER``."""
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
                _unlink_quietly(dfd, tmp)  # a killed writer's
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CacheError(
                f"cannot write the record {path}: cannot create a temporary file",
                _strerror(e),
            ) from None
    else:  # pragma: no cover - a temporary file re-created ten times meanwhile
        raise CacheError(f"cannot write the record {path}: no free temporary name")
    error = f"cannot write the record {path}"
    _fill(fd, data, dfd=dfd, name=tmp, error=error, keep=True)
    try:
        _rename_or_remove(dfd, tmp, to=name, error=error)
    except BaseException:
        os.close(fd)
        raise
    return fd
