"""Finding a plugin binary in the plugin directories."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from libcni.errors import ConfigError, PluginNotFoundError

__all__ = ["DEFAULT_PLUGIN_DIRS", "find_in_path"]

#: Where plugins are, unless told otherwise: the upstream location, then Debian's and Ubuntu's.
DEFAULT_PLUGIN_DIRS: tuple[str, ...] = ("/opt/cni/bin", "/usr/lib/cni")


def find_in_path(plugin: str, paths: Sequence[str]) -> str:
    """Return the path of the plugin binary named ``plugin`` in ``paths``.

    The directories are searched in order; the first *regular file* (symlinks
    followed) named exactly ``plugin`` wins, and ``os.path.join(dir, plugin)``
    is returned (not the symlink's target). A directory, a dangling symlink or
    anything else that is not a regular file does not count; empty directory
    entries are skipped. Whether the file is executable is not checked here:
    running a non-executable file fails later with a ``PluginError`` (code 5).

    Raises :class:`~libcni.errors.ConfigError` for an empty name, a name that
    contains ``/`` or NUL or is ``.`` or ``..`` (a configuration must never
    make the runtime execute a file outside its plugin directories), or an
    empty ``paths``; :class:`~libcni.errors.PluginNotFoundError` (naming the
    plugin and every directory searched) when no directory holds it.

    >>> find_in_path("", ["/opt/cni/bin"])
    Traceback (most recent call last):
    ...
    libcni.errors.ConfigError: plugin name is empty
    >>> find_in_path("../sh", ["/opt/cni/bin"])
    Traceback (most recent call last):
    ...
    libcni.errors.ConfigError: invalid plugin name; ../sh
    """
    if not plugin:
        raise ConfigError("plugin name is empty")
    if "/" in plugin or "\0" in plugin or plugin in (".", ".."):
        raise ConfigError("invalid plugin name", plugin)
    if isinstance(paths, str):  # a bare string would be searched letter by letter
        paths = [paths]
    if not paths:
        raise ConfigError("no plugin directories given", f"looking for plugin {plugin!r}")
    for directory in paths:
        if not directory:
            continue
        candidate = os.path.join(directory, plugin)
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):  # missing, dangling link, EACCES, NUL in dir...
            continue
        if stat.S_ISREG(st.st_mode):
            return candidate
    raise PluginNotFoundError(plugin, paths)
