"""``ResultCache``: the on-disk cache of attachments, the facade over its parts.

Each job of the cache is a part in its own module, and :class:`ResultCache`
is all of them over one directory:

- :mod:`._results` (:class:`~._results.Entries`): the entries of ``results/``;
- :mod:`._records` (:class:`~._records.Records`): the write-ahead records of
  ``records/<containerID>/``;
- :mod:`._locks` (:class:`~._locks.Locks`): the attachment, network and
  container locks (files of ``locks/``, taken as :mod:`._lock` says);
- :mod:`._cleanup` (:class:`~._cleanup.CleanUp`): GC's removals of what is
  stale or corrupt;

on :mod:`._layout` (the directories, kept open), :mod:`._files` (reading and
writing one file) and :mod:`._names` (whose a file is). What spans two parts
is here: a container's index (:meth:`ResultCache.attachments_of`), DEL's end
(:meth:`ResultCache.forget`) and GC's clean-up of one network's corrupt entries
(:meth:`ResultCache.remove_corrupt`, a :class:`~._gc.GCScan` of it).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import CacheError
from . import _files
from ._cleanup import CleanUp
from ._entry import CacheEntry
from ._files import MAX_ENTRY_SIZE, TEMP_PREFIX, TEMP_STALE_AFTER, FileIdent
from ._fs import check_name, fit_name
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


class ResultCache(Entries, Records, Locks, CleanUp):
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

    def __repr__(self) -> str:
        return f"ResultCache({self.dir!r})"

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

    def attachments_of(self, container_id: str) -> tuple[list[CacheEntry], list[CacheEntry]]:
        """What the cache holds of one container: its complete entries and its records
        without an entry (in progress), each by file name.

        The container's records directory is its index: an ADD records every
        attachment there before its first plugin runs, and the record stays
        until the attachment is DELeted (a record marked complete whose entry
        is gone was DELeted by another tool: it is dropped, not listed). So
        only ``records/<containerID>/`` is listed, and each attachment's entry
        is read by its name: the cost does not depend on what else is cached. A container without that directory
        (or with nothing in it) was set up by the Go library or an older
        libcni: it is found as :meth:`entries` finds it, by a listing of
        ``results/``. A records directory that is refused (another owner,
        writable by others, a symlink) raises ``CacheError``.
        """
        fit_name(f"n-{check_name(container_id, 'container ID')}-i", "container ID")
        action = f"list the attachments of container {container_id!r}"
        listed = self._container_names(container_id, action)
        if not listed:
            entries = self.entries(container_id)
            complete = {(e.network_name, e.ifname) for e in entries}
            return entries, [
                r for r in self.records(container_id) if (r.network_name, r.ifname) not in complete
            ]
        top, names = listed
        rdfd = self._dir(self.results_dir, create=False, action=action)
        entries = []
        for name in names:
            if rdfd is None:
                break
            entry = self._load_listed(rdfd, name)
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
            record = _usable_record(data, path, container_id, name)
            if (
                record is not None
                and (record.network_name, record.ifname) not in complete
                and not self._gone(container_id, name, ident)
            ):
                records.append(record)
        return entries, records

    def remove_corrupt(
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

        scan = GCScan(self, networks=(network,))
        scan.survey()
        work = scan.collect(network, tuple(valid), older_than, records=False)
        return work.removed, work.errors

    def remove_unreadable(
        self,
        network: str,
        valid: Iterable[tuple[str, str]] = (),
        older_than: float = 30.0,
    ) -> tuple[list[str], list[CacheError]]:
        """The former name of :meth:`remove_corrupt`, which never removes an unreadable entry."""
        return self.remove_corrupt(network, valid, older_than)
