"""``ResultCache``: the on-disk cache of attachments, a facade over its parts.

Each job of the cache is a part in its own module: ``cache.results``
(:class:`~._results.Entries`), ``cache.wal`` (:class:`~._records.Records`),
``cache.locks`` (:class:`~._locks.Locks`), ``cache.cleanup``
(:class:`~._cleanup.CleanUp`), over one shared ``cache.dirs``
(:class:`~._layout.CacheDirs`). The facade keeps what a tool
that inspects or migrates a cache uses, and what spans two parts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from ..errors import CacheError
from . import _files
from ._cleanup import CleanUp
from ._entry import CacheEntry
from ._files import MAX_ENTRY_SIZE, TEMP_PREFIX, TEMP_STALE_AFTER, FileIdent
from ._fs import check_name, fit_name
from ._gc import GCScan
from ._layout import CacheDirs
from ._lock import CacheLock
from ._locks import Locks
from ._names import _shared_name, _usable_record
from ._records import Records
from ._results import Entries

__all__ = [
    "MAX_ENTRY_SIZE",
    "TEMP_PREFIX",
    "TEMP_STALE_AFTER",
    "FileIdent",
    "ResultCache",
]


class ResultCache:
    """The cache of attachments under ``dir`` (the Go library's layout: docs/cache.rst).

    Every method checks the three names first and raises
    :class:`~libcni.errors.ValidationError` for one that is empty, ``.``,
    ``..`` or holds ``/`` or NUL, for a network name starting with ``.``, and
    for a file name longer than 255 bytes: nothing is ever read, written or
    removed outside ``<dir>/results/``. An attachment's lock file goes away
    with its entry (on release), and GC removes the ones no one holds.
    """

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dirs = CacheDirs(dir)
        self.dir: str = self.dirs.dir
        """The cache directory (``/var/lib/cni`` by default in the API)."""
        self.results_dir: str = self.dirs.results_dir
        """The directory of the entries."""
        self.locks_dir: str = self.dirs.locks_dir
        """The directory of the lock files."""
        self.records_dir: str = self.dirs.records_dir
        """The directory of the write-ahead records, one directory per container."""
        self.results = Entries(self.dirs)
        self.wal = Records(self.dirs)
        self.locks = Locks(self.dirs)
        self.cleanup = CleanUp(self.dirs)

    def __repr__(self) -> str:
        return f"ResultCache({self.dir!r})"

    # -- entries (results/): see Entries ----------------------------------------------

    def write(self, entry: CacheEntry, data: bytes | None = None) -> None:
        """Store ``entry`` atomically and durably, holding its :meth:`lock`."""
        self.results.write(entry, data)

    def read(self, network: str, container_id: str, ifname: str) -> CacheEntry | None:
        """The entry of one attachment, or ``None``."""
        return self.results.read(network, container_id, ifname)

    def remove(self, network: str, container_id: str, ifname: str) -> bool:
        """Remove the entry of one attachment; whether a file was removed."""
        return self.results.remove(network, container_id, ifname)

    def check_owner(self, network: str, container_id: str, ifname: str) -> None:
        """Raise ``CacheError`` if the entry's path holds another attachment's entry."""
        self.results.check_owner(network, container_id, ifname)

    def entries(self, container_id: str = "") -> list[CacheEntry]:
        """Every readable entry, of one container if ``container_id``, by file name."""
        return self.results.entries(container_id)

    def entry_path(self, network: str, container_id: str, ifname: str) -> str:
        """The path of the entry of one attachment."""
        return self.results.entry_path(network, container_id, ifname)

    # -- write-ahead records (records/<containerID>/): see Records ----------------------

    def records(self, container_id: str = "") -> list[CacheEntry]:
        """Every usable record, of one container if ``container_id``, by file name."""
        return self.wal.records(container_id)

    def read_record(self, network: str, container_id: str, ifname: str) -> CacheEntry | None:
        """The write-ahead record of one attachment, or ``None``."""
        return self.wal.read(network, container_id, ifname)

    def record_path(self, network: str, container_id: str, ifname: str) -> str:
        """The path of the write-ahead record of one attachment."""
        return self.wal.path(network, container_id, ifname)

    # -- locks (locks/): see Locks ----------------------------------------------------

    def lock(
        self, network: str, container_id: str, ifname: str, *, timeout: float | None = None
    ) -> CacheLock:
        """Take the exclusive lock of one attachment, waiting at most ``timeout`` seconds."""
        return self.locks.lock(network, container_id, ifname, timeout=timeout)

    def try_lock(self, network: str, container_id: str, ifname: str) -> CacheLock | None:
        """:meth:`lock` without waiting: ``None`` if someone else holds it."""
        return self.locks.try_lock(network, container_id, ifname)

    def network_lock(
        self, network: str, exclusive: bool, *, timeout: float | None = None
    ) -> CacheLock:
        """Take the lock of a whole network, waiting at most ``timeout`` seconds."""
        return self.locks.network_lock(network, exclusive, timeout=timeout)

    def try_network_lock(self, network: str, exclusive: bool) -> CacheLock | None:
        """:meth:`network_lock` without waiting: ``None`` if it is busy."""
        return self.locks.try_network_lock(network, exclusive)

    def container_lock(self, container_id: str, timeout: float | None = None) -> CacheLock:
        """Take the lock of a whole container, waiting at most ``timeout`` seconds."""
        return self.locks.container_lock(container_id, timeout)

    def try_container_lock(self, container_id: str) -> CacheLock | None:
        """:meth:`container_lock` without waiting: ``None`` if it is busy."""
        return self.locks.try_container_lock(container_id)

    def attachment_lock_path(self, network: str, container_id: str, ifname: str) -> str:
        """The lock file of one attachment (:meth:`lock`)."""
        return self.locks.attachment_lock_path(network, container_id, ifname)

    def network_lock_path(self, network: str) -> str:
        """The lock file of a network (:meth:`network_lock`)."""
        return self.locks.network_lock_path(network)

    def container_lock_path(self, container_id: str) -> str:
        """The lock file of a container (:meth:`container_lock`)."""
        return self.locks.container_lock_path(container_id)

    # -- what spans two parts --------------------------------------------------------

    def forget(
        self, network: str, container_id: str, ifname: str, ident: FileIdent | None = None
    ) -> bool:
        """What DEL does once every plugin succeeded: remove the entry (without reading it
        again while it is still the file read with ``ident``), then the record; whether an
        entry was removed.

        If the entry cannot be removed the record stays (``CacheError``).
        """
        removed = self.results.remove_read(network, container_id, ifname, ident)
        self.wal.remove(network, container_id, ifname)
        return removed

    def attachments_of(self, container_id: str) -> tuple[list[CacheEntry], list[CacheEntry]]:
        """What the cache holds of one container: its complete entries and its records
        without an entry (in progress), each by file name.

        Only ``records/<containerID>/`` (the container's index) is listed and
        each attachment's entry read by its name: the cost does not depend on
        what else is cached. A container without that directory (set up by
        the Go library or an older libcni) is found by a listing of
        ``results/``, as :meth:`entries` does. A record marked complete whose
        entry is gone is dropped, not listed; a refused records directory
        raises ``CacheError``.
        """
        fit_name(f"n-{check_name(container_id, 'container ID')}-i", "container ID")
        action = f"list the attachments of container {container_id!r}"
        listed = self.wal.container_names(container_id, action)
        if not listed:
            entries = self.results.entries(container_id)
            complete = {(e.network_name, e.ifname) for e in entries}
            return entries, [
                r
                for r in self.wal.records(container_id)
                if (r.network_name, r.ifname) not in complete
            ]
        top, names = listed
        rdfd = self.dirs.fd(self.results_dir, create=False, action=action)
        entries = []
        for name in names:
            if rdfd is None:
                break
            entry = self.results.load_listed(rdfd, name)
            if entry is not None and entry.container_id == container_id:
                entries.append(entry)
        complete = {(e.network_name, e.ifname) for e in entries}
        done = {f"{e.network_name}-{container_id}-{e.ifname}" for e in entries}
        base = f"{self.records_dir}/{container_id}"
        records: list[CacheEntry] = []
        for name in names:
            if name in done and not _shared_name(name, container_id):
                continue  # complete: its record is not needed
            path = f"{base}/{name}"
            try:
                data, ident = _files._read_ident_at(top, f"{container_id}/{name}", path)
            except (FileNotFoundError, CacheError):
                continue  # gone, or unusable or unreadable now: as records() skips it
            record = _usable_record(data, path, container_id=container_id, name=name)
            if (
                record is not None
                and (record.network_name, record.ifname) not in complete
                and not self.wal.gone(container_id, name, ident)
            ):
                records.append(record)
        return entries, records

    def containers(self) -> list[str]:
        """Every container with an entry or a record (complete or in progress), sorted.

        One listing of ``records/`` (and each container's directory) and one of
        ``results/``: only the entries without a record (the Go library's,
        cnitool's, an older libcni's) are read, for their ``containerId``. A
        directory that cannot be listed raises ``CacheError``.
        """
        action = "list the containers"
        owners = self._record_owners(action)  # a record's file name -> the containers holding it
        found: set[str] = set()
        dfd = self.dirs.fd(self.results_dir, create=False, action=action)
        for name in [] if dfd is None else _files._listed(dfd, self.results_dir, action):
            if dfd is None or name.startswith(TEMP_PREFIX):
                continue
            if name in owners:
                found |= owners[name]
                continue
            entry = self.results.load_listed(dfd, name)
            if entry is not None and entry.container_id:
                found.add(entry.container_id)
        for cid in {c for cids in owners.values() for c in cids} - found:
            with contextlib.suppress(CacheError):
                if self.wal.records(cid):
                    found.add(cid)
        return sorted(found)

    def _record_owners(self, action: str) -> dict[str, set[str]]:
        owners: dict[str, set[str]] = {}
        top = self.dirs.fd(self.records_dir, create=False, action=action)
        for cid in [] if top is None else _files._listed(top, self.records_dir, action):
            try:
                if top is not None and self.dirs.container_checked(top, cid, action):
                    for name in os.listdir(f"{self.records_dir}/{cid}"):
                        owners.setdefault(name, set()).add(cid)
            except (OSError, CacheError):
                continue  # refused, or gone meanwhile: as records() skips it
        return owners

    def remove_corrupt(
        self,
        network: str,
        valid: Iterable[tuple[str, str]] = (),
        older_than: float = 30.0,
    ) -> tuple[list[str], list[CacheError]]:
        """Remove the entries of ``network`` whose content is unusable; GC's clean-up.

        Returns the file names removed and the errors met (none stops it).
        Unusable: empty, not JSON, not an object, over ``MAX_ENTRY_SIZE``, a
        symlink or not a regular file, a ``cniCacheV1`` object wrongly typed or
        not named as its file (a legacy bare result is usable). Never removed: an
        entry that cannot be *read* (its error is returned); one named in
        ``valid`` (``(container ID, interface name)`` pairs); another network's
        (by its ``networkName``, or, naming none, by a file name that can be a
        network's met in this scan: ``a-b-c-eth0`` may be ``a-b``'s); one modified
        less than ``older_than`` seconds ago (the Go library writes in place); one
        whose attachment lock is held.
        """
        scan = GCScan(self, networks=(network,))
        scan.survey()
        work = scan.collect(network, tuple(valid), older_than, records=False)
        return work.removed, work.errors

    remove_unreadable = remove_corrupt
    """The former name of :meth:`remove_corrupt`, which never removes an unreadable entry."""
