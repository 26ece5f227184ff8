"""Network configurations: parse them from bytes, load them from files and directories.

Every error is a :class:`~libcni.errors.ConfigError` (or a subclass) whose
message names the field, plugin index, file or value at fault.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from ._json import strict_loads
from ._load import PathInput, Search, conf_files, path_str, read_file
from ._load import excerpt as _excerpt
from .errors import ConfigError, NoConfigsFoundError, NotFoundError, VersionError
from .types.dns import DNS
from .version import CURRENT, parse_version

__all__ = ["NetworkConfig", "NetworkConfigList", "PluginConfig", "conf_files", "conf_from_bytes"]
__all__ += ["conf_from_file", "conf_list_from_bytes", "conf_list_from_conf", "conf_list_from_file"]
__all__ += ["inject_conf", "load_conf", "load_conf_list", "load_network_conf"]
__all__ += ["network_conf_from_bytes", "network_conf_from_file", "network_plugin_conf_from_bytes"]
__all__ += ["network_plugin_confs_from_files"]

#: What the parsers accept as JSON input.
JSONInput: TypeAlias = "builtins.bytes | bytearray | memoryview | str"

_CONF_EXTENSIONS = ("conf", "json")


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
    """The plugin types whose binaries ``plugin`` needs: its own, then its ``ipam.type``."""
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

        ``bytes`` itself when every plugin is inline in it; otherwise ``raw``
        with ``plugins`` set to every plugin of the list.

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
            flags = ("disableCheck", "disableGC", "loadOnlyInlinedPlugins")
            values = (self.disable_check, self.disable_gc, self.load_only_inlined_plugins)
            obj |= {key: True for key, value in zip(flags, values, strict=True) if value}
        obj["plugins"] = [dict(p.raw) or {"type": p.type} for p in self.plugins]
        return _dumps(obj, "serialising the configuration list")


_JSON_TYPES = {bool: "boolean", int: "number", float: "number", str: "string"}
_JSON_TYPES |= {list: "array", dict: "object", builtins.type(None): "null"}


def _wrong_type(where: str, expected: str, value: Any) -> ConfigError:
    """``error parsing <where> must be <expected>, not <the JSON type of value>``."""
    found = _JSON_TYPES.get(builtins.type(value), builtins.type(value).__name__)
    return ConfigError(f"error parsing {where} must be {expected}, not {found}", _excerpt(value))


def _to_bytes(data: Any, what: str) -> builtins.bytes:
    if isinstance(data, (builtins.bytes, bytearray, memoryview)):
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
    if value is not None and not isinstance(value, str):
        raise _wrong_type(f"{what}: '{key}'", "a string", value)
    return value or ""


def _plugin_from_obj(obj: Any, data: builtins.bytes, what: str) -> PluginConfig:
    if not isinstance(obj, dict):
        raise _wrong_type(f"{what}:", "a JSON object", obj)
    ptype = obj.get("type")
    if ptype is None or ptype == "":
        raise ConfigError(f"error parsing {what}: missing 'type'")
    if not isinstance(ptype, str):
        raise _wrong_type(f"{what}: 'type'", "a string", ptype)
    name = _opt_str(obj, "name", what)
    cni_version = _opt_str(obj, "cniVersion", what)
    capabilities = _capabilities(obj.get("capabilities"), what)
    ipam = obj.get("ipam")
    if ipam is not None and not isinstance(ipam, dict):
        raise _wrong_type(f"{what}: 'ipam'", "an object", ipam)
    if ipam is not None and not isinstance(ipam.get("type"), (str, builtins.type(None))):
        raise _wrong_type(f"{what}: 'ipam.type'", "a string", ipam["type"])
    dns: DNS | None = None
    if obj.get("dns") is not None:
        try:
            dns = DNS.from_dict(obj["dns"], error=ConfigError)
        except ConfigError as e:
            raise ConfigError(f"error parsing {what}: {e.msg}", e.details) from e
    return PluginConfig(ptype, name, cni_version, capabilities, ipam, dns, obj, data)


def _capabilities(caps: Any, what: str) -> dict[str, bool]:
    """A plugin's ``capabilities`` (an object of booleans; absent: none)."""
    if caps is None:
        return {}
    if not isinstance(caps, dict):
        raise _wrong_type(f"{what}: 'capabilities'", "an object", caps)
    for cap, enabled in caps.items():
        if not isinstance(enabled, bool):
            raise _wrong_type(f"{what}: capability '{cap}'", "a boolean", enabled)
    return dict(caps)


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
    value = obj.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(
        f"error parsing configuration list: invalid value {_excerpt(value)} for '{key}'"
        ' (expected true, false, "true" or "false")',
        _excerpt(value),
    )


def _version(text: str, what: str) -> tuple[int, int, int]:
    try:
        return parse_version(text)
    except VersionError as e:
        raise ConfigError(f"error parsing configuration list: {what}: {e.msg}", text) from e


def _negotiate_version(raw_versions: Any, cni_version: str) -> str:
    """The newest of ``cniVersions`` and ``cniVersion`` this library supports, else ``cni_version``."""
    if not isinstance(raw_versions, list):
        raise _wrong_type("configuration list: 'cniVersions'", "a list of strings", raw_versions)
    candidates = []
    for i, entry in enumerate(raw_versions):
        if not isinstance(entry, str):
            raise _wrong_type(f"configuration list: 'cniVersions' entry {i}", "a string", entry)
        why = f"invalid 'cniVersions' entry {entry!r} at index {i}"
        candidates.append((_version(entry, why), entry))
    if cni_version:
        why = f"invalid 'cniVersion' {cni_version!r}"
        candidates.append((_version(cni_version, why), cni_version))
    newest = parse_version(CURRENT)
    supported = [c for c in candidates if c[0] <= newest]
    return max(supported, key=lambda c: c[0])[1] if supported else cni_version


def _list_plugins(raw_plugins: Any, what: str) -> list[PluginConfig]:
    """The plugins of a configuration list (its ``plugins``: a non-empty list of objects)."""
    if not isinstance(raw_plugins, list):
        raise _wrong_type(f"{what}: 'plugins'", "a list", raw_plugins)
    if not raw_plugins:
        raise ConfigError(f"error parsing {what}: no plugins in list")
    plugins: list[PluginConfig] = []
    for i, obj in enumerate(raw_plugins):
        where = f"plugin config {i}"
        plugins.append(_plugin_from_obj(obj, _dumps(obj, f"error parsing {where}"), where))
    return plugins


def _list_from_obj(obj: Any, data: builtins.bytes) -> NetworkConfigList:
    what = "configuration list"
    if not isinstance(obj, dict):
        raise _wrong_type(f"{what}:", "a JSON object", obj)
    if "name" not in obj:
        raise ConfigError(f"error parsing {what}: no 'name'")
    for key in ("name", "cniVersion"):
        if key in obj and not isinstance(obj[key], str):
            raise _wrong_type(f"{what}: '{key}'", "a string", obj[key])
    cni_version = obj.get("cniVersion", "")
    if "cniVersions" in obj:
        cni_version = _negotiate_version(obj["cniVersions"], cni_version)
    check, gc, inlined = (
        _read_bool(obj, k) for k in ("disableCheck", "disableGC", "loadOnlyInlinedPlugins")
    )
    if "plugins" not in obj and inlined:
        raise ConfigError(
            f"error parsing {what}: 'loadOnlyInlinedPlugins' is true and there is no 'plugins' key"
        )
    plugins = _list_plugins(obj["plugins"], what) if "plugins" in obj else ()
    return NetworkConfigList(obj["name"], cni_version, check, gc, inlined, plugins, data, obj)


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


def _in_file(err: ConfigError, path: str) -> ConfigError:
    new = ConfigError(f"{path}: {err.msg}", err.details, code=err.code)
    new.__cause__ = err
    return new


def conf_from_file(path: PathInput) -> PluginConfig:
    """Read and parse one plugin configuration file; errors name the file."""
    p = path_str(path)
    data = read_file(p)
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
    return [conf_from_file(file) for file in conf_files(plugin_dir, ("conf",))]


def _complete_list(lst: NetworkConfigList, path: str) -> NetworkConfigList:
    """Add the drop-in plugins of ``<dir of path>/<name>/`` and check there is a plugin."""
    if not lst.load_only_inlined_plugins:
        extra = _plugins_from_dir(os.path.dirname(path) or ".", lst.name)
        if extra:
            lst = attrs.evolve(lst, plugins=lst.plugins + tuple(extra))
    if not lst.plugins:
        raise ConfigError(f"{path}: no plugin configs found", lst.name)
    return lst


def conf_list_from_file(path: PathInput) -> NetworkConfigList:
    """Read and parse a network configuration list file.

    Unless ``loadOnlyInlinedPlugins`` is true, the plugin configurations in
    ``<dir of the file>/<network name>/*.conf`` (sorted by file name) are
    appended after the inline plugins. No plugin at all is a
    :class:`~libcni.errors.ConfigError`. Every error names the file.
    """
    p = path_str(path)
    data = read_file(p)
    try:
        lst = conf_list_from_bytes(data)
    except ConfigError as e:
        raise _in_file(e, p) from e
    return _complete_list(lst, p)


def load_conf(dir: PathInput, name: str) -> PluginConfig:
    """The first ``*.conf``/``*.json`` plugin configuration in ``dir`` named ``name``.

    Files are tried in sorted order; a broken one is skipped (and logged). No
    such files: :class:`~libcni.errors.NoConfigsFoundError`. No match:
    :class:`~libcni.errors.NotFoundError`, naming the files that failed to parse.
    """
    d = path_str(dir)
    files = conf_files(d, _CONF_EXTENSIONS)
    if not files:
        raise NoConfigsFoundError(d)
    search = Search(name)
    found: PluginConfig | None = search.search(files, conf_from_bytes)
    if found is None:
        raise NotFoundError(d, name, search.details())
    return found


def load_conf_list(dir: PathInput, name: str) -> NetworkConfigList:
    """The network ``name`` from the configuration directory ``dir``.

    The ``*.conflist`` files are tried first, in sorted order (each completed
    with its drop-in plugin directory, as :func:`conf_list_from_file` does);
    then the ``*.conf``/``*.json`` plugin configurations, the match wrapped
    with :func:`conf_list_from_conf`.

    A file that fails to parse is skipped, with a warning on the ``libcni``
    logger. Not found: :class:`~libcni.errors.NotFoundError`, whose details name
    the files that failed to parse. A missing or empty directory:
    :class:`~libcni.errors.NoConfigsFoundError`.
    """
    d = path_str(dir)
    list_files = conf_files(d, ("conflist",))
    search = Search(name)
    found_list: NetworkConfigList | None = search.search(
        list_files, conf_list_from_bytes, _complete_list
    )
    if found_list is not None:
        return found_list
    files = conf_files(d, _CONF_EXTENSIONS)
    if not files and not list_files:
        raise NoConfigsFoundError(d)
    found: PluginConfig | None = search.search(files, conf_from_bytes)
    if found is None:
        raise NotFoundError(d, name, search.details())
    return conf_list_from_conf(found)


def conf_list_from_conf(conf: PluginConfig) -> NetworkConfigList:
    """Wrap one plugin configuration into a list with its ``name`` and ``cniVersion``.

    The flags are false; ``bytes`` is the JSON of ``{"cniVersion", "name", "plugins"}``.

    >>> conf = conf_from_bytes('{"name": "n", "cniVersion": "0.4.0", "type": "a"}')
    >>> lst = conf_list_from_conf(conf)
    >>> lst.name, lst.cni_version, lst.plugins[0].type, lst.disable_check
    ('n', '0.4.0', 'a', False)
    """
    raw = {"cniVersion": conf.cni_version, "name": conf.name, "plugins": [conf.raw]}
    data = _dumps(raw, "converting configuration to a list")
    return NetworkConfigList(conf.name, conf.cni_version, plugins=(conf,), bytes=data, raw=raw)


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
    # Re-parsed: the result owns plain JSON values, validated like any configuration.
    return conf_from_bytes(_dumps(new, "inject_conf"))


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
    :func:`conf_list_from_file` appends. A missing directory gives ``[]``; a bad
    file (named) or a ``network`` that is not one path component is a
    :class:`~libcni.errors.ConfigError`.

    >>> network_plugin_confs_from_files("/nonexistent", "mynet")
    []
    """
    d = path_str(dir)
    if not isinstance(network, str) or not _safe_dir_name(network):
        raise ConfigError(
            "invalid network name for a drop-in plugin directory "
            "(empty, '.', '..', or with '/' or NUL)",
            _excerpt(network),
        )
    return _plugins_from_dir(d, network)
