"""Configuration files and directories for :mod:`libcni.conf`: paths, reading, listing,
and the search of a directory for a network that a broken file does not stop."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from . import _log as logging  # logging, imported at first use
from .errors import ConfigError

logger = logging.getLogger("libcni")

#: What the loaders accept as a path.
PathInput: TypeAlias = "str | os.PathLike[str]"

#: How long an offending value may be in a message.
_EXCERPT = 200


def excerpt(value: Any) -> str:
    """``repr(value)``, cut to a length fit for a message."""
    text = repr(value)
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def path_str(path: PathInput) -> str:
    """``path`` (``str`` or path-like) as a ``str``; ``ConfigError`` if it is no path."""
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError as e:
        raise ConfigError(f"invalid path {excerpt(path)}: {e}") from e


def read_file(path: str) -> builtins.bytes:
    """The bytes of file ``path``; ``ConfigError`` naming it if it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"error reading {path}: {reason}") from e


def conf_files(dir: PathInput, extensions: Sequence[str]) -> list[str]:
    """The regular files directly in ``dir`` with one of the given extensions, sorted.

    The extension is what follows the last dot of the file name, compared
    case-sensitively; ``extensions`` may be given with or without the dot
    (``".conf"`` or ``"conf"``). Symbolic links to regular files count. A
    missing directory gives ``[]``; an unreadable one is a :class:`~libcni.errors.ConfigError`.

    >>> conf_files("/nonexistent", [".conf"])
    []
    """
    d = path_str(dir)
    wanted = {ext[1:] if ext.startswith(".") else ext for ext in extensions}
    found: list[tuple[str, str]] = []
    try:
        with os.scandir(d) as it:
            for entry in it:
                _, dot, ext = entry.name.rpartition(".")
                if dot and ext in wanted and _is_file(entry):
                    found.append((entry.name, os.path.join(d, entry.name)))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ConfigError(f"error reading directory {d}: {e.strerror or e}", d) from e
    found.sort()
    return [full for _, full in found]


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


#: Parses a file's bytes: the configuration (list), with a ``name``.
Parse = Callable[[builtins.bytes], Any]
#: Completes the match found in a file (its path): the list with its drop-in plugins.
Complete = Callable[[Any, str], Any]


class Search:
    """Finds the first file of a sorted list defining a network, tolerating bad files.

    Files that cannot define the name are not parsed unless the search fails
    (then only to report which files are broken). Without a backslash in the
    file no JSON string is escaped, so the name, if it is there, appears
    literally as ``"<name>"``; a file with a backslash is always parsed.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        try:
            self._needle: builtins.bytes | None = b'"' + name.encode("utf-8") + b'"'
        except UnicodeEncodeError:
            self._needle = None
        self.failures: list[tuple[str, str]] = []
        self._deferred: list[tuple[str, builtins.bytes, Parse]] = []

    def _try(self, path: str, data: builtins.bytes, parse: Parse, complete: Complete | None) -> Any:
        try:
            found = parse(data)
            if found.name != self.name:
                return None
            return found if complete is None else complete(found, path)
        except ConfigError as e:
            # Logged only if the network is found in another file (see search());
            # when it is found nowhere, the NotFoundError names the broken files.
            self.failures.append((path, str(e) if e.msg.startswith(path) else f"{path}: {e}"))
            return None

    def search(self, files: Sequence[str], parse: Parse, complete: Complete | None = None) -> Any:
        """The match in ``files`` (``None``: none), after logging the broken files skipped."""
        for path in files:
            try:
                data = read_file(path)
            except ConfigError as e:
                self.failures.append((path, str(e)))
                continue
            if self._needle is not None and self._needle not in data and b"\\" not in data:
                self._deferred.append((path, data, parse))
                continue
            found = self._try(path, data, parse, complete)
            if found is not None:
                for _, reason in self.failures:
                    logger.warning(
                        "skipping a network configuration that failed to load: %s", reason
                    )
                return found
        return None

    def details(self) -> str:
        """Parse the files skipped by the pre-check, and describe every broken file."""
        for path, data, parse in self._deferred:
            self._try(path, data, parse, None)
        self._deferred.clear()
        if not self.failures:
            return ""
        self.failures.sort()
        return "files that failed to parse: " + " | ".join(reason for _, reason in self.failures)
