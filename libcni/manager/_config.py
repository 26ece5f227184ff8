"""The configuration of a network manager, always current.

:class:`ConfigWatcher.current` is called at the start of every operation. It
stats the configuration directory, its files, the drop-in directories of its
networks and the plugin directories (names, sizes, modification and change
times, inode numbers) and reloads when anything differs. Because a rewrite
can keep the size and land within the file system's timestamp granularity
(and because the kernel stamps files with a clock that can lag the one we
read), anything modified less than :data:`RECENT` seconds before the previous
check is treated as changed and reloaded too: no change is ever missed.

No thread watches anything and no lock is taken: a reload builds a new
immutable :class:`LoadedNetworks` and swaps it in; an operation keeps the
one it started with.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Collection, Sequence

import attrs

from ..conf import (
    NetworkConfigList,
    conf_files,
    conf_from_file,
    conf_list_from_bytes,
    conf_list_from_conf,
    conf_list_from_file,
)
from ..errors import CNIError
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


def _files(
    directory: str,
    extensions: Sequence[str],
    names: Collection[str] = (),
    found: set[str] | None = None,
) -> list[tuple[str, _Stat]]:
    """The files of ``directory`` that ``conf_files`` lists, with their (followed) stat.

    ``found`` receives those of ``names`` that the directory holds (all of
    them when it cannot be listed): what is not there needs no ``stat``.
    """
    wanted = tuple(extensions)
    out: list[tuple[str, _Stat]] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if found is not None and entry.name in names:
                    found.add(entry.name)
                if not entry.name.endswith(wanted):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append(
                        (
                            entry.path,
                            (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
                        )
                    )
    except OSError:
        if found is not None:
            found.update(names)
        return out
    out.sort()
    return out


@attrs.frozen
class _State:
    signature: tuple[tuple[str, _Stat], ...]
    checked_at: int
    loaded: LoadedNetworks
    drop_in_names: tuple[str, ...]


class ConfigWatcher:
    """Loads the networks of ``conf_dir`` and reloads them when anything changed."""

    def __init__(
        self,
        conf_dir: str,
        plugin_dirs: Sequence[str],
        find: Callable[[str, Sequence[str]], str],
        default_networks: Sequence[str] | None,
        max_networks: int,
    ) -> None:
        self.conf_dir = conf_dir
        self.plugin_dirs = tuple(plugin_dirs)
        self._find = find
        self.default_networks = None if default_networks is None else tuple(default_networks)
        self.max_networks = max_networks
        self._state: _State | None = None

    def current(self) -> LoadedNetworks:
        """The configuration as it is now (reloaded if anything changed since the last call)."""
        now = time.time_ns()
        state = self._state
        names = state.drop_in_names if state is not None else ()
        signature = self._signature(names)
        if state is not None and signature == state.signature:
            limit = state.checked_at - RECENT
            if not any(st is not None and st[3] >= limit for _, st in signature):
                return state.loaded
        loaded, drop_in_names = self._load()
        # The signature taken before loading: a change made meanwhile differs from it.
        self._state = _State(signature, now, loaded, drop_in_names)
        return loaded

    def _signature(self, drop_in_names: Sequence[str]) -> tuple[tuple[str, _Stat], ...]:
        conf_dir = _stat(self.conf_dir)
        out: list[tuple[str, _Stat]] = [(self.conf_dir, conf_dir)]
        if conf_dir is not None:
            # A drop-in directory that the listing does not hold is absent: no stat.
            found: set[str] = set()
            out.extend(_files(self.conf_dir, EXTENSIONS, drop_in_names, found))
            for name in drop_in_names:
                d = os.path.join(self.conf_dir, name)
                st = _stat(d) if name in found else None
                out.append((d, st))
                if st is not None:
                    out.extend(_files(d, _DROP_IN_EXTENSIONS))
        out.extend((d, _stat(d)) for d in self.plugin_dirs)
        return tuple(out)

    def _load(self) -> tuple[LoadedNetworks, tuple[str, ...]]:
        networks: dict[str, NetworkConfigList] = {}
        files: dict[str, str] = {}
        skipped: dict[str, str] = {}
        drop_in_names: list[str] = []
        try:
            paths = conf_files(self.conf_dir, EXTENSIONS)
        except CNIError as e:
            paths = []
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
                for plugin in net.plugins:
                    self._find(plugin.type, self.plugin_dirs)
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
        return loaded, tuple(dict.fromkeys(drop_in_names))
