"""GC's view of the cache: one listing for a whole GC run, each file read at most once.

A :class:`GCScan` lists ``results/``, ``records/`` and the directory of every
container in it once (:meth:`GCScan.survey`), and splits the file names by
the network they can belong to (``<network>-<containerID>-<ifname>``). Then,
under each network's GC lock, :meth:`GCScan.collect` says what GC must do for
that network: its stale entries and records (to DEL), the valid attachments
found (for the plugins' GC), its unusable entries and records (removed
without running anything). It reads only what the network needs, and no file
twice: the entries of valid containers are not read at all when their file
name settles whose they are.

``CNIConfig.gc_network_list`` makes one for its one network, under that
network's lock; the network manager's ``gc`` makes one for the whole run
(before any lock: each :meth:`~GCScan.collect` lists ``results/`` again
when it changed since, and reads only the new names).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Iterable
from typing import Any

from ..errors import CacheError
from . import _files
from ._entry import CNI_CACHE_V1, CacheEntry, CorruptEntryError, loads
from ._files import TEMP_PREFIX, FileIdent, _complete, _ident, _listed, _strerror
from ._fs import check_name, open_dir, untrusted
from ._names import _names_held, _only_of, _shared_name, _splits, _usable_record
from ._store import ResultCache

__all__ = ["GCScan", "GCWork"]

RECENT = 2_000_000_000
"""Nanoseconds: ``results/`` modified this close to (or after) its listing may have changed
since within the file system's timestamp granularity; it is listed again before it is
trusted. :data:`RECENT_FINE` on a file system whose timestamps have a fraction of a second."""

RECENT_FINE = 20_000_000
"""Nanoseconds: :data:`RECENT` for timestamps finer than a second. The kernel stamps them
with its coarse clock, which advances by ticks of at most 10 ms (``HZ`` = 100) and lags
the clock of ``time.time_ns`` by less than one: two ticks. (A GC run that follows ADDs
closely lists ``results/`` again only when one changed it within the last two ticks.)"""


def dash_splits(rest: str) -> list[tuple[str, str]]:
    """Every ``(containerID, ifname)`` that ``rest`` (``<containerID>-<ifname>``) can be."""
    out = []
    i = rest.find("-", 1)
    while 0 < i < len(rest) - 1:
        out.append((rest[:i], rest[i + 1 :]))
        i = rest.find("-", i + 1)
    return out


def prefixes(name: str) -> list[str]:
    """The networks whose entry the file ``name`` can be, by its name alone.

    ``<network>`` ends at a ``-`` that leaves ``<containerID>-<ifname>`` after
    it: a ``-`` that is neither its first nor its last character.
    """
    last = name.rfind("-", 0, len(name) - 1)  # the last dash that can end a container ID
    out = []
    i = name.find("-", 1)
    while 0 < i <= last - 2:
        out.append(name[:i])
        i = name.find("-", i + 1)
    return out


class _Read:
    """What reading one file found: its decoded content, or why there is none."""

    __slots__ = ("error", "held", "ident", "obj", "state", "under")

    def __init__(
        self,
        state: str,  # "ok", "missing", "corrupt" (unusable content) or "error" (unreadable)
        obj: Any = None,
        ident: FileIdent | None = None,
        error: CacheError | None = None,
        under: str | None = None,
    ) -> None:
        self.state = state
        self.obj = obj
        self.ident = ident
        self.error = error
        self.under = under  # the network whose GC lock was held when it was read
        self.held = _names_held(obj) if state == "ok" else ("", "", "")  # the names inside


_MISSING = _Read("missing")


class GCWork:
    """What GC must do for one network (:meth:`GCScan.collect`)."""

    __slots__ = ("errors", "in_progress", "removed", "stale", "unusable_records", "valid")

    def __init__(self) -> None:
        self.stale: list[CacheEntry] = []
        """The usable entries of the network that are not valid (to DEL), by file name."""
        self.in_progress: list[CacheEntry] = []
        """Its usable records without an entry that are not valid (to DEL), by file name."""
        self.valid: list[tuple[str, str]] = []
        """The attachments of valid containers found (``keep``): entries, then records."""
        self.unusable_records: list[tuple[str, str, FileIdent]] = []
        """``(containerID, file name, identity)`` of its records whose content is unusable
        and that are not valid (removed without running anything)."""
        self.removed: list[str] = []
        """The entries whose content was unusable, removed."""
        self.errors: list[CacheError] = []
        """What could not be read or removed (GC reports it; nothing of it is removed)."""


class GCScan:
    """One GC run's listing of the cache (see the module).

    ``keep``: the valid containers (the network manager's): every attachment
    of theirs is valid. Valid attachments given by ``(containerID, ifname)``
    are passed to :meth:`collect`.
    """

    def __init__(self, cache: ResultCache, keep: Collection[str] | None = None) -> None:
        self.cache = cache
        self.keep: frozenset[str] | None = None if keep is None else frozenset(keep)
        self._names: set[str] = set()
        self._temporaries: list[str] = []
        self._by_network: dict[str, list[str]] = {}  # network -> names it can be the entry of
        self._listed: tuple[int, int, int, int, int] | None = None  # results/ as it was listed
        self._fresh = False  # listed under the lock of the network being collected
        self._containers: dict[str, list[str]] = {}  # containerID -> its record names
        self._record_names: dict[str, list[tuple[str, str]]] = {}  # network -> (cid, name)
        self._read_entries: dict[str, _Read] = {}
        self._read_records: dict[tuple[str, str], _Read] = {}
        self._errors: list[CacheError] = []
        self._known: set[str] = set()  # the networks collected
        self._met: set[str] = set()  # the networks named inside the entries read
        # The networks of a manager's GC run are collected at the same time, from
        # threads: one of them at a time reads and updates what the scan knows.
        self._lock = threading.Lock()

    # -- the listing -----------------------------------------------------------

    def survey(
        self,
        networks: Iterable[str] = (),
        discover: bool = False,
        fresh: bool = False,
        records: bool = True,
    ) -> None:
        """List ``results/``, ``records/`` and each container's directory in it, once.

        ``networks``: the networks known to be collected. ``discover``: read
        the entries whose name could be no known network's (nor of a network
        of a record), to learn the networks known only from the cache
        (:meth:`networks`). ``fresh``: listed under the lock of the only
        network collected (:meth:`collect` need not look again). ``records``:
        list the records too. A ``records/`` or ``results/`` directory that
        is refused raises ``CacheError``.
        """
        self._known.update(networks)
        self._fresh = fresh
        self._list_results()
        if records:
            self._list_records()
        if not discover:
            return
        known = self._known | set(self._record_names)
        covered: set[str] = set()
        for network in known:
            covered.update(self._by_network.get(network, ()))
        dfd = self._results_fd()
        for name in sorted(self._names - covered):
            if dfd is None or any(p in known for p in prefixes(name)):
                continue  # (a network learned meanwhile)
            got = self._read(dfd, name, None)
            held = got.held[0]
            if held:
                known.add(held)

    def _list_results(self) -> None:
        cache = self.cache
        action = "list the cache entries"
        dfd = open_dir(cache.results_dir, create=False, action=action)
        if dfd is None:
            self._names, self._listed = set(), None
            return
        try:
            st = os.fstat(dfd)
            listed_at = time.time_ns()
            try:
                names = os.listdir(dfd)
            except OSError as e:
                self._errors.append(
                    CacheError(f"cannot {action}: cannot list {cache.results_dir}", _strerror(e))
                )
                names = []
        finally:
            os.close(dfd)
        self._listed = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, listed_at)
        self._temporaries = [n for n in names if n.startswith(f"{TEMP_PREFIX}tmp-")]
        new = {n for n in names if not n.startswith(TEMP_PREFIX)}
        for name in new - self._names:
            for network in prefixes(name):
                self._by_network.setdefault(network, []).append(name)
        for name in self._names - new:
            self._read_entries.pop(name, None)
        self._names = new

    def _list_records(self) -> None:
        cache = self.cache
        action = "list the records"
        top = open_dir(cache.records_dir, create=False, action=action)
        if top is None:
            return
        try:
            for cid in sorted(_listed(top, cache.records_dir, action)):
                path = f"{cache.records_dir}/{cid}"
                try:
                    st = os.stat(cid, dir_fd=top, follow_symlinks=False)
                    if untrusted(st, path, action) is not None:
                        continue  # refused: never used (nor DELeted on its word)
                    # Listed by its path: only this user and root can write records/.
                    names = sorted(os.listdir(path))
                except (OSError, CacheError):
                    continue
                self._containers[cid] = names
                part = f"-{cid}-"
                for name in names:
                    if name.startswith(TEMP_PREFIX):
                        continue
                    i = name.find(part, 1)
                    while i > 0:
                        if i + len(part) < len(name):
                            self._record_names.setdefault(name[:i], []).append((cid, name))
                        i = name.find(part, i + 1)
        finally:
            os.close(top)

    def _refresh(self) -> None:
        """List ``results/`` again if it may have changed since it was listed."""
        if self._fresh:
            return
        listed = self._listed
        try:
            st = os.stat(self.cache.results_dir, follow_symlinks=False)
        except FileNotFoundError:
            if listed is None:
                return
            st = None
        except OSError:
            st = None
        if (
            st is not None
            and listed is not None
            and (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns) == listed[:4]
            and listed[4] - st.st_mtime_ns
            >= (RECENT if st.st_mtime_ns % 1_000_000_000 == 0 else RECENT_FINE)
        ):
            return
        self._list_results()

    # -- the networks ----------------------------------------------------------

    def networks(self) -> list[str]:
        """The networks the cache may hold attachments of (records', entries read), sorted."""
        return sorted(set(self._record_names) | self._met)

    def attachment_of(self, network: str) -> CacheEntry | None:
        """A usable entry or record of ``network`` (its cached configuration), or ``None``.

        Reads one file when none of the network was read yet.
        """
        check_name(network, "network name")
        with self._lock:
            return self._attachment_of(network)

    def _attachment_of(self, network: str) -> CacheEntry | None:
        for name in sorted(self._by_network.get(network, ())):
            got = self._read_entries.get(name)
            if got is not None and got.state == "ok" and got.held[0] == network:
                entry = self.cache._usable_entry(got.obj, name, self._entry_path(name))
                if entry is not None:
                    return entry
        for cid, name in sorted(self._record_names.get(network, ())):
            record = self._record(cid, name, None)
            if record is not None and record.network_name == network:
                return record
        dfd = self._results_fd()
        for name in sorted(self._by_network.get(network, ())):
            if dfd is None or name not in self._names:
                continue
            got = self._read(dfd, name, None)
            if got.state == "ok" and got.held[0] == network:
                entry = self.cache._usable_entry(got.obj, name, self._entry_path(name))
                if entry is not None:
                    return entry
        return None

    # -- one network -----------------------------------------------------------

    def collect(
        self,
        network: str,
        valid: Collection[tuple[str, str]] = (),
        older_than: float = 30.0,
        *,
        records: bool = True,
    ) -> GCWork:
        """What GC of ``network`` must do; call it holding the network's GC lock.

        ``valid``: the valid attachments given (``(containerID, ifname)``).
        Removes the network's entries whose content is unusable (as
        :meth:`ResultCache.remove_corrupt` does: never one that cannot be
        read, nor a valid one, nor one that may be another network's, nor one
        modified less than ``older_than`` seconds ago or whose lock is held).
        """
        check_name(network, "network name")
        with self._lock:
            return self._collect(network, valid, older_than, records)

    def _collect(
        self, network: str, valid: Collection[tuple[str, str]], older_than: float, records: bool
    ) -> GCWork:
        self._refresh()
        work = GCWork()
        work.errors.extend(self._errors)
        self._errors = []
        valid_pairs = set(valid)
        found: dict[tuple[str, str], None] = {}  # the valid attachments met, in order
        broken = self._collect_entries(network, valid_pairs, found, work)
        self._remove(network, broken, older_than, work)
        if records:
            self._collect_records(network, valid_pairs, found, work)
        work.valid = list(found)
        return work

    def _collect_entries(
        self,
        network: str,
        valid: set[tuple[str, str]],
        found: dict[tuple[str, str], None],
        work: GCWork,
    ) -> list[str]:
        """The network's entries: the stale ones to ``work.stale``, the valid ones met to
        ``found``, what cannot be read to ``work.errors``; returns the unusable ones that
        may be removed (by name)."""
        prefix = f"{network}-"
        valid_names = {f"{prefix}{cid}-{ifname}" for cid, ifname in valid}
        networks = {network, *self._known, *self._met, *self._record_names}
        unnamed: list[tuple[str, CacheError | None]] = []  # (name, I/O error or None)
        broken: list[str] = []
        guarded: set[str] = set()  # may be a valid container's: never removed
        keep = self.keep
        dfd = self._results_fd()
        for name in sorted(set(self._by_network.get(network, ())) & self._names):
            if name in valid_names:
                continue
            if keep is not None and _kept_by_name(
                name, keep, prefix, self._containers, found, guarded
            ):
                continue
            got = self._read(dfd, name, network) if dfd is not None else _MISSING
            if got.state == "missing":
                continue
            if got.state != "ok":
                unnamed.append((name, got.error))
                continue
            verdict = self._judge(name, got, network, valid, found, work)
            if verdict == "unnamed":
                unnamed.append((name, None))
            elif verdict == "broken":
                broken.append(name)
        for name, err in unnamed:
            if not _only_of(name, network, networks):
                continue
            if err is not None:
                work.errors.append(err)
            else:
                broken.append(name)
        return sorted(n for n in broken if n not in guarded)

    def _judge(
        self,
        name: str,
        got: _Read,
        network: str,
        valid: set[tuple[str, str]],
        found: dict[tuple[str, str], None],
        work: GCWork,
    ) -> str:
        """What the entry ``name``, read (``got``), is to GC of ``network``: ``"unnamed"``
        (unusable and naming no network), ``"broken"`` (the network's, unusable) or ``""``
        (another network's, valid, usable; a stale one is added to ``work.stale``)."""
        obj = got.obj
        held = got.held
        if held[0] not in ("", network):
            return ""  # another network's
        if not held[0]:
            if isinstance(obj, dict) and obj.get("kind") != CNI_CACHE_V1:
                return ""  # a legacy bare result: usable
            if not isinstance(obj, dict) or not ResultCache._usable(
                obj, name, self._entry_path(name)
            ):
                return "unnamed"
            return ""
        pair = (held[1], held[2])
        if pair in valid:
            return ""
        keep = self.keep
        if keep is not None and held[1] in keep and name == f"{network}-{held[1]}-{held[2]}":
            found[pair] = None  # a valid container's (not decoded further)
            return ""
        entry = ResultCache._usable_entry(obj, name, self._entry_path(name))
        if entry is None:
            return "broken"
        if entry.ifname:
            work.stale.append(entry)
        return ""

    def _collect_records(
        self,
        network: str,
        valid: set[tuple[str, str]],
        found: dict[tuple[str, str], None],
        work: GCWork,
    ) -> None:
        """The network's records without an entry: valid, stale (to DEL) or unusable."""
        keep = self.keep
        prefix = f"{network}-"
        for cid, name in sorted(self._record_names.get(network, ())):
            if name in self._names:
                continue  # its entry is there (or a file that a DEL could not tell from it)
            ifname = name[len(prefix) + len(cid) + 1 :]
            if _shared_name(name, cid):
                # Two attachments can have this file name: the names inside tell whose it is.
                try:
                    record = self._record(cid, name, network, strict=True)
                except _Unusable as u:
                    work.unusable_records.append((cid, name, u.ident))
                    continue
                if record is None or record.network_name != network:
                    continue
                ifname = record.ifname
            if (cid, ifname) in valid:
                continue
            if keep is not None and cid in keep:
                top = self.cache._dir(self.cache.records_dir, create=False, action="read records")
                ident = None if top is None else _stat_ident(top, f"{cid}/{name}")
                if ident is None or not _complete(ident):  # (complete: another tool DELeted it)
                    found[(cid, ifname)] = None  # a valid container's, in progress
                continue
            try:
                record = self._record(cid, name, network, strict=True)
            except _Unusable as u:
                work.unusable_records.append((cid, name, u.ident))
                continue
            if record is not None and record.network_name == network:
                work.in_progress.append(record)

    def _remove(self, network: str, broken: list[str], older_than: float, work: GCWork) -> None:
        """Remove the unusable entries ``broken`` (unless fresh or locked)."""
        if not broken:
            return
        cache = self.cache
        action = f"clean up unreadable entries of network {network}"
        dfd = cache._dir(cache.results_dir, create=False, action=action)
        if dfd is None:
            return
        prefix = f"{network}-"
        cutoff = time.time() - older_than
        for name in broken:
            try:
                # An ADD of another network sharing the file name may be writing it:
                # every attachment of this file name takes this one lock.
                lk = cache._try_lock_file(network, name)
            except CacheError as e:
                work.errors.append(e)
                continue
            if lk is None and _splits(name[len(prefix) :]):
                continue  # busy: an operation works on it right now
            try:
                if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime > cutoff:
                    continue
                for cid, _ in dash_splits(name[len(prefix) :]):
                    if name in self._containers.get(cid, ()):
                        # No one DELeted it: its record, if complete, is in progress again.
                        cache.unmark_record(cid, name)
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                continue
            except CacheError as e:
                work.errors.append(e)
                continue
            except OSError as e:
                work.errors.append(
                    CacheError(
                        f"cannot {action}: cannot remove {self._entry_path(name)}", _strerror(e)
                    )
                )
                continue
            finally:
                if lk is not None:
                    lk.release()
            self._names.discard(name)
            self._read_entries.pop(name, None)
            work.removed.append(name)

    # -- reading ---------------------------------------------------------------

    def _entry_path(self, name: str) -> str:
        return f"{self.cache.results_dir}/{name}"

    def _results_fd(self) -> int | None:
        cache = self.cache
        return cache._dir(cache.results_dir, create=False, action="read the cache entries")

    def _read(self, dfd: int, name: str, network: str | None) -> _Read:
        """The entry file ``name`` of ``results/`` (``dfd``), read once: read again only if
        the file changed since it was read outside this network's lock."""
        path = self._entry_path(name)
        got = self._read_entries.get(name)
        if got is not None:
            if got.under is not None and got.under == network:
                return got
            if got.ident is not None and _stat_ident(dfd, name) == got.ident:
                got.under = network
                return got
        try:
            data, ident = _files._read_ident_at(dfd, name, path)
        except FileNotFoundError:
            return _MISSING
        except CorruptEntryError:  # a symlink, a non-regular or oversized file
            got = _Read("corrupt", ident=_stat_ident(dfd, name), under=network)
        except CacheError as e:
            got = _Read("error", error=e, under=network)
        else:
            try:
                got = _Read("ok", loads(data, path), ident, under=network)
                if got.held[0]:
                    self._met.add(got.held[0])
            except CorruptEntryError:
                got = _Read("corrupt", ident=ident, under=network)
        self._read_entries[name] = got
        return got

    def _record(
        self, cid: str, name: str, network: str | None, *, strict: bool = False
    ) -> CacheEntry | None:
        """The usable record ``name`` of container ``cid``, read once (again only if the file
        changed since it was read outside this network's lock); ``None`` when it is gone
        or cannot be read now. ``strict``: an unusable one raises :class:`_Unusable`."""
        cache = self.cache
        top = cache._dir(cache.records_dir, create=False, action="read the records")
        if top is None:
            return None
        key = (cid, name)
        rel = f"{cid}/{name}"
        got = self._read_records.get(key)
        if got is not None and got.under != network:
            if got.ident is None or _stat_ident(top, rel) != got.ident:
                got = None
            else:
                got.under = network
        if got is None:
            path = f"{cache.records_dir}/{rel}"
            try:
                data, ident = _files._read_ident_at(top, rel, path)
            except FileNotFoundError:
                got = _Read("missing", under=network)
            except CorruptEntryError:  # a symlink, a non-regular or oversized file
                got = _Read("corrupt", ident=_stat_ident(top, rel), under=network)
            except CacheError as e:
                got = _Read("error", error=e, under=network)  # neither used nor removed
            else:
                # A completed ADD's record whose entry is gone (another tool DELeted it):
                # removed as an unusable one is, never DELeted.
                gone = _complete(ident) and name not in self._names
                record = None if gone else _usable_record(data, path, cid, name)
                state = "ok" if record is not None else "corrupt"
                got = _Read(state, record, ident, under=network)
            self._read_records[key] = got
        if got.state == "corrupt" and strict and got.ident is not None:
            raise _Unusable(got.ident)
        record = got.obj if got.state == "ok" else None
        return record if isinstance(record, CacheEntry) else None

    # -- the clean-up of the run ------------------------------------------------

    def clean_up(self, locks: bool = True) -> tuple[list[str], list[str]]:
        """What killed writers left: temporary entries (``.tmp-*``, once stale) and temporary
        records; then (``locks``) the lock files no one holds. The paths removed of the
        first two kinds."""
        cache = self.cache
        temporaries = cache.remove_stale_temporaries(self._temporaries)
        records = cache.sweep_records(self._containers)
        if locks:
            cache.remove_orphan_locks(self._names)
        return temporaries, records

    def names(self) -> list[str]:
        """The names of ``results/`` as last listed (temporary files left out)."""
        return sorted(self._names)


def _kept_by_name(
    name: str,
    keep: frozenset[str],
    prefix: str,
    containers: dict[str, list[str]],
    found: dict[tuple[str, str], None],
    guarded: set[str],
) -> bool:
    """Whether the file name alone says the entry ``name`` is a valid container's
    (``keep``): its attachments go to ``found``, unread. One that only may be one is
    added to ``guarded`` (read, never removed)."""
    splits = dash_splits(name[len(prefix) :])
    theirs = [s for s in splits if s[0] in keep]
    if theirs and (len(theirs) == len(splits) or _recorded(name, theirs, containers)):
        found.update(dict.fromkeys(theirs))  # a valid container's, by its name
        return True
    if theirs:
        guarded.add(name)
    return False


def _recorded(name: str, theirs: list[tuple[str, str]], containers: dict[str, list[str]]) -> bool:
    """Whether a valid container among ``theirs`` has a record of that file name (which
    then names it alone): the entry is that container's, not another's."""
    return bool(containers) and any(
        name in containers.get(cid, ()) and not _shared_name(name, cid) for cid, _ in theirs
    )


def _stat_ident(dfd: int, name: str) -> FileIdent | None:
    """The identity of the file ``name`` of ``dfd`` (never through a symlink), if any."""
    try:
        return _ident(os.stat(name, dir_fd=dfd, follow_symlinks=False))
    except OSError:
        return None


class _Unusable(Exception):
    """A record whose content is unusable (its file's identity)."""

    def __init__(self, ident: FileIdent) -> None:
        super().__init__()
        self.ident = ident
