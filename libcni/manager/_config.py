"""The configuration of a network manager, always current: :meth:`ConfigWatcher.current` makes
a stat scan and reloads only what changed (a file changed within two ticks of the last
check, :data:`RECENT`, is read again: a rewrite that keeps its stat is never missed)."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import attrs

from .. import _log as logging  # logging, imported at first use
from .. import request as rq
from ..conf import (
    NetworkConfigList,
    _binaries,
    _complete_list,
    _in_file,
    conf_from_bytes,
    conf_list_from_bytes,
    conf_list_from_conf,
)
from ..errors import CNIError, ConfigError, PluginNotFoundError, ValidationError
from ._values import LoadedNetworks

__all__ = ["EXTENSIONS", "RECENT", "RECENT_FINE", "ConfigWatcher"]

log = logging.getLogger("libcni")

EXTENSIONS = (".conf", ".conflist", ".json")
_DROP_IN_EXTENSIONS = (".conf",)

RECENT = 2_000_000_000
"""Nanoseconds: a file changed this close to the previous check (whole-second clock) is read again."""

RECENT_FINE = 20_000_000
"""Nanoseconds: :data:`RECENT` for timestamps finer than a second (two ticks)."""

_Stat = tuple[int, int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns, mode
_Files = dict[str, _Stat]  # path -> stat
_DropIn = tuple[_Stat | None, _Files]  # the directory's stat, its files


class _Scan(NamedTuple):
    files: _Files | str  # the configuration files of conf_dir, or why it cannot be listed
    dirs: frozenset[str]  # the names of the directories in conf_dir
    drop_ins: dict[str, _DropIn]  # network name -> its drop-in directory
    plugin_dirs: tuple[_Stat | None, ...]
    missing: tuple[tuple[str, _Stat | None], ...]  # where missing plugin binaries would be


def _stat(path: str) -> _Stat | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _until(st: _Stat) -> int:
    """Until when a change could keep the stat ``st``: two ticks after its later time."""
    t = max(st[3], st[4])
    return t + (RECENT_FINE if t % 10**9 else RECENT)


def _recent(st: _Stat | None, since: int) -> bool:
    """Whether ``st`` changed within two ticks of ``since``."""
    return st is not None and _until(st) >= since


def _listing(directory: str, extensions: tuple[str, ...], dirs: set[str] | None = None) -> _Files:
    """The regular files of ``directory`` with their stats; its directories' names to ``dirs``."""
    out: _Files = {}
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name.endswith(extensions):
                st = _stat(entry.path)
                if st is not None and stat.S_ISREG(st[5]):
                    out[entry.path] = st
                    continue
            if dirs is not None and entry.is_dir():
                dirs.add(entry.name)
    return out


def _drop_in(conf_dir: str, name: str, dirs: frozenset[str]) -> _DropIn:
    """The drop-in directory of network ``name`` (not looked at unless ``dirs`` holds it)."""
    if name not in dirs:
        return None, {}
    directory = os.path.join(conf_dir, name)
    try:
        return _stat(directory), _listing(directory, _DROP_IN_EXTENSIONS)
    except OSError:
        return _stat(directory), {}


def _check_name(name: str) -> None:
    try:
        rq.validate_network_name(name)
    except ValidationError as e:
        raise ConfigError(
            f"network name {name!r} is not valid (it must match {rq.NAME_PATTERN})"
            if name
            else "the network has no name"
        ) from e


def _parse(path: str, data: bytes) -> NetworkConfigList:
    """One file's list, without its drop-in plugins; ``ConfigError`` naming the file."""
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
    """``net`` with its drop-in plugins (a seam the tests count)."""
    return _complete_list(net, path)


@attrs.frozen
class _State:
    signature: _Scan
    checked_at: int  # time.time_ns() before the scan
    loaded: LoadedNetworks
    recent_until: int = 0  # until when a change could keep a stat of the signature


@attrs.define
class _File:
    """One file as last read; ``complete``: its drop-in directory and the list made with it."""

    stat: _Stat
    data: bytes | None
    net: NetworkConfigList | None
    error: str | None
    complete: tuple[_DropIn, NetworkConfigList | str] | None = None


class _Load:
    """A reload under way: the usable networks, where each is defined, what is skipped."""

    __slots__ = ("code", "missing", "networks", "skipped", "unusable", "where")

    def __init__(self) -> None:
        self.networks: dict[str, NetworkConfigList] = {}
        self.where: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        # network name -> why its first file is skipped, and whether it waits for a binary
        self.unusable: dict[str, tuple[str, bool]] = {}
        self.missing: list[tuple[str, _Stat | None]] = []
        self.code: dict[str, str] = {}  # network name -> where it is defined in code

    def skip(self, place: str, name: str, why: str, waiting: bool = False) -> None:
        self.skipped[place] = why
        self.unusable.setdefault(name, (why, waiting))

    def add(self, place: str, net: NetworkConfigList, missing: tuple[str, bool] | None) -> None:
        """Use ``net`` unless a binary is ``missing`` or an earlier place defines its name."""
        if missing is not None:
            self.skip(place, net.name, *missing)
        elif net.name in self.networks:
            defined = self.where[net.name]
            self.skipped[place] = f"network {net.name!r} is already defined by {defined}"
        else:
            self.networks[net.name] = net
            self.where[net.name] = place


def _recent_until(scan: _Scan) -> int:
    stats = [] if isinstance(scan.files, str) else list(scan.files.values())
    for _, inner in scan.drop_ins.values():
        stats.extend(inner.values())
    stats.extend(st for st in scan.plugin_dirs if st is not None)
    return max(map(_until, stats), default=0)


class ConfigWatcher:
    """Loads the networks given in code, then those of ``conf_dir``; reloads what changed."""

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
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._files: dict[str, _File] = {}
        # plugin type -> why it is not usable (None: it is), and where it would be found
        self._found: dict[str, tuple[str | None, tuple[tuple[str, _Stat | None], ...]]] = {}

    def current(self) -> LoadedNetworks:
        """The configuration as it is now."""
        if self._pid != os.getpid():  # forked while another thread may have held the lock
            self._pid, self._lock = os.getpid(), threading.Lock()
        with self._lock:
            now = time.time_ns()
            state = self._state
            scan = self._scan(state)
            if (
                state is not None
                and scan == state.signature
                and state.recent_until < state.checked_at
            ):
                return state.loaded
            # The scan was taken before reading: a change made meanwhile differs from it.
            signature, loaded = self._reload(scan, state, now)
            self._state = _State(signature, now, loaded, _recent_until(signature))
            return loaded

    def _scan(self, state: _State | None) -> _Scan:
        files: _Files | str = {}
        dirs: set[str] = set()
        if self.conf_dir is not None:
            try:
                files = _listing(self.conf_dir, EXTENSIONS, dirs)
            except FileNotFoundError:
                pass
            except OSError as e:
                why = f"error reading directory {self.conf_dir}: {e.strerror or e}"
                files = str(ConfigError(why, self.conf_dir))
        names = frozenset(dirs)
        drop_ins: dict[str, _DropIn] = {}
        if state is not None and self.conf_dir is not None:
            for name in state.signature.drop_ins:
                drop_ins[name] = _drop_in(self.conf_dir, name, names)
        plugin_dirs = tuple(_stat(d) for d in self.plugin_dirs)
        old = state.signature.missing if state is not None else ()
        return _Scan(files, names, drop_ins, plugin_dirs, tuple((p, _stat(p)) for p, _ in old))

    def _read(self, path: str, st: _Stat, old: _File | None) -> _File:
        """Read ``path``; parse it unless its bytes are those parsed last time."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            return _File(st, None, None, f"cannot read {path}: {e.strerror or e}")
        if old is not None and old.data == data:
            return _File(st, data, old.net, old.error, old.complete)
        try:
            return _File(st, data, _parse(path, data), None)
        except CNIError as e:
            return _File(st, data, None, str(e))

    def _reload(self, scan: _Scan, state: _State | None, now: int) -> tuple[_Scan, LoadedNetworks]:
        """The configuration loaded again, and the scan to compare the next one with."""
        # The last check's time, if a stat it saw can hide a change (else: None).
        since = None
        if state is not None and state.recent_until >= state.checked_at:
            since = state.checked_at
        old = None if state is None else state.signature
        plugins = (
            old is None
            or (old.plugin_dirs, old.missing) != (scan.plugin_dirs, scan.missing)
            or (since is not None and any(_recent(st, since) for st in scan.plugin_dirs))
        )
        if plugins:  # look every type up again; a new object (readiness is known per object)
            self._found = {}
        load = _Load()
        for i, in_code in enumerate(self.code_networks):
            place = load.code[in_code.name] = f"networks[{i}] ({in_code.name})"
            load.add(place, in_code, self._missing(in_code, load.missing))
        drop_ins = self._load_files(load, scan, since)
        before = state.loaded if state is not None else LoadedNetworks()
        loaded = self._loaded(load, before)
        if not plugins and loaded == before:  # the same object (cheap: compared by identity)
            loaded = before
        missing = tuple(dict.fromkeys(load.missing))
        return scan._replace(drop_ins=drop_ins, missing=missing), loaded

    def _load_files(self, load: _Load, scan: _Scan, since: int | None) -> dict[str, _DropIn]:
        """Load ``conf_dir``'s files into ``load``; the drop-in directories of the lists."""
        files: _Files = {}
        if isinstance(scan.files, str):
            assert self.conf_dir is not None
            load.skipped[self.conf_dir] = scan.files
        else:
            files = scan.files
        drop_ins: dict[str, _DropIn] = {}
        read: dict[str, _File] = {}
        for path in sorted(files):
            f = self._files.get(path)
            st = files[path]
            if f is None or f.stat != st or (since is not None and _recent(st, since)):
                f = self._read(path, st, f)
            read[path] = f
            if f.net is None:
                load.skipped[path] = f.error or ""
                continue
            net: NetworkConfigList | str = f.net
            if path.endswith(".conflist"):
                net = self._with_drop_ins(path, f, scan, drop_ins, since)
            if isinstance(net, str):
                load.skip(path, f.net.name, net)
            elif net.name in load.code:
                load.skipped[path] = (
                    f"shadowed: network {net.name!r} is defined in code ({load.code[net.name]})"
                )
            else:
                load.add(path, net, self._missing(net, load.missing))
        self._files = read
        return drop_ins

    def _loaded(self, load: _Load, before: LoadedNetworks) -> LoadedNetworks:
        """What ``load`` found; each new reason to skip a file logged."""
        for path, why in load.skipped.items():
            if before.skipped.get(path) != why:  # once per reason, not at every reload
                log.warning("network configuration %s skipped: %s", path, why)
        unusable = [(n, u) for n, u in load.unusable.items() if n not in load.networks]
        return LoadedNetworks(
            load.networks,
            self._defaults(load.networks),
            load.skipped,
            load.where,
            {n: why for n, (why, waiting) in unusable if waiting},
            {n: why for n, (why, waiting) in unusable if not waiting},
        )

    def _with_drop_ins(
        self, path: str, f: _File, scan: _Scan, drop_ins: dict[str, _DropIn], since: int | None
    ) -> NetworkConfigList | str:
        """The list of ``path`` with its drop-in plugins (made again only on a change), or why not."""
        head = f.net
        assert head is not None and self.conf_dir is not None
        if head.load_only_inlined_plugins:
            d: _DropIn = (None, {})
        else:
            name = head.name
            if name not in drop_ins:  # scanned now if the check did not: before it is read
                drop_ins[name] = scan.drop_ins.get(name) or _drop_in(self.conf_dir, name, scan.dirs)
            d = drop_ins[name]
        recent = since is not None and any(_recent(st, since) for st in d[1].values())
        if f.complete is not None and f.complete[0] == d and not recent:
            return f.complete[1]
        try:
            complete: NetworkConfigList | str = _complete(head, path)
        except CNIError as e:
            complete = str(e)
        f.complete = (d, complete)
        return complete

    def _defaults(self, networks: Mapping[str, NetworkConfigList]) -> tuple[str, ...]:
        if self.default_networks is not None:
            return self.default_networks
        if self.max_networks > 0:
            return tuple(networks)[: self.max_networks]
        return tuple(networks)

    def _missing(
        self, net: NetworkConfigList, missing: list[tuple[str, _Stat | None]]
    ) -> tuple[str, bool] | None:
        """Why a binary of ``net`` cannot be used, whether it may yet appear (places: ``missing``)."""
        for plugin in net.plugins:
            for kind in _binaries(plugin):
                found = self._found.get(kind)
                if found is None:
                    found = self._found[kind] = self._look_up(kind)
                why, places = found
                if why is not None:
                    missing.extend(places)  # none for a type that can name no file
                    why = why if kind == plugin.type else f"IPAM of {plugin.type!r}: {why}"
                    return why, bool(places)
        return None

    def _look_up(self, kind: str) -> tuple[str | None, tuple[tuple[str, _Stat | None], ...]]:
        """Find the binary of ``kind``, else where it would be (stat'ed, then searched again:
        a binary installed after the stats always differs from them)."""
        try:
            self._find(kind, self.plugin_dirs)
            return None, ()
        except PluginNotFoundError:
            pass
        except CNIError as e:
            return str(e), ()
        places: tuple[tuple[str, _Stat | None], ...] = ()
        if "/" not in kind and kind not in ("", ".", ".."):
            places = tuple(
                (path, _stat(path)) for path in (os.path.join(d, kind) for d in self.plugin_dirs)
            )
        try:
            self._find(kind, self.plugin_dirs)
            return None, ()
        except CNIError as e:
            return str(e), places
