"""The configuration of a network manager, always current.

:class:`ConfigWatcher.current` is called at the start of every operation. It
stats the configuration directory, its files, the drop-in directories of its
networks and the plugin directories (names, sizes, modification and change
times, inode numbers) and reloads when anything differs. Because a rewrite
can keep the size and land within the file system's timestamp granularity
(and because the kernel stamps files with a clock that can lag the one we
read), anything modified less than :data:`RECENT` (two seconds) before the
previous check is treated as changed and reloaded too: no change is ever missed.
A directory is listed again only when its own stat changed (creating,
removing or renaming a file in it does that) or when it had been modified
less than :data:`RECENT` before its last listing; otherwise the names listed
then are its names, and only its files are stat'ed.

Networks defined in code (``NetworkManager(networks=[...])``) come first and
shadow a file naming the same network; with ``conf_dir=None`` they are the
only ones. A network skipped because a plugin binary is missing is usable
at the first check after the binary appears: the places where it would be
found (``<plugin dir>/<type>``) are stat'ed at every check, so installing it,
or making it executable, is seen even when the directory's own stat is old.

No thread watches anything and no lock is taken: a reload builds a new
immutable :class:`LoadedNetworks` and swaps it in; an operation keeps the
one it started with.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence

import attrs

from .. import _log as logging  # logging, imported at first use
from ..conf import (
    NetworkConfigList,
    conf_files,
    conf_from_file,
    conf_list_from_bytes,
    conf_list_from_conf,
    conf_list_from_file,
)
from ..errors import CNIError, PluginNotFoundError
from ._values import LoadedNetworks

__all__ = ["EXTENSIONS", "RECENT", "ConfigWatcher"]

log = logging.getLogger("libcni")

EXTENSIONS = (".conf", ".conflist", ".json")
_DROP_IN_EXTENSIONS = (".conf",)

RECENT = 2_000_000_000
"""Nanoseconds: a file modified this close to (or after) the previous check is reloaded."""

_Stat = tuple[int, int, int, int, int] | None  # dev, ino, size, mtime_ns, ctime_ns


def _stat(path: str) -> _Stat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _names(directory: str) -> tuple[str, ...] | None:
    """Every name in ``directory``, sorted; ``None`` if it cannot be listed."""
    try:
        return tuple(sorted(os.listdir(directory)))
    except OSError:
        return None


def _files(
    directory: str, names: Sequence[str], extensions: Sequence[str]
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
            out.append((path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)))
    return out


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

    def current(self) -> LoadedNetworks:
        """The configuration as it is now (reloaded if anything changed since the last call)."""
        now = time.time_ns()
        state = self._state
        names = state.drop_in_names if state is not None else ()
        signature = self._signature(names)
        if (
            state is not None
            and signature == state.signature
            and all(_binary_stat(path) == st for path, st in state.missing)
        ):
            limit = state.checked_at - RECENT
            if not any(st is not None and st[3] >= limit for _, st in signature):
                return state.loaded
        loaded, drop_in_names, missing = self._load()
        # The signature taken before loading: a change made meanwhile differs from it
        # (and each missing binary's stat was taken before it was searched for).
        self._state = _State(signature, now, loaded, drop_in_names, missing)
        return loaded

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
            for name in drop_in_names:
                d = os.path.join(self.conf_dir, name)
                # One that the directory does not hold is absent: no stat.
                st = _stat(d) if names is None or name in names else None
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

    def _usable(self, net: NetworkConfigList, missing: list[tuple[str, _BinaryStat]]) -> None:
        """Raise unless every plugin binary of ``net`` is found; note where missing ones go.

        When a search fails, the places are stat'ed and the search is made
        again: the stats noted were taken before the search that failed, so a
        binary installed after it always differs from what was noted.
        """
        for plugin in net.plugins:
            try:
                self._find(plugin.type, self.plugin_dirs)
                continue
            except PluginNotFoundError:
                pass
            places: list[tuple[str, _BinaryStat]] = []
            if "/" not in plugin.type and plugin.type not in ("", ".", ".."):
                places = [
                    (path, _binary_stat(path))
                    for path in (os.path.join(d, plugin.type) for d in self.plugin_dirs)
                ]
            try:
                self._find(plugin.type, self.plugin_dirs)
            except PluginNotFoundError:
                missing.extend(places)
                raise

    def _load(
        self,
    ) -> tuple[LoadedNetworks, tuple[str, ...], tuple[tuple[str, _BinaryStat], ...]]:
        networks: dict[str, NetworkConfigList] = {}
        files: dict[str, str] = {}
        skipped: dict[str, str] = {}
        drop_in_names: list[str] = []
        missing: list[tuple[str, _BinaryStat]] = []
        code: dict[str, str] = {}  # network name -> where it is defined in code
        for i, net in enumerate(self.code_networks):
            where = code[net.name] = f"networks[{i}] ({net.name})"
            try:
                self._usable(net, missing)
            except CNIError as e:
                skipped[where] = str(e)
                continue
            networks[net.name] = net
            files[net.name] = where
        paths: list[str] = []
        if self.conf_dir is not None:
            try:
                paths = conf_files(self.conf_dir, EXTENSIONS)
            except CNIError as e:
                skipped[self.conf_dir] = str(e)
        for path in paths:
            try:
                if path.endswith(".conflist"):
                    with open(path, "rb") as f:
                        head = conf_list_from_bytes(f.read())
                    if not head.load_only_inlined_plugins:
                        drop_in_names.append(head.name)
                    net = conf_list_from_file(path)
                else:
                    net = conf_list_from_conf(conf_from_file(path))
                if net.name in code:
                    skipped[path] = (
                        f"shadowed: network {net.name!r} is defined in code ({code[net.name]})"
                    )
                    continue
                self._usable(net, missing)
            except OSError as e:
                skipped[path] = f"cannot read {path}: {e.strerror or e}"
                continue
            except CNIError as e:
                skipped[path] = str(e)
                continue
            if net.name in networks:
                skipped[path] = f"network {net.name!r} is already defined by {files[net.name]}"
                continue
            networks[net.name] = net
            files[net.name] = path
        before = self._state.loaded.skipped if self._state is not None else {}
        for path, why in skipped.items():
            if before.get(path) != why:  # once per reason, not at every reload
                log.warning("network configuration %s skipped: %s", path, why)
        if self.default_networks is not None:
            defaults = self.default_networks
        elif self.max_networks > 0:
            defaults = tuple(networks)[: self.max_networks]
        else:
            defaults = tuple(networks)
        loaded = LoadedNetworks(networks, defaults, skipped, files)
        return loaded, tuple(dict.fromkeys(drop_in_names)), tuple(dict.fromkeys(missing))
