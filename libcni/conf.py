"""Network configurations: parse them from bytes, load them from files and directories.

A *plugin configuration* (:class:`PluginConfig`, alias :class:`NetworkConfig`)
is one JSON object with at least a ``type``; a *network configuration list*
(:class:`NetworkConfigList`) names a network and chains plugin
configurations. Both keep the original bytes and the whole parsed JSON object,
unknown keys included.

>>> conf = conf_from_bytes(b'{"cniVersion": "1.0.0", "name": "net", "type": "bridge"}')
>>> conf.type, conf.name, conf.cni_version
('bridge', 'net', '1.0.0')
>>> lst = conf_list_from_bytes(
...     '{"name": "net", "cniVersions": ["0.4.0", "1.0.0"], "plugins": [{"type": "bridge"}]}'
... )
>>> lst.cni_version, [p.type for p in lst.plugins]
('1.0.0', ['bridge'])

Every error is a :class:`~libcni.errors.ConfigError` (or a subclass) whose
message names the field, plugin index, file or value at fault.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from . import _log as logging  # logging, imported at first use
from ._json import strict_loads
from .errors import ConfigError, NoConfigsFoundError, NotFoundError, VersionError
from .types.dns import DNS
from .version import CURRENT, parse_version

__all__ = [
    "NetworkConfig",
    "NetworkConfigList",
    "PluginConfig",
    "conf_files",
    "conf_from_bytes",
    "conf_from_file",
    "conf_list_from_bytes",
    "conf_list_from_conf",
    "conf_list_from_file",
    "inject_conf",
    "load_conf",
    "load_conf_list",
    "load_network_conf",
    "network_conf_from_bytes",
    "network_conf_from_file",
    "network_plugin_conf_from_bytes",
    "network_plugin_confs_from_files",
]

logger = logging.getLogger("libcni")

#: What the parsers accept as JSON input.
JSONInput: TypeAlias = "builtins.bytes | bytearray | memoryview | str"
#: What the loaders accept as a path.
PathInput: TypeAlias = "str | os.PathLike[str]"

_CONF_EXTENSIONS = ("conf", "json")
_LIST_EXTENSIONS = ("conflist",)
_PLUGIN_DIR_EXTENSIONS = ("conf",)
_EXCERPT = 200


# --------------------------------------------------------------------------- values


@attrs.frozen
class PluginConfig:
    """One plugin's configuration: the well-known fields, typed, plus everything else.

    Build one with :func:`conf_from_bytes` (or :func:`conf_from_file`);
    ``raw`` is the whole JSON object (unknown keys included, treat it as
    read-only) and ``bytes`` the original input, unchanged.

    >>> conf = conf_from_bytes(b'{"type": "tuning", "capabilities": {"mac": true}, "x": 1}')
    >>> conf.capabilities, conf.raw["x"], conf.ipam is None
    ({'mac': True}, 1, True)
    """

    type: str
    name: str = ""
    cni_version: str = ""
    capabilities: Mapping[str, bool] = attrs.field(factory=dict, hash=False)
    ipam: Mapping[str, Any] | None = attrs.field(default=None, hash=False)
    dns: DNS | None = None
    raw: Mapping[str, Any] = attrs.field(factory=dict, hash=False, repr=False)
    bytes: builtins.bytes = b""


#: The name the Go library gives to a single plugin's configuration.
NetworkConfig = PluginConfig


def _binaries(plugin: PluginConfig) -> tuple[str, ...]:
    """The plugin types whose binaries ``plugin`` needs: its own, then its ``ipam.type`` (an
    IPAM plugin that is missing fails every ADD and DEL alike)."""
    ipam = (plugin.ipam or {}).get("type")
    return (plugin.type, ipam) if ipam and isinstance(ipam, str) else (plugin.type,)


def _plugins_tuple(value: Sequence[PluginConfig]) -> tuple[PluginConfig, ...]:
    return tuple(value)


@attrs.frozen
class NetworkConfigList:
    """A network: a name, a version, three flags and the plugins to run in order.

    Build one with :func:`conf_list_from_bytes`, :func:`conf_list_from_file`,
    :func:`load_conf_list` or :func:`conf_list_from_conf`. ``cni_version`` is
    the version after ``cniVersions`` negotiation; ``bytes`` the original
    input, unchanged; ``raw`` the whole parsed JSON object.

    >>> lst = conf_list_from_bytes(
    ...     b'{"name": "n", "disableCheck": "TRUE", "plugins": [{"type": "a"}]}'
    ... )
    >>> lst.name, lst.disable_check, lst.disable_gc, len(lst.plugins)
    ('n', True, False, 1)
    """

    name: str
    cni_version: str = ""
    disable_check: bool = False
    disable_gc: bool = False
    load_only_inlined_plugins: bool = False
    plugins: tuple[PluginConfig, ...] = attrs.field(default=(), converter=_plugins_tuple)
    bytes: builtins.bytes = b""
    raw: Mapping[str, Any] = attrs.field(factory=dict, hash=False, repr=False)

    @property
    def effective_bytes(self) -> builtins.bytes:
        """The whole list as it runs, as JSON: the bytes ADD caches.

        ``bytes`` itself when every plugin is inline in it; otherwise (plugins
        from the drop-in directory, or a list built or evolved in code)
        the JSON object of ``raw`` with ``plugins`` set to every plugin of
        the list, so that :func:`conf_list_from_bytes` of it gives all of them
        back, as does the Go library's ``ConfListFromBytes``.

        >>> lst = conf_list_from_bytes(b'{"name": "n", "cniVersion": "1.0.0"}')
        >>> lst = attrs.evolve(lst, plugins=[conf_from_bytes(b'{"type": "a"}')])
        >>> lst.effective_bytes
        b'{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"a"}]}'
        """
        inline = self.raw.get("plugins") if self.bytes else None
        if (
            isinstance(inline, list)
            and len(inline) == len(self.plugins)
            and all(p.raw is r or p.raw == r for p, r in zip(self.plugins, inline, strict=True))
        ):
            return self.bytes
        obj: dict[str, Any] = dict(self.raw) if self.bytes else {}
        if not obj:
            obj = {"cniVersion": self.cni_version, "name": self.name}
            for key, value in (
                ("disableCheck", self.disable_check),
                ("disableGC", self.disable_gc),
                ("loadOnlyInlinedPlugins", self.load_only_inlined_plugins),
            ):
                if value:
                    obj[key] = True
        obj["plugins"] = [dict(p.raw) or {"type": p.type} for p in self.plugins]
        return _dumps(obj, "serialising the configuration list")


# --------------------------------------------------------------------------- JSON helpers


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return builtins.type(value).__name__


def _to_bytes(data: Any, what: str) -> builtins.bytes:
    if isinstance(data, builtins.bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return builtins.bytes(data)
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ConfigError(
                f"error parsing {what}: text cannot be encoded as UTF-8 ({e.reason})",
                _excerpt(data[max(0, e.start - 20) : e.end + 20]),
            ) from e
    raise ConfigError(
        f"error parsing {what}: expected bytes or str, got {builtins.type(data).__name__}"
    )


def _loads(data: builtins.bytes, what: str) -> Any:
    """Strict JSON: UTF-8 only, no NaN/Infinity, no out-of-range numbers."""
    import json

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"error parsing {what}: not valid UTF-8 at byte {e.start}",
            _excerpt(data[max(0, e.start - 20) : e.end + 20]),
        ) from e
    try:
        return strict_loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"error parsing {what}: invalid JSON: {e.msg} at line {e.lineno} column {e.colno}",
            _excerpt(text[max(0, e.pos - 20) : e.pos + 20]),
        ) from e
    except ValueError as e:  # NaN/Infinity, huge numbers
        raise ConfigError(f"error parsing {what}: invalid JSON: {e}") from e
    except RecursionError as e:
        raise ConfigError(f"error parsing {what}: JSON is nested too deeply") from e


def _dumps(obj: Any, what: str) -> builtins.bytes:
    """Compact JSON bytes; ``ConfigError`` if ``obj`` cannot be represented."""
    import json

    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as e:
        raise ConfigError(f"{what}: value cannot be serialised as JSON: {e}") from e
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from "\ud800" escapes): keep them escaped.
        return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def _opt_str(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(
            f"error parsing {what}: '{key}' must be a string, not {_type_name(value)}",
            _excerpt(value),
        )
    return value


# --------------------------------------------------------------------------- parsing


def _plugin_from_obj(obj: Any, data: builtins.bytes, what: str) -> PluginConfig:
    if not isinstance(obj, dict):
        raise ConfigError(
            f"error parsing {what}: must be a JSON object, not {_type_name(obj)}", _excerpt(obj)
        )
    ptype = obj.get("type")
    if ptype is None or ptype == "":
        raise ConfigError(f"error parsing {what}: missing 'type'")
    if not isinstance(ptype, str):
        raise ConfigError(
            f"error parsing {what}: 'type' must be a string, not {_type_name(ptype)}",
            _excerpt(ptype),
        )
    name = _opt_str(obj, "name", what)
    cni_version = _opt_str(obj, "cniVersion", what)

    capabilities = _capabilities(obj.get("capabilities"), what)
    ipam = obj.get("ipam")
    _check_ipam(ipam, what)
    dns_obj = obj.get("dns")
    dns: DNS | None = None
    if dns_obj is not None:
        try:
            dns = DNS.from_dict(dns_obj, error=ConfigError)
        except ConfigError as e:
            raise ConfigError(f"error parsing {what}: {e.msg}", e.details) from e

    return PluginConfig(
        type=ptype,
        name=name,
        cni_version=cni_version,
        capabilities=capabilities,
        ipam=ipam,
        dns=dns,
        raw=obj,
        bytes=data,
    )


def _capabilities(caps: Any, what: str) -> dict[str, bool]:
    """A plugin's ``capabilities`` (an object of booleans; absent: none)."""
    capabilities: dict[str, bool] = {}
    if caps is None:
        return capabilities
    if not isinstance(caps, dict):
        raise ConfigError(
            f"error parsing {what}: 'capabilities' must be an object, not {_type_name(caps)}",
            _excerpt(caps),
        )
    for cap, enabled in caps.items():
        if not isinstance(enabled, bool):
            raise ConfigError(
                f"error parsing {what}: capability '{cap}' must be a boolean,"
                f" not {_type_name(enabled)}",
                _excerpt(enabled),
            )
        capabilities[cap] = enabled
    return capabilities


def _check_ipam(ipam: Any, what: str) -> None:
    """A plugin's ``ipam``: absent, or an object whose ``type`` (if any) is a string."""
    if ipam is None:
        return
    if not isinstance(ipam, dict):
        raise ConfigError(
            f"error parsing {what}: 'ipam' must be an object, not {_type_name(ipam)}",
            _excerpt(ipam),
        )
    ipam_type = ipam.get("type")
    if ipam_type is not None and not isinstance(ipam_type, str):
        raise ConfigError(
            f"error parsing {what}: 'ipam.type' must be a string, not {_type_name(ipam_type)}",
            _excerpt(ipam_type),
        )


def conf_from_bytes(data: JSONInput) -> PluginConfig:
    """Parse one plugin configuration.

    ``data`` is ``bytes`` or ``str`` holding a JSON object with a non-empty
    ``type``. A wrongly typed well-known field (``name``, ``cniVersion``,
    ``capabilities``, ``ipam``, ``dns``) raises :class:`~libcni.errors.ConfigError` naming it.

    >>> conf_from_bytes('{"type": "bridge", "bridge": "cni0"}').raw["bridge"]
    'cni0'
    >>> conf_from_bytes('{"name": "x"}')
    Traceback (most recent call last):
    ...
    libcni.errors.ConfigError: error parsing configuration: missing 'type'
    """
    what = "configuration"
    raw_bytes = _to_bytes(data, what)
    return _plugin_from_obj(_loads(raw_bytes, what), raw_bytes, what)


def _read_bool(obj: Mapping[str, Any], key: str) -> bool:
    if key not in obj:
        return False
    value = obj[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
    raise ConfigError(
        f"error parsing configuration list: invalid value {_excerpt(value)} for '{key}'"
        ' (expected true, false, "true" or "false")',
        _excerpt(value),
    )


def _negotiate_version(obj: Mapping[str, Any], cni_version: str) -> str:
    raw_versions = obj["cniVersions"]
    what = "error parsing configuration list"
    if not isinstance(raw_versions, list):
        raise ConfigError(
            f"{what}: 'cniVersions' must be a list of strings, not {_type_name(raw_versions)}",
            _excerpt(raw_versions),
        )
    newest = parse_version(CURRENT)
    candidates: list[tuple[tuple[int, int, int], str]] = []
    for i, entry in enumerate(raw_versions):
        if not isinstance(entry, str):
            raise ConfigError(
                f"{what}: 'cniVersions' entry {i} must be a string, not {_type_name(entry)}",
                _excerpt(entry),
            )
        try:
            parsed = parse_version(entry)
        except VersionError as e:
            raise ConfigError(
                f"{what}: invalid 'cniVersions' entry {entry!r} at index {i}: {e.msg}", entry
            ) from e
        if parsed <= newest:
            candidates.append((parsed, entry))
    if cni_version:
        try:
            parsed = parse_version(cni_version)
        except VersionError as e:
            raise ConfigError(
                f"{what}: invalid 'cniVersion' {cni_version!r}: {e.msg}", cni_version
            ) from e
        if parsed <= newest:
            candidates.append((parsed, cni_version))
    if not candidates:
        return cni_version
    best = candidates[0]
    for candidate in candidates[1:]:
        if candidate[0] > best[0]:
            best = candidate
    return best[1]


def _list_plugins(raw_plugins: Any, what: str) -> list[PluginConfig]:
    """The plugins of a configuration list (its ``plugins``: a non-empty list of objects)."""
    if not isinstance(raw_plugins, list):
        raise ConfigError(
            f"error parsing {what}: 'plugins' must be a list, not {_type_name(raw_plugins)}",
            _excerpt(raw_plugins),
        )
    if not raw_plugins:
        raise ConfigError(f"error parsing {what}: no plugins in list")
    plugins: list[PluginConfig] = []
    for i, plugin_obj in enumerate(raw_plugins):
        plugin_what = f"plugin config {i}"
        if not isinstance(plugin_obj, dict):
            raise ConfigError(
                f"error parsing {plugin_what}: must be a JSON object, not {_type_name(plugin_obj)}",
                _excerpt(plugin_obj),
            )
        plugin_bytes = _dumps(plugin_obj, f"error parsing {plugin_what}")
        plugins.append(_plugin_from_obj(plugin_obj, plugin_bytes, plugin_what))
    return plugins


def _list_from_obj(obj: Any, data: builtins.bytes) -> NetworkConfigList:
    what = "configuration list"
    if not isinstance(obj, dict):
        raise ConfigError(
            f"error parsing {what}: must be a JSON object, not {_type_name(obj)}", _excerpt(obj)
        )
    if "name" not in obj:
        raise ConfigError(f"error parsing {what}: no 'name'")
    name = obj["name"]
    if not isinstance(name, str):
        raise ConfigError(
            f"error parsing {what}: 'name' must be a string, not {_type_name(name)}",
            _excerpt(name),
        )
    cni_version = ""
    if "cniVersion" in obj:
        cni_version = obj["cniVersion"]
        if not isinstance(cni_version, str):
            raise ConfigError(
                f"error parsing {what}: 'cniVersion' must be a string,"
                f" not {_type_name(cni_version)}",
                _excerpt(cni_version),
            )
    if "cniVersions" in obj:
        cni_version = _negotiate_version(obj, cni_version)

    disable_check = _read_bool(obj, "disableCheck")
    disable_gc = _read_bool(obj, "disableGC")
    load_only_inlined = _read_bool(obj, "loadOnlyInlinedPlugins")

    plugins: list[PluginConfig] = []
    if "plugins" not in obj:
        if load_only_inlined:
            raise ConfigError(
                f"error parsing {what}: 'loadOnlyInlinedPlugins' is true and there is no"
                " 'plugins' key"
            )
    else:
        plugins = _list_plugins(obj["plugins"], what)

    return NetworkConfigList(
        name=name,
        cni_version=cni_version,
        plugins=plugins,
        bytes=data,
        raw=obj,
        disable_check=disable_check,
        disable_gc=disable_gc,
        load_only_inlined_plugins=load_only_inlined,
    )


def conf_list_from_bytes(data: JSONInput) -> NetworkConfigList:
    """Parse a network configuration list.

    Only the inline ``plugins`` are parsed; :func:`conf_list_from_file` also
    adds the plugins of the network's drop-in directory. ``cniVersions`` is
    negotiated to the newest version this library supports.

    >>> conf_list_from_bytes(
    ...     '{"name": "n", "cniVersion": "0.4.0", "cniVersions": ["1.0.0", "9.0.0"]}'
    ... ).cni_version
    '1.0.0'
    >>> conf_list_from_bytes('{"name": "n", "plugins": [{"type": "a"}, {"name": "b"}]}')
    Traceback (most recent call last):
    ...
    libcni.errors.ConfigError: error parsing plugin config 1: missing 'type'
    """
    what = "configuration list"
    raw_bytes = _to_bytes(data, what)
    return _list_from_obj(_loads(raw_bytes, what), raw_bytes)


# --------------------------------------------------------------------------- files


def _path_str(path: PathInput) -> str:
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError as e:
        raise ConfigError(f"invalid path {_excerpt(path)}: {e}") from e


def _read_file(path: str) -> builtins.bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"error reading {path}: {reason}") from e


def _in_file(err: ConfigError, path: str) -> ConfigError:
    new = ConfigError(f"{path}: {err.msg}", err.details, code=err.code)
    new.__cause__ = err
    return new


def conf_from_file(path: PathInput) -> PluginConfig:
    """Read and parse one plugin configuration file.

    Read and parse errors are :class:`~libcni.errors.ConfigError`\\s naming the file.
    """
    p = _path_str(path)
    data = _read_file(p)
    try:
        return conf_from_bytes(data)
    except ConfigError as e:
        raise _in_file(e, p) from e


def _safe_dir_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _plugins_from_dir(conf_dir: str, network: str) -> list[PluginConfig]:
    if not _safe_dir_name(network):
        return []
    plugin_dir = os.path.join(conf_dir, network)
    if not os.path.isdir(plugin_dir):
        return []
    plugins = []
    for file in conf_files(plugin_dir, _PLUGIN_DIR_EXTENSIONS):
        plugins.append(conf_from_file(file))
    return plugins


def _complete_list(lst: NetworkConfigList, path: str) -> NetworkConfigList:
    """Add the drop-in plugins of ``<dir of path>/<name>/`` and check there is a plugin."""
    plugins = lst.plugins
    if not lst.load_only_inlined_plugins:
        extra = _plugins_from_dir(os.path.dirname(path) or ".", lst.name)
        if extra:
            plugins = plugins + tuple(extra)
            lst = attrs.evolve(lst, plugins=plugins)
    if not plugins:
        raise ConfigError(f"{path}: no plugin configs found", lst.name)
    return lst


def conf_list_from_file(path: PathInput) -> NetworkConfigList:
    """Read and parse a network configuration list file.

    Unless ``loadOnlyInlinedPlugins`` is true, the plugin configurations in
    ``<dir of the file>/<network name>/*.conf`` (sorted by file name) are
    appended after the inline plugins. A list that ends with no plugin at all
    is a :class:`~libcni.errors.ConfigError` ("no plugin configs found"). Every error names
    the file.
    """
    p = _path_str(path)
    data = _read_file(p)
    try:
        lst = conf_list_from_bytes(data)
    except ConfigError as e:
        raise _in_file(e, p) from e
    return _complete_list(lst, p)


def conf_files(dir: PathInput, extensions: Sequence[str]) -> list[str]:
    """The regular files directly in ``dir`` with one of the given extensions, sorted.

    The extension is what follows the last dot of the file name, compared
    case-sensitively; ``extensions`` may be given with or without the dot
    (``".conf"`` or ``"conf"``). Symbolic links to regular files count. A
    missing directory gives ``[]``; an unreadable one is a :class:`~libcni.errors.ConfigError`.

    >>> conf_files("/nonexistent", [".conf"])
    []
    """
    d = _path_str(dir)
    wanted = {ext[1:] if ext.startswith(".") else ext for ext in extensions}
    found: list[tuple[str, str]] = []
    try:
        with os.scandir(d) as it:
            for entry in it:
                _, dot, ext = entry.name.rpartition(".")
                if not dot or ext not in wanted:
                    continue
                try:
                    if not entry.is_file():
                        continue
                except OSError:
                    continue
                found.append((entry.name, os.path.join(d, entry.name)))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ConfigError(f"error reading directory {d}: {e.strerror or e}", d) from e
    found.sort()
    return [full for _, full in found]


class _Search:
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
        self._deferred: list[tuple[str, builtins.bytes, bool]] = []

    def _may_match(self, data: builtins.bytes) -> bool:
        return self._needle is None or self._needle in data or b"\\" in data

    def _fail(self, path: str, err: ConfigError) -> None:
        # Logged only if the network is found in another file (see found());
        # when it is found nowhere, the NotFoundError names the broken files,
        # and a warning would repeat the same text.
        self.failures.append((path, str(err)))

    def found(self, value: Any) -> Any:
        """``value`` (the match), after logging the broken files the search skipped."""
        for _, reason in self.failures:
            logger.warning("skipping a network configuration that failed to load: %s", reason)
        return value

    def _try(self, path: str, data: builtins.bytes, is_list: bool) -> Any:
        try:
            if is_list:
                lst = conf_list_from_bytes(data)
                if lst.name != self.name:
                    return None
                return _complete_list(lst, path)
            conf = conf_from_bytes(data)
            return conf if conf.name == self.name else None
        except ConfigError as e:
            self._fail(path, e if e.msg.startswith(path) else _in_file(e, path))
            return None

    def search(self, files: Sequence[str], is_list: bool) -> Any:
        for path in files:
            try:
                data = _read_file(path)
            except ConfigError as e:
                self._fail(path, e)
                continue
            if not self._may_match(data):
                self._deferred.append((path, data, is_list))
                continue
            found = self._try(path, data, is_list)
            if found is not None:
                return self.found(found)
        return None

    def details(self) -> str:
        """Parse the files skipped by the pre-check, and describe every broken file."""
        for path, data, is_list in self._deferred:
            try:
                if is_list:
                    conf_list_from_bytes(data)
                else:
                    conf_from_bytes(data)
            except ConfigError as e:
                self._fail(path, _in_file(e, path))
        self._deferred.clear()
        if not self.failures:
            return ""
        self.failures.sort()
        return "files that failed to parse: " + " | ".join(reason for _, reason in self.failures)


def load_conf(dir: PathInput, name: str) -> PluginConfig:
    """The first ``*.conf``/``*.json`` plugin configuration in ``dir`` named ``name``.

    Files are tried in sorted order. No such files (or no directory):
    :class:`~libcni.errors.NoConfigsFoundError`. No match: :class:`~libcni.errors.NotFoundError`, whose
    details name every file that failed to parse. A broken file does not hide
    a valid configuration in a later file (the failure is logged).
    """
    d = _path_str(dir)
    files = conf_files(d, _CONF_EXTENSIONS)
    if not files:
        raise NoConfigsFoundError(d)
    search = _Search(name)
    found: PluginConfig | None = search.search(files, is_list=False)
    if found is None:
        raise NotFoundError(d, name, search.details())
    return found


def load_conf_list(dir: PathInput, name: str) -> NetworkConfigList:
    """The network ``name`` from the configuration directory ``dir``.

    The ``*.conflist`` files are tried first, in sorted order (each completed
    with its drop-in plugin directory, as :func:`conf_list_from_file` does);
    then the ``*.conf``/``*.json`` plugin configurations, the match wrapped
    with :func:`conf_list_from_conf`.

    A file that fails to parse does not hide the network in another file: it
    is skipped, with a warning on the ``libcni`` logger. When the name is
    found nowhere, :class:`~libcni.errors.NotFoundError` says in its details which files
    failed to parse and why (and nothing is logged: one error, said once). A missing or empty directory gives
    :class:`~libcni.errors.NoConfigsFoundError`.
    """
    d = _path_str(dir)
    list_files = conf_files(d, _LIST_EXTENSIONS)
    search = _Search(name)
    found_list: NetworkConfigList | None = search.search(list_files, is_list=True)
    if found_list is not None:
        return found_list
    conf_files_ = conf_files(d, _CONF_EXTENSIONS)
    if not conf_files_:
        if list_files:
            raise NotFoundError(d, name, search.details())
        raise NoConfigsFoundError(d)
    found: PluginConfig | None = search.search(conf_files_, is_list=False)
    if found is None:
        raise NotFoundError(d, name, search.details())
    return conf_list_from_conf(found)


# --------------------------------------------------------------------------- transforms


def conf_list_from_conf(conf: PluginConfig) -> NetworkConfigList:
    """Wrap one plugin configuration into a list with its ``name`` and ``cniVersion``.

    The flags are false; ``bytes`` is the JSON of ``{"cniVersion", "name",
    "plugins": [conf.raw]}``.

    >>> conf = conf_from_bytes('{"name": "n", "cniVersion": "0.4.0", "type": "a"}')
    >>> lst = conf_list_from_conf(conf)
    >>> lst.name, lst.cni_version, lst.plugins[0].type, lst.disable_check
    ('n', '0.4.0', 'a', False)
    """
    raw: dict[str, Any] = {
        "cniVersion": conf.cni_version,
        "name": conf.name,
        "plugins": [conf.raw],
    }
    return NetworkConfigList(
        name=conf.name,
        cni_version=conf.cni_version,
        plugins=(conf,),
        bytes=_dumps(raw, "converting configuration to a list"),
        raw=raw,
    )


def inject_conf(conf: PluginConfig, values: Mapping[str, Any]) -> PluginConfig:
    """A new plugin configuration with the given top-level keys set or replaced.

    ``bytes`` of the result is the re-serialised JSON object. An empty key, a
    ``None`` value or a value that JSON cannot represent is a
    :class:`~libcni.errors.ConfigError`.

    >>> conf = conf_from_bytes('{"type": "a", "keep": 1}')
    >>> new = inject_conf(conf, {"name": "n", "runtimeConfig": {"mac": "x"}})
    >>> new.name, new.raw["keep"], new.raw["runtimeConfig"]
    ('n', 1, {'mac': 'x'})
    """
    new = dict(conf.raw)
    for key, value in values.items():
        if not isinstance(key, str) or key == "":
            raise ConfigError("inject_conf: keys must be non-empty strings", _excerpt(key))
        if value is None:
            raise ConfigError(f"inject_conf: value of key '{key}' must not be None")
        new[key] = value
    data = _dumps(new, "inject_conf")
    # Re-parse (rather than trust ``new``) so that the result owns plain JSON
    # values and its fields are validated like any other configuration.
    return conf_from_bytes(data)


# --------------------------------------------------------------------------- Go v1.3 names

# Go libcni v1.3 renamed its loaders; a Go user finds the same functions under those names.

#: Go v1.3's ``NetworkConfFromBytes``: :func:`conf_list_from_bytes`.
network_conf_from_bytes = conf_list_from_bytes
#: Go v1.3's ``NetworkConfFromFile``: :func:`conf_list_from_file`.
network_conf_from_file = conf_list_from_file
#: Go v1.3's ``NetworkPluginConfFromBytes``: :func:`conf_from_bytes`.
network_plugin_conf_from_bytes = conf_from_bytes
#: Go v1.3's ``LoadNetworkConf``: :func:`load_conf_list`.
load_network_conf = load_conf_list


def network_plugin_confs_from_files(dir: PathInput, network: str) -> list[PluginConfig]:
    """The plugin configurations of ``<dir>/<network>/*.conf``, in file-name order.

    Go v1.3's ``NetworkPluginConfsFromFiles``: the drop-in plugins that
    :func:`conf_list_from_file` appends to the inline ones of a list named
    ``network`` in ``dir`` (unless ``loadOnlyInlinedPlugins``). A missing
    directory gives ``[]``; a file that cannot be read or parsed is a
    :class:`~libcni.errors.ConfigError` naming it; a ``network`` that is not
    one path component (empty, ``.``, ``..``, with ``/`` or NUL) is a
    :class:`~libcni.errors.ConfigError` too.

    >>> network_plugin_confs_from_files("/nonexistent", "mynet")
    []
    """
    d = _path_str(dir)
    if not isinstance(network, str) or not _safe_dir_name(network):
        raise ConfigError(
            "invalid network name for a drop-in plugin directory "
            "(empty, '.', '..', or with '/' or NUL)",
            _excerpt(network),
        )
    return _plugins_from_dir(d, network)
