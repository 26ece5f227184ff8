"""The configuration of a network manager, always current.

:class:`ConfigWatcher.current` is called at the start of every operation and
answers the configuration as it is now: a cheap check whether anything
changed, and a reload of what did.

**The check.** With the kernel's change notification (inotify, one instance
per process: ``libcni/manager/_notify.py``), the configuration directory,
the drop-in directories of its networks and the plugin directories are
watched; the check reads the notification queue without blocking (no
thread) and costs the same with 1 or 1000 files. Every name created,
deleted, renamed in or out, written (a same-size rewrite within the
timestamp granularity too), truncated or changed in mode is reported, and
so are a watched directory removed or renamed itself. What events cannot
tell is stat'ed at every check: a directory that does not exist yet (or is
reached through a symbolic link, which can be repointed), and a file that is
a symbolic link, has other hard links or lives on another device (changed
through another path).

Without notification (no inotify, ``EMFILE``/``ENFILE`` on its instance,
``ENOSPC`` on its watches), the check is the **stat scan**: the directories
and their files are stat'ed (names, sizes, modification and change times,
inode numbers) and compared. Because a rewrite can keep the size and land
within the file system's timestamp granularity (and because the kernel stamps
files with a clock that can lag the one we read), anything modified less than
:data:`RECENT` (two seconds) before the previous check is treated as changed
too: no change is ever missed. A directory is listed again only when its own
stat changed or it had been modified less than :data:`RECENT` before its last
listing. When the notification queue overflows (events were lost), a fork
(the child starts over with an instance of its own) or a watched directory
is replaced, everything is read again once.

**The reload.** Only the files that may have changed are read; a file is
parsed again only when its bytes differ from what was parsed last time, and
each is parsed once. The drop-in plugins of a network are read again when
its list or its drop-in directory changed, and the plugin binaries looked up
again (once per plugin type) when a plugin directory changed.

Networks defined in code (``NetworkManager(networks=[...])``) come first and
shadow a file naming the same network; with ``conf_dir=None`` they are the
only ones. A network skipped because a plugin binary is missing is usable
at the first check after the binary appears: the places where it would be
found (``<plugin dir>/<type>``) are stat'ed at every check (with either
check), so installing it, or making it executable, is seen even behind an
old symbolic link or when the directory's own stat is old.

No thread watches anything. A reload builds a new immutable
:class:`LoadedNetworks` and swaps it in; an operation keeps the one it
started with. Checks and reloads of one watcher are serialised by a lock of
its own (never a container lock): an operation that starts during a reload
waits for it, since it needs the configuration as it is now.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from .. import _log as logging  # logging, imported at first use
from .. import request as rq
from ..conf import (
    NetworkConfigList,
    _complete_list,
    _in_file,
    conf_from_bytes,
    conf_list_from_bytes,
    conf_list_from_conf,
)
from ..errors import CNIError, ConfigError, PluginNotFoundError, ValidationError
from . import _notify
from ._values import LoadedNetworks

__all__ = ["EXTENSIONS", "NOTIFY", "RECENT", "ConfigWatcher"]

log = logging.getLogger("libcni")

EXTENSIONS = (".conf", ".conflist", ".json")
_DROP_IN_EXTENSIONS = (".conf",)

RECENT = 2_000_000_000
"""Nanoseconds: a file modified this close to (or after) the previous check is reloaded."""

NOTIFY = True
"""Use the kernel's change notification when it can be had (``False``: always the stat scan)."""

_Stat = tuple[int, int, int, int, int] | None  # dev, ino, size, mtime_ns, ctime_ns


def _key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stat(path: str) -> _Stat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _key(st)


def _names(directory: str) -> tuple[str, ...] | None:
    """Every name in ``directory``, sorted; ``None`` if it cannot be listed."""
    try:
        return tuple(sorted(os.listdir(directory)))
    except OSError:
        return None


def _files(
    directory: str, names: Iterable[str], extensions: Sequence[str]
) -> list[tuple[str, _Stat]]:
    """The files of ``names`` (in ``directory``) that ``conf_files`` lists, with their
    (followed) stat."""
    wanted = tuple(extensions)
    out: list[tuple[str, _Stat]] = []
    for name in names:
        if not name.endswith(wanted):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append((path, _key(st)))
    return out


def _check_name(name: str) -> None:
    """Refuse a network without a valid name: no setup of it could ever succeed."""
    try:
        rq.validate_network_name(name)
    except ValidationError as e:
        raise ConfigError(
            f"network name {name!r} is not valid (it must match {rq.NAME_PATTERN})"
            if name
            else "the network has no name"
        ) from e


def _scan(directory: str) -> tuple[list[tuple[str, bool]], set[str]]:
    """The configuration files of ``directory`` as ``conf_files`` lists them, sorted, each
    with whether it is a symbolic link; and the names of its other entries.
    ``ConfigError`` if it cannot be listed."""
    found: list[tuple[str, bool]] = []
    others: set[str] = set()
    try:
        with os.scandir(directory) as it:
            for entry in it:
                name = entry.name
                if not name.endswith(EXTENSIONS):
                    others.add(name)
                    continue
                try:
                    if entry.is_file():
                        found.append((name, entry.is_symlink()))
                    else:
                        others.add(name)
                except OSError:
                    continue
    except FileNotFoundError:
        return [], others
    except OSError as e:
        raise ConfigError(
            f"error reading directory {directory}: {e.strerror or e}", directory
        ) from e
    found.sort()
    prefix = os.path.join(directory, "")
    return [(prefix + name, link) for name, link in found], others


def _parse(path: str, data: bytes) -> NetworkConfigList:
    """One configuration file's list, as read (a ``.conflist`` without its drop-in plugins);
    ``ConfigError`` naming the file for content that no setup could use (no valid name)."""
    try:
        if path.endswith(".conflist"):
            net = conf_list_from_bytes(data)
        else:
            net = conf_list_from_conf(conf_from_bytes(data))
    except ConfigError as e:
        raise _in_file(e, path) from e
    _check_name(net.name)  # skipped under its path: the reason need not repeat it
    return net


def _complete(net: NetworkConfigList, path: str) -> NetworkConfigList:
    """``net`` with the plugins of its drop-in directory (``conf_list_from_file``'s rule)."""
    return _complete_list(net, path)


_BinaryStat = tuple[int, int, int, int, int, int] | None  # _Stat and the mode


def _binary_stat(path: str) -> _BinaryStat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


_Listing = tuple[tuple[int, int, int, int, int], int, tuple[str, ...]]
"""A directory's stat, the time it was listed (``time.time_ns()``), its names."""


@attrs.frozen
class _State:
    signature: tuple[tuple[str, _Stat], ...]
    checked_at: int
    loaded: LoadedNetworks
    drop_in_names: tuple[str, ...]
    #: Where the plugin binaries that skipped a network would be (``<dir>/<type>``), each
    #: with its stat taken before the search failed (:func:`_binary_stat`).
    missing: tuple[tuple[str, _BinaryStat], ...] = ()


class _File:
    """One configuration file as last read, and what its bytes gave."""

    __slots__ = ("data", "error", "key", "net", "read_at", "special")

    def __init__(
        self,
        data: bytes | None,
        key: _Stat,
        special: bool,
        read_at: int,
        net: NetworkConfigList | None,
        error: str | None,
    ) -> None:
        self.data = data
        self.key = key
        self.special = special  # a change may come through another path: stat'ed at each check
        self.read_at = read_at
        self.net = net
        self.error = error


@attrs.define
class _Changes:
    """What a reload must read again."""

    everything: bool = False  # every file and drop-in directory, and the plugins
    files: set[str] = attrs.field(factory=set)  # configuration files (paths)
    drop_ins: set[str] = attrs.field(factory=set)  # drop-in directories (network names)
    plugins: bool = False  # a plugin directory changed: find the binaries again

    def __bool__(self) -> bool:
        return self.everything or self.plugins or bool(self.files) or bool(self.drop_ins)


class _Load:
    """A reload under way: the usable networks by name, where each is defined, what is
    skipped and why, where missing plugin binaries would be."""

    __slots__ = ("code", "missing", "networks", "skipped", "where")

    def __init__(self) -> None:
        self.networks: dict[str, NetworkConfigList] = {}
        self.where: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.missing: list[tuple[str, _BinaryStat]] = []
        self.code: dict[str, str] = {}  # network name -> where it is defined in code

    def add(self, place: str, net: NetworkConfigList, missing: str | None) -> None:
        """Use ``net`` (defined at ``place``), unless a plugin binary is ``missing`` or an
        earlier place defines its name."""
        if missing is not None:
            self.skipped[place] = missing
        elif net.name in self.networks:
            defined = self.where[net.name]
            self.skipped[place] = f"network {net.name!r} is already defined by {defined}"
        else:
            self.networks[net.name] = net
            self.where[net.name] = place


# Roles of a watched directory.
_CONF, _DROP_IN, _PLUGINS = 0, 1, 2


class _Watches:
    """The watches of one watcher, on the process's notifier."""

    def __init__(self, notifier: _notify.Notifier) -> None:
        self.notifier = notifier
        self.inbox = _notify.Inbox()
        self.roles: dict[int, list[tuple[int, str]]] = {}  # wd -> [(role, name or path)]
        self.by_dir: dict[tuple[int, str], int] = {}  # (role, name or path) -> wd
        # Checked by stat at each check: (role, path) -> the identity seen when watched.
        self.polled: dict[tuple[int, str], tuple[int, int] | None] = {}
        self.finalizer: weakref.finalize[Any, Any] | None = None

    def wds(self) -> list[int]:
        return [wd for wd, roles in self.roles.items() for _ in roles]


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _through_link(path: str) -> bool:
    """Whether ``path`` is reached through a symbolic link (which can be repointed)."""
    return os.path.realpath(path) != os.path.abspath(path)


class ConfigWatcher:
    """Loads the networks of ``conf_dir`` (after ``networks``, defined in code) and reloads
    them when anything changed."""

    def __init__(
        self,
        conf_dir: str | None,
        plugin_dirs: Sequence[str],
        find: Callable[[str, Sequence[str]], str],
        default_networks: Sequence[str] | None,
        max_networks: int,
        networks: Sequence[NetworkConfigList] = (),
    ) -> None:
        self.conf_dir = conf_dir
        self.code_networks = tuple(networks)
        self.plugin_dirs = tuple(plugin_dirs)
        self._find = find
        self.default_networks = None if default_networks is None else tuple(default_networks)
        self.max_networks = max_networks
        self._state: _State | None = None
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._files: dict[str, _File] = {}
        self._special: list[str] = []  # files stat'ed at each notified check
        self._complete: dict[str, tuple[NetworkConfigList, NetworkConfigList | str]] = {}
        # plugin type -> why it is not usable (None: it is), and where it would be found
        self._found: dict[str, tuple[str | None, tuple[tuple[str, _BinaryStat], ...]]] = {}
        self._conf_dev: int | None = None
        # The notification: None until the first load; False when it cannot be had.
        self._watches: _Watches | bool | None = None if NOTIFY else False

    @property
    def notified(self) -> bool:
        """Whether changes are learnt from the kernel's notification (else: the stat scan)."""
        return isinstance(self._watches, _Watches)

    def current(self) -> LoadedNetworks:
        """The configuration as it is now (reloaded if anything changed since the last call)."""
        if self._pid != os.getpid():
            self._forked()
        with self._lock:
            if self._watches is None:
                self._start_watching()
            if isinstance(self._watches, _Watches):
                return self._current_notified()
            return self._current_scanned()

    # -- the checks --------------------------------------------------------------------

    def _current_scanned(self) -> LoadedNetworks:
        now = time.time_ns()
        state = self._state
        names = state.drop_in_names if state is not None else ()
        signature = self._signature(names)
        binaries = state is None or _binaries_unchanged(state)
        if state is not None and signature == state.signature and binaries:
            limit = state.checked_at - RECENT
            if not any(st is not None and st[3] >= limit for _, st in signature):
                return state.loaded
        changes = self._scanned_changes(state, signature)
        changes.plugins = changes.plugins or not binaries
        loaded, drop_in_names, missing = self._reload(changes, now)
        # The signature taken before loading: a change made meanwhile differs from it
        # (and each missing binary's stat was taken before it was searched for).
        self._state = _State(signature, now, loaded, drop_in_names, missing)
        return loaded

    def _scanned_changes(
        self, state: _State | None, signature: tuple[tuple[str, _Stat], ...]
    ) -> _Changes:
        """Which files, drop-in directories and plugin directories the stat scan saw change."""
        if state is None:
            return _Changes(everything=True)
        old = dict(state.signature)
        limit = state.checked_at - RECENT
        changed = [
            path
            for path, st in signature
            if old.pop(path, False) != st or (st is not None and st[3] >= limit)
        ]
        changed += old  # gone since
        out = _Changes()
        plugin_dirs = set(self.plugin_dirs)
        prefix = os.path.join(self.conf_dir, "") if self.conf_dir is not None else None
        for path in changed:
            if path in plugin_dirs:
                out.plugins = True
            if prefix is None or not path.startswith(prefix):
                continue
            inner = path[len(prefix) :]
            name, sep, _ = inner.partition(os.sep)
            if sep:  # a file of a drop-in directory
                out.drop_ins.add(name)
            elif name.endswith(EXTENSIONS):
                out.files.add(path)
            else:  # a drop-in directory itself
                out.drop_ins.add(name)
        return out

    def _signature(self, drop_in_names: Sequence[str]) -> tuple[tuple[str, _Stat], ...]:
        listings: dict[str, _Listing] = {}
        out: list[tuple[str, _Stat]] = []
        conf_dir = None if self.conf_dir is None else _stat(self.conf_dir)
        if self.conf_dir is not None:
            out.append((self.conf_dir, conf_dir))
        if self.conf_dir is not None and conf_dir is not None:
            names = self._listed(self.conf_dir, conf_dir, listings)
            if names is not None:
                out.extend(_files(self.conf_dir, names, EXTENSIONS))
                present = frozenset(names)
            for name in drop_in_names:
                d = os.path.join(self.conf_dir, name)
                # One that the directory does not hold is absent: no stat.
                st = _stat(d) if names is None or name in present else None
                out.append((d, st))
                if st is not None:
                    inner = self._listed(d, st, listings)
                    if inner is not None:
                        out.extend(_files(d, inner, _DROP_IN_EXTENSIONS))
        out.extend((d, _stat(d)) for d in self.plugin_dirs)
        self._listings = listings
        return tuple(out)

    def _listed(
        self, directory: str, st: tuple[int, int, int, int, int], listings: dict[str, _Listing]
    ) -> tuple[str, ...] | None:
        """The names in ``directory``, whose stat is ``st``; ``None`` if it cannot be listed.

        Creating, removing or renaming a name changes the directory's
        modification time, so the names listed last time are still its names
        while its stat is the one they were listed with, unless it had been
        modified less than :data:`RECENT` before that listing (a change within
        the timestamp granularity would not show): then it is listed again.
        """
        known = self._listings.get(directory)
        if known is None or known[0] != st or st[3] >= known[1] - RECENT:
            listed_at = time.time_ns()
            names = _names(directory)
            if names is None:
                return None
            known = (st, listed_at, names)
        listings[directory] = known
        return known[2]

    def _current_notified(self, changes: _Changes | None = None) -> LoadedNetworks:
        watches = self._watches
        assert isinstance(watches, _Watches)
        state = self._state
        if changes is None:
            changes = self._notified_changes(watches)
            if state is None:
                changes = _Changes(everything=True)
            else:
                if state.missing and not _binaries_unchanged(state):
                    changes = changes or _Changes()
                    changes.plugins = True
                if not changes:
                    return state.loaded
            assert changes is not None
        now = time.time_ns()
        try:
            if self.conf_dir is not None:
                self._watch(watches, _CONF, self.conf_dir)
            for d in self.plugin_dirs:
                self._watch(watches, _PLUGINS, d)
            loaded, drop_in_names, missing = self._reload(changes, now, watches)
        except _Unwatchable:
            self._stop_watching()
            return self._current_scanned()
        self._state = _State((), now, loaded, drop_in_names, missing)
        return loaded

    def _notified_changes(self, watches: _Watches) -> _Changes | None:
        """What the notification (and the stat of what it cannot tell) says changed
        (``None``: nothing)."""
        notifier = watches.notifier
        inbox = watches.inbox
        with _notify.lock():
            if notifier.closed:  # pragma: no cover - only after a fork, handled before
                return _Changes(everything=True)
            notifier.drain()
            events, overflow = inbox.events, inbox.overflow
            if events or overflow:
                inbox.events, inbox.overflow = [], False
        if not events and not overflow and not watches.polled and not self._special:
            return None
        changes = _Changes(everything=overflow)
        for wd, mask, name in events:
            for role, what in watches.roles.get(wd, ()):
                gone = mask & (
                    _notify.IN_IGNORED
                    | _notify.IN_DELETE_SELF
                    | _notify.IN_MOVE_SELF
                    | _notify.IN_UNMOUNT
                )
                if gone:  # watched again (or polled while absent) by the reload
                    self._unwatch(watches, role, what)
                if role == _CONF:
                    if gone:
                        changes.everything = True
                    elif name.endswith(EXTENSIONS):
                        changes.files.add(os.path.join(what, name))
                    else:
                        changes.drop_ins.add(name)
                elif role == _DROP_IN:
                    changes.drop_ins.add(what)
                else:
                    changes.plugins = True
        for (role, path), seen in list(watches.polled.items()):
            if _identity(path) != seen:  # another directory now: watched anew by the reload
                self._unwatch(watches, role, path)
                if role == _CONF:
                    changes.everything = True
                else:
                    changes.plugins = True
        for path in self._special:
            f = self._files[path]
            st = _stat(path)
            if st != f.key or (st is not None and st[3] >= f.read_at - RECENT):
                changes.files.add(path)
        return changes

    # -- the watches -------------------------------------------------------------------

    def _start_watching(self) -> None:
        notifier = _notify.notifier()
        if notifier is None:
            self._watches = False
            return
        watches = _Watches(notifier)
        with _notify.lock():
            notifier.users += 1
        watches.finalizer = weakref.finalize(self, _release, watches)
        self._watches = watches

    def _stop_watching(self) -> None:
        """Back to the stat scan for good (a watch could not be added)."""
        watches = self._watches
        if isinstance(watches, _Watches):
            if watches.finalizer is not None:
                watches.finalizer.detach()
            _release(watches)
        self._watches = False
        self._state = None  # the stat scan starts from a full load

    def _forked(self) -> None:
        """In a child: the parent's lock and queue are not ours; start over."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        if isinstance(self._watches, _Watches):
            if self._watches.finalizer is not None:
                self._watches.finalizer.detach()
            self._watches = None  # a notifier of the child's own at the next load
        self._state = None

    def _watch(self, watches: _Watches, role: int, path: str) -> None:
        """Watch ``path`` (a directory) unless watched; one that is absent is polled by stat."""
        what = path if role != _DROP_IN else os.path.basename(path)
        if (role, what) in watches.by_dir:
            return
        seen = _identity(path)
        if role != _DROP_IN:  # a drop-in directory appearing is an event of conf_dir
            if seen is None or _through_link(path):
                watches.polled[(role, path)] = seen
            else:
                watches.polled.pop((role, path), None)
        if seen is None:
            return
        with _notify.lock():
            try:
                wd = watches.notifier.watch(path, watches.inbox)
            except OSError as e:
                if e.errno in _ABSENT:  # gone meanwhile: the polled identity differs
                    return
                log.debug("cannot watch %s (%s): using the stat scan", path, e)
                raise _Unwatchable from e
        watches.roles.setdefault(wd, []).append((role, what))
        watches.by_dir[(role, what)] = wd

    def _unwatch(self, watches: _Watches, role: int, what: str) -> None:
        wd = watches.by_dir.pop((role, what), None)
        if wd is None:
            return
        roles = watches.roles.get(wd, [])
        if (role, what) in roles:
            roles.remove((role, what))
        if not roles:
            watches.roles.pop(wd, None)
        with _notify.lock():
            watches.notifier.unwatch(wd, watches.inbox)

    # -- the reload --------------------------------------------------------------------

    def _read(self, path: str, link: bool, old: _File | None, now: int) -> _File:
        """Read ``path``; parse it unless its bytes are the ones parsed last time."""
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except OSError as e:
            # A change that makes it readable (mode, owner, content) is an event of its
            # directory; through a link only the stat can tell.
            why = f"cannot read {path}: {e.strerror or e}"
            return _File(None, _stat(path), link, now, None, why)
        special = link or st.st_nlink > 1 or st.st_dev != self._conf_dev
        if old is not None and old.data == data:
            return _File(data, _key(st), special, now, old.net, old.error)
        try:
            net: NetworkConfigList | None = _parse(path, data)
            error = None
        except CNIError as e:
            net, error = None, str(e)
        return _File(data, _key(st), special, now, net, error)

    def _reload(
        self, changes: _Changes, now: int, watches: _Watches | None = None
    ) -> tuple[LoadedNetworks, tuple[str, ...], tuple[tuple[str, _BinaryStat], ...]]:
        """The configuration loaded again: the networks given in code, then the files of
        ``conf_dir`` in order (each read again only if it may have changed, ``changes``);
        with the names of the lists that have drop-in directories and where the missing
        plugin binaries would be."""
        if changes.everything or changes.plugins:
            self._found = {}
        load = _Load()
        for i, in_code in enumerate(self.code_networks):
            place = load.code[in_code.name] = f"networks[{i}] ({in_code.name})"
            load.add(place, in_code, self._missing(in_code, load.missing))
        files, others = self._read_files(changes, now, load.skipped)
        drop_in_names: list[str] = []
        complete: dict[str, tuple[NetworkConfigList, NetworkConfigList | str]] = {}
        for path, f in files.items():
            if f.error is not None:
                load.skipped[path] = f.error
                continue
            assert f.net is not None
            net: NetworkConfigList | str = f.net
            if path.endswith(".conflist"):
                if not f.net.load_only_inlined_plugins:
                    drop_in_names.append(f.net.name)
                    self._watch_drop_in(watches, f.net.name, others)
                net = self._with_drop_ins(path, f.net, changes)
                complete[path] = (f.net, net)
            if isinstance(net, str):
                load.skipped[path] = net
            elif net.name in load.code:
                load.skipped[path] = (
                    f"shadowed: network {net.name!r} is defined in code ({load.code[net.name]})"
                )
            else:
                load.add(path, net, self._missing(net, load.missing))
        self._complete = complete
        if watches is not None:  # drop-in directories of networks no longer configured
            wanted = set(drop_in_names)
            for role, name in list(watches.by_dir):
                if role == _DROP_IN and name not in wanted:
                    self._unwatch(watches, role, name)
        before = self._state.loaded.skipped if self._state is not None else {}
        for path, why in load.skipped.items():
            if before.get(path) != why:  # once per reason, not at every reload
                log.warning("network configuration %s skipped: %s", path, why)
        defaults = self._defaults(load.networks)
        loaded = LoadedNetworks(load.networks, defaults, load.skipped, load.where)
        return loaded, tuple(dict.fromkeys(drop_in_names)), tuple(dict.fromkeys(load.missing))

    def _read_files(
        self, changes: _Changes, now: int, skipped: dict[str, str]
    ) -> tuple[dict[str, _File], set[str]]:
        """The configuration files of ``conf_dir`` in order, each read again only if it may
        have changed (the others as last read), and the names of its other entries; a
        directory that cannot be listed is ``skipped``."""
        listed: list[tuple[str, bool]] = []
        others: set[str] = set()
        if self.conf_dir is not None:
            st = _stat(self.conf_dir)
            self._conf_dev = None if st is None else st[0]
            try:
                listed, others = _scan(self.conf_dir)
            except ConfigError as e:
                skipped[self.conf_dir] = str(e)
        files: dict[str, _File] = {}
        for path, link in listed:
            old = self._files.get(path)
            if old is None or changes.everything or path in changes.files:
                files[path] = self._read(path, link, old, now)
            else:
                files[path] = old
        self._files = files
        self._special = [path for path, f in files.items() if f.special]
        return files, others

    def _watch_drop_in(self, watches: _Watches | None, name: str, others: set[str]) -> None:
        """Watch the drop-in directory of list ``name`` when it exists (its creation is an
        event of ``conf_dir``)."""
        if watches is not None and name in others and _safe_name(name):
            assert self.conf_dir is not None
            self._watch(watches, _DROP_IN, os.path.join(self.conf_dir, name))

    def _with_drop_ins(
        self, path: str, head: NetworkConfigList, changes: _Changes
    ) -> NetworkConfigList | str:
        """The list of the file ``path`` with the plugins of its drop-in directory (the one
        made last time while neither changed), or why it cannot be used."""
        known = self._complete.get(path)
        if (
            known is not None
            and known[0] is head
            and not changes.everything
            and head.name not in changes.drop_ins
        ):
            return known[1]
        try:
            return _complete(head, path)
        except CNIError as e:
            return str(e)

    def _defaults(self, networks: Mapping[str, NetworkConfigList]) -> tuple[str, ...]:
        """What a setup given no networks attaches."""
        if self.default_networks is not None:
            return self.default_networks
        if self.max_networks > 0:
            return tuple(networks)[: self.max_networks]
        return tuple(networks)

    def _missing(
        self, net: NetworkConfigList, missing: list[tuple[str, _BinaryStat]]
    ) -> str | None:
        """Why a plugin binary of ``net`` cannot be used (each type looked up once until a
        plugin directory changes); the places of a binary not found go to ``missing``."""
        for plugin in net.plugins:
            kind = plugin.type
            found = self._found.get(kind)
            if found is None:
                found = self._found[kind] = self._look_up(kind)
            why, places = found
            if why is not None:
                missing.extend(places)
                return why
        return None

    def _look_up(self, kind: str) -> tuple[str | None, tuple[tuple[str, _BinaryStat], ...]]:
        """Find the binary of ``kind``; if it is not found, where it would be.

        When a search fails, the places are stat'ed and the search is made
        again: the stats noted were taken before the search that failed, so a
        binary installed after it always differs from what was noted.
        """
        try:
            self._find(kind, self.plugin_dirs)
            return None, ()
        except PluginNotFoundError:
            pass
        except CNIError as e:
            return str(e), ()
        places: tuple[tuple[str, _BinaryStat], ...] = ()
        if "/" not in kind and kind not in ("", ".", ".."):
            places = tuple(
                (path, _binary_stat(path))
                for path in (os.path.join(d, kind) for d in self.plugin_dirs)
            )
        try:
            self._find(kind, self.plugin_dirs)
            return None, ()
        except CNIError as e:
            return str(e), places


def _binaries_unchanged(state: _State) -> bool:
    """Whether every missing binary's place is as it was when the search failed."""
    return all(_binary_stat(path) == st for path, st in state.missing)


class _Unwatchable(Exception):
    """A directory could not be watched (``ENOSPC``, ``ENOMEM``...): the stat scan takes over."""


_ABSENT = frozenset({2, 20})  # ENOENT, ENOTDIR


def _safe_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _release(watches: _Watches) -> None:
    """Give the watches back (the watcher was garbage collected, or stopped watching)."""
    wds = watches.wds()
    watches.roles.clear()
    watches.by_dir.clear()
    if watches.notifier.pid == os.getpid():
        watches.notifier.release(watches.inbox, wds)
