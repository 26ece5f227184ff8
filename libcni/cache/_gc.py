"""GC's view of the cache for one run (:class:`GCScan`): one listing, each file read at most once.

:meth:`GCScan.survey` lists ``results/``, ``records/`` and each container's
directory once and splits the names by the networks they can belong to;
under each network's GC lock :meth:`GCScan.refresh` lists ``results/`` again
if it changed, and :meth:`GCScan.collect` says what GC of that network must
do (and removes its unusable entries). Made only by ``CNIConfig.gc_networks``
and ``ResultCache.remove_corrupt``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from ..errors import CacheError
from . import _files
from ._cleanup import CleanUp
from ._entry import CacheEntry, CorruptEntryError, loads
from ._files import TEMP_PREFIX, FileIdent, _complete, _ident, _listed, _strerror
from ._fs import check_name, open_dir, untrusted
from ._layout import CacheDirs
from ._locks import Locks
from ._names import (
    _names_held,
    _only_of,
    _shared_name,
    _usable_entry,
    _usable_listed,
    _usable_record,
)
from ._records import Records

__all__ = ["GCScan", "GCWork"]

RECENT = 2_000_000_000
"""Nanoseconds: ``results/`` modified this close to its listing may have changed since
within its timestamps' granularity (one second or coarser): listed again before it is
trusted under the next network's lock."""

RECENT_FINE = 20_000_000
"""Nanoseconds: :data:`RECENT` for timestamps finer than a second: two ticks of the
kernel's coarse clock (``HZ`` = 100), which stamps them."""


def _dash_splits(rest: str) -> list[tuple[str, str]]:
    """Every ``(containerID, ifname)`` that ``rest`` (``<containerID>-<ifname>``) can be."""
    out = []
    i = rest.find("-", 1)
    while 0 < i < len(rest) - 1:
        out.append((rest[:i], rest[i + 1 :]))
        i = rest.find("-", i + 1)
    return out


def prefixes(name: str) -> list[str]:
    """The networks whose entry the file ``name`` can be, by its name alone: ``<network>``
    ends at a ``-`` followed by ``<containerID>-<ifname>``."""
    last = name.rfind("-", 0, len(name) - 1)  # the last dash that can end a container ID
    out = []
    i = name.find("-", 1)
    while 0 < i <= last - 2:
        out.append(name[:i])
        i = name.find("-", i + 1)
    return out


class _Cache(Protocol):
    """What a scan uses of a ``ResultCache`` (not imported: it imports this module)."""

    dirs: CacheDirs
    wal: Records
    locks: Locks
    cleanup: CleanUp
    results_dir: str
    records_dir: str


class _Read:
    """One file read: ``state`` "ok" (``obj``), "missing", "corrupt" or "error" (I/O);
    ``under``: the network whose lock was held then."""

    __slots__ = ("error", "held", "ident", "obj", "state", "under")

    def __init__(
        self,
        state: str,
        obj: Any = None,
        ident: FileIdent | None = None,
        error: CacheError | None = None,
        under: str | None = None,
    ) -> None:
        self.state, self.obj, self.ident, self.error, self.under = state, obj, ident, error, under
        self.held = _names_held(obj) if state == "ok" else ("", "", "")  # the names inside


class GCWork:
    """What GC must do for one network (:meth:`GCScan.collect`)."""

    __slots__ = ("errors", "in_progress", "removed", "stale", "unusable_records", "valid")

    def __init__(self) -> None:
        self.stale: list[CacheEntry] = []  # usable entries not valid (to DEL; read again)
        self.in_progress: list[CacheEntry] = []  # records without entry, not valid (to DEL)
        self.valid: dict[tuple[str, str], None] = {}  # valid containers' attachments met
        self.unusable_records: list[tuple[str, str, FileIdent]] = []  # (cid, name, ident)
        self.removed: list[str] = []  # unusable entries removed
        self.errors: list[CacheError] = []  # what could not be read or removed


class GCScan:
    """One GC run's listing of the cache (see the module). ``keep``: the valid containers,
    every attachment of which is valid; ``networks``: the run's."""

    def __init__(
        self, cache: _Cache, keep: Iterable[str] | None = None, networks: Iterable[str] = ()
    ) -> None:
        self._cache = cache
        self.keep = frozenset(keep) if keep else frozenset()
        self.surveyed = False
        self.names: set[str] = set()  # results/ (temporaries left out)
        self._temporaries: list[str] = []
        self._by_network: dict[str, set[str]] = {}  # network -> names it can be the entry of
        self._listed: tuple[int, ...] | None = None  # results/ (dev, ino, mtime, ctime, when)
        self._containers: dict[str, list[str]] = {}  # cid -> its record file names
        self._record_names: dict[str, list[tuple[str, str]]] = {}  # network -> (cid, name)
        self._loaded: dict[str, _Read] = {}  # the files read, by path
        self._errors: list[CacheError] = []
        self._met: set[str] = set()  # networks named inside the entries read
        self._known: set[str] = set(networks)  # the networks of the run

    # -- listing -------------------------------------------------------------------

    def survey(self, discover: bool = False) -> None:
        """List ``results/``, ``records/`` and each container's directory, once; ``discover``:
        also read the entries no known network can claim, to learn the networks known only
        from the cache (:meth:`networks`). A refused directory raises ``CacheError``."""
        self.surveyed = True
        self._list_results()
        self._list_records()
        if not discover:
            return
        known = self._known | set(self._record_names)
        covered = set().union(*(self._by_network.get(n, ()) for n in known))
        dfd = self._results_fd()
        for name in sorted(self.names - covered):
            if dfd is not None and not any(p in known for p in prefixes(name)):
                known.add(self._read(dfd, name, None).held[0])  # ("" when it names none)

    def _list_results(self) -> None:
        action = "list the cache entries"
        dfd = open_dir(self._cache.results_dir, create=False, action=action)
        if dfd is None:
            self.names, self._listed = set(), None
            return
        try:
            st = os.fstat(dfd)
            listed_at = time.time_ns()
            try:
                names = _listed(dfd, self._cache.results_dir, action)
            except CacheError as e:
                self._errors.append(e)
                names = []
        finally:
            os.close(dfd)
        self._listed = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, listed_at)
        self._temporaries = [n for n in names if n.startswith(f"{TEMP_PREFIX}tmp-")]
        new = {n for n in names if not n.startswith(TEMP_PREFIX)}
        for name in new - self.names:
            for network in prefixes(name):
                self._by_network.setdefault(network, set()).add(name)
        for name in self.names - new:
            self._loaded.pop(self._path(name), None)
        self.names = new

    def _list_records(self) -> None:
        action, base = "list the records", self._cache.records_dir
        top = open_dir(base, create=False, action=action)
        if top is None:
            return
        try:
            for cid in sorted(_listed(top, base, action)):
                try:
                    st = os.stat(cid, dir_fd=top, follow_symlinks=False)
                    if untrusted(st, f"{base}/{cid}", action) is not None:
                        continue  # refused: never used (nor DELeted on its word)
                    names = sorted(os.listdir(f"{base}/{cid}"))  # only we and root write here
                except (OSError, CacheError):
                    continue
                self._containers[cid] = names
                part = f"-{cid}-"
                for name in names:
                    i = -1 if name.startswith(TEMP_PREFIX) else name.find(part, 1)
                    while i > 0:
                        if i + len(part) < len(name):
                            self._record_names.setdefault(name[:i], []).append((cid, name))
                        i = name.find(part, i + 1)
        finally:
            os.close(top)

    def refresh(self) -> None:
        """List ``results/`` again if it may have changed since (under the next network's lock)."""
        try:
            st = os.stat(self._cache.results_dir, follow_symlinks=False)
            now: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            now = None
        was = self._listed
        if was is None and now is None:
            return
        if was is not None and now == was[:4]:
            settled = RECENT_FINE if now[2] % 1_000_000_000 else RECENT
            if was[4] - now[2] >= settled:
                return
        self._list_results()

    # -- the networks ------------------------------------------------------------

    def networks(self) -> list[str]:
        """The networks the cache holds attachments of (records', entries read), sorted."""
        return sorted(set(self._record_names) | self._met)

    def attachment_of(self, network: str) -> CacheEntry | None:
        """A usable entry or record of ``network`` (its cached configuration), or ``None``."""
        check_name(network, "network name")
        dfd = self._results_fd()
        for name in sorted(self._by_network.get(network, ())):
            got = self._read(dfd, name, None) if dfd is not None else None
            if got is not None and got.state == "ok" and got.held[0] == network:
                entry = _usable_entry(got.obj, name, self._path(name))
                if entry is not None:
                    return entry
        for cid, name in sorted(self._record_names.get(network, ())):
            record = self._record(cid, name, None).obj
            if isinstance(record, CacheEntry) and record.network_name == network:
                return record
        return None

    # -- one network ---------------------------------------------------------------

    def collect(
        self,
        network: str,
        valid: Collection[tuple[str, str]] = (),
        older_than: float = 30.0,
        *,
        records: bool = True,
    ) -> GCWork:
        """What GC of ``network`` must do, holding its GC lock (``valid``: the valid attachments
        given); removes the network's unusable entries (:meth:`ResultCache.remove_corrupt`)."""
        check_name(network, "network name")
        self._known.add(network)
        work = GCWork()
        work.errors, self._errors = self._errors, []
        valid = set(valid)
        self._entries(network, valid, work, older_than)
        if records:
            self._records_of(network, valid, work)
        return work

    def _entries(
        self, network: str, valid: set[tuple[str, str]], work: GCWork, older_than: float
    ) -> None:
        """The stale entries to ``work.stale``, the valid containers' met to ``work.valid``,
        what cannot be read to ``work.errors``; the unusable ones removed."""
        prefix = f"{network}-"
        skip = {f"{prefix}{cid}-{ifname}" for cid, ifname in valid}
        broken: list[str] = []
        unnamed: list[tuple[str, CacheError | None]] = []  # unusable or unreadable: whose?
        guarded: set[str] = set()  # may be a valid container's: never removed
        dfd = self._results_fd()
        for name in sorted(self._by_network.get(network, set()) & self.names):
            if name in skip or dfd is None or self._kept_by_name(name, prefix, work, guarded):
                continue
            got = self._read(dfd, name, network)
            path = self._path(name)
            kind = _classify(
                got, name, path, network=network, valid=valid, keep=self.keep, work=work
            )
            if kind == "unnamed":
                unnamed.append((name, got.error))
            elif kind == "broken":
                broken.append(name)
        networks = self._known | self._met | set(self._record_names)
        for name, error in unnamed:  # (once every entry was read: the networks are known)
            if _only_of(name, network, networks):
                if error is not None:
                    work.errors.append(error)
                else:
                    broken.append(name)
        self._remove(network, sorted(n for n in broken if n not in guarded), older_than, work)

    def _kept_by_name(self, name: str, prefix: str, work: GCWork, guarded: set[str]) -> bool:
        """Whether the file name alone says the entry is a valid container's (its attachments
        go to ``work.valid``, unread). One that only may be is ``guarded`` (never removed)."""
        if not self.keep:
            return False
        splits = _dash_splits(name[len(prefix) :])
        theirs = [s for s in splits if s[0] in self.keep]
        if theirs and (
            len(theirs) == len(splits)
            or any(  # a record of a valid container names it alone: it is that one's
                name in self._containers.get(cid, ()) and not _shared_name(name, cid)
                for cid, _ in theirs
            )
        ):
            work.valid.update(dict.fromkeys(theirs))
            return True
        if theirs:
            guarded.add(name)
        return False

    def _records_of(self, network: str, valid: set[tuple[str, str]], work: GCWork) -> None:
        """The network's records without an entry: valid, stale (to DEL) or unusable."""
        for cid, name in sorted(self._record_names.get(network, ())):
            if name in self.names:
                continue  # its entry is there (or a file a DEL could not tell from it)
            pair = (cid, name[len(network) + len(cid) + 2 :])
            shared = _shared_name(name, cid)  # then only the names inside tell whose it is
            if pair in valid or (cid in self.keep and not shared):
                if pair not in valid and not self._complete(cid, name):
                    work.valid[pair] = None  # a valid container's, in progress
                continue
            got = self._record(cid, name, network)
            record = got.obj
            if got.state == "corrupt" and got.ident is not None and cid not in self.keep:
                work.unusable_records.append((cid, name, got.ident))
            elif isinstance(record, CacheEntry) and record.network_name == network:
                pair = (cid, record.ifname)
                if cid in self.keep:
                    work.valid[pair] = None
                elif pair not in valid:
                    work.in_progress.append(record)

    def _remove(self, network: str, broken: list[str], older_than: float, work: GCWork) -> None:
        """Remove the unusable entries ``broken``, unless modified lately or locked."""
        cache = self._cache
        action = f"clean up unreadable entries of network {network}"
        dfd = cache.dirs.fd(cache.results_dir, create=False, action=action) if broken else None
        if dfd is None:
            return
        cutoff = time.time() - older_than
        for name in broken:
            lk, splits = None, _dash_splits(name[len(network) + 1 :])
            try:
                # Every attachment of this file name takes this lock, whatever the split
                # (another network's ADD sharing the name may be writing it).
                lk = cache.locks.try_lock(network, *splits[0]) if splits else None
                if lk is None and splits:
                    continue  # busy: an operation works on it right now
                removed = self._unlink(dfd, network, name, cutoff, action)
            except CacheError as e:
                work.errors.append(e)
                continue
            finally:
                if lk is not None:
                    lk.release()
            if removed:
                self.names.discard(name)
                self._loaded.pop(self._path(name), None)
                work.removed.append(name)

    def _unlink(self, dfd: int, network: str, name: str, cutoff: float, action: str) -> bool:
        """Unlink the unusable entry ``name`` unless modified after ``cutoff``; whether it
        was. No one DELeted it: the complete mark of its record, if any, is taken off."""
        try:
            if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime > cutoff:
                return False
            for cid, _ in _dash_splits(name[len(network) + 1 :]):
                if name in self._containers.get(cid, ()):
                    self._cache.wal.unmark(cid, name)  # its record is in progress again
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        except OSError as e:
            error = f"cannot {action}: cannot remove {self._path(name)}"
            raise CacheError(error, _strerror(e)) from None
        return True

    # -- reading -------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return f"{self._cache.results_dir}/{name}"

    def _results_fd(self) -> int | None:
        results = self._cache.results_dir
        return self._cache.dirs.fd(results, create=False, action="read the cache entries")

    def _read(self, dfd: int, name: str, network: str | None) -> _Read:
        """The entry ``name``, read once (as :meth:`_load`)."""
        got = self._load(dfd, name, self._path(name), network, loads)
        if got.held[0]:
            self._met.add(got.held[0])
        return got

    def _record(self, cid: str, name: str, network: str | None) -> _Read:
        """The record ``name`` of ``cid``, read once (as :meth:`_load`); its ``obj`` is the
        usable record, else ``None``."""
        cache = self._cache
        top = cache.dirs.fd(cache.records_dir, create=False, action="read the records")
        if top is None:
            return _Read("missing")

        def decode(data: bytes, path: str) -> CacheEntry:
            # A completed ADD's record whose entry is gone (another tool DELeted it) is
            # dropped as an unusable one is, never DELeted.
            gone = self._complete(cid, name)
            record = None if gone else _usable_record(data, path, container_id=cid, name=name)
            if record is None:
                raise CorruptEntryError(f"record {path} is unusable")
            return record

        return self._load(
            top, f"{cid}/{name}", f"{cache.records_dir}/{cid}/{name}", network, decode
        )

    def _complete(self, cid: str, name: str) -> bool:
        """Whether the record ``name`` of ``cid`` is marked complete (its ADD returned) while
        ``results/`` holds no entry of it: another tool DELeted the attachment."""
        cache = self._cache
        top = cache.dirs.fd(cache.records_dir, create=False, action="read the records")
        ident = None if top is None else _stat_ident(top, f"{cid}/{name}")
        return ident is not None and _complete(ident) and name not in self.names

    def _load(
        self,
        dfd: int,
        rel: str,
        path: str,
        network: str | None,
        decode: Callable[[bytes, str], Any],
    ) -> _Read:
        """The file ``rel`` of ``dfd`` read once: again only if ``stat`` says it changed since a
        read made outside ``network``'s lock."""
        got = self._loaded.get(path)
        if got is None or (got.under != network and _stat_ident(dfd, rel) != got.ident):
            got = self._loaded[path] = _read_file(dfd, rel, path, network, decode)
        got.under = network
        return got

    # -- the run's clean-up ------------------------------------------------------------

    def clean_up(self) -> tuple[list[str], list[str]]:
        """What killed writers left (temporary entries once stale, temporary records), then
        the lock files no one holds; the paths removed of the first two kinds."""
        cache = self._cache
        temporaries = cache.cleanup.remove_stale_temporaries(self._temporaries)
        records = cache.cleanup.sweep_records(self._containers)
        cache.cleanup.remove_orphan_locks(self.names)
        return temporaries, records


def _classify(
    got: _Read,
    name: str,
    path: str,
    *,
    network: str,
    valid: set[tuple[str, str]],
    keep: frozenset[str],
    work: GCWork,
) -> str:
    """What the entry ``name`` read for GC of ``network`` is: ``"broken"`` (unusable),
    ``"unnamed"`` (names no network, unusable or unreadable: told once every entry was
    read), else ``""`` (gone, another network's, usable, or noted in ``work``)."""
    obj, held = got.obj, got.held
    if got.state == "missing" or held[0] not in ("", network):
        return ""  # gone, or another network's
    if not held[0]:  # names no network: a legacy bare result is usable
        ok = got.state == "ok" and isinstance(obj, dict)
        return "" if ok and _usable_listed(obj, name, path) else "unnamed"
    if (held[1], held[2]) in valid:
        return ""
    if held[1] in keep and name == f"{network}-{held[1]}-{held[2]}":
        work.valid[(held[1], held[2])] = None  # a valid container's
        return ""
    entry = _usable_entry(obj, name, path)
    if entry is None:
        return "broken"
    if entry.ifname:
        work.stale.append(entry)
    return ""


def _read_file(
    dfd: int, name: str, path: str, network: str | None, decode: Callable[[bytes, str], Any]
) -> _Read:
    """Read the file ``name`` of ``dfd`` (``path``), bounded, and ``decode`` it."""
    try:
        data, ident = _files._read_ident_at(dfd, name, path)
    except FileNotFoundError:
        return _Read("missing")
    except CorruptEntryError:  # a symlink, a non-regular or oversized file
        return _Read("corrupt", ident=_stat_ident(dfd, name), under=network)
    except CacheError as e:
        return _Read("error", error=e, under=network)
    try:
        return _Read("ok", decode(data, path), ident, under=network)
    except CorruptEntryError:
        return _Read("corrupt", ident=ident, under=network)


def _stat_ident(dfd: int, name: str) -> FileIdent | None:
    """The identity of the file ``name`` of ``dfd`` (never through a symlink), if any."""
    try:
        return _ident(os.stat(name, dir_fd=dfd, follow_symlinks=False))
    except OSError:
        return None
