"""What a plugin receives: its stdin JSON and its environment (pure functions)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ._env import Environment
from .errors import (
    CODE_INVALID_CONFIG,
    CODE_INVALID_ENV,
    CODE_UNKNOWN_CONTAINER,
    ConfigError,
    ValidationError,
)
from .version import VERSION_REQUEST as VERSION_REQUEST  # the probe's stdin, stated there

__all__ = ["ADD", "CHECK", "DEL", "GC", "STATUS", "VERSION", "check_capability_args"]
__all__ += ["encode_cni_args", "environ_snapshot", "gc_request", "operation_env", "plugin_env"]
__all__ += ["plugin_request", "plugin_stdin", "runtime_config", "status_request"]
__all__ += ["validate_attachment", "validate_container_id", "validate_interface_name"]
__all__ += ["validate_network_name", "version_env"]

ADD = "ADD"
CHECK = "CHECK"
DEL = "DEL"
GC = "GC"
STATUS = "STATUS"
VERSION = "VERSION"


def _dumps(obj: Any, /) -> str:
    """Compact JSON text; replaced by the encoder at the first call (lazy :mod:`json`)."""
    global _dumps
    import json

    _dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    return _dumps(obj)


def runtime_config(
    capabilities: Mapping[str, Any], capability_args: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``runtimeConfig`` a plugin gets: the capability arguments it declares and the runtime provides.

    >>> runtime_config({"portMappings": True, "mac": False}, {"portMappings": [], "mac": "x", "y": 1})
    {'portMappings': []}
    """
    return {
        key: capability_args[key]
        for key, enabled in capabilities.items()
        if enabled is True and key in capability_args
    }


def plugin_stdin(
    command: str,
    conf: Mapping[str, Any],
    *,
    name: str,
    cni_version: str,
    capability_args: Mapping[str, Any] | None = None,
    prev_result: Mapping[str, Any] | None = None,
    valid_attachments: Iterable[tuple[str, str]] = (),
) -> bytes:
    """What one plugin call of ``command`` is sent on stdin: the one decision, per plugin call.

    ADD, CHECK and DEL: :func:`plugin_request`; GC: :func:`gc_request`; STATUS:
    :func:`status_request`; VERSION: :data:`VERSION_REQUEST`.
    """
    if command == GC:
        return gc_request(
            conf, name=name, cni_version=cni_version, valid_attachments=valid_attachments
        )
    if command == STATUS:
        return status_request(conf, name=name, cni_version=cni_version)
    if command == VERSION:
        return VERSION_REQUEST
    args = {"capability_args": capability_args, "prev_result": prev_result}
    return plugin_request(conf, name=name, cni_version=cni_version, **args)


def operation_env(
    command: str,
    *,
    container_id: str = "",
    netns: str = "",
    ifname: str = "",
    args: Sequence[tuple[str, str]] = (),
    capability_args: Mapping[str, Any] | None = None,
    path: Sequence[str] = (),
) -> dict[str, str]:
    """The environment of every plugin call of one operation, from a snapshot of ``os.environ``.

    ``args`` that ``CNI_ARGS`` cannot represent and ``capability_args`` without a
    JSON form are refused here, before any plugin runs. The result is read-only.
    """
    base = environ_snapshot()
    if command == VERSION:
        return Environment(version_env(base))
    if capability_args:
        check_capability_args(capability_args)
    cni_args = encode_cni_args(args)
    attachment = {"container_id": container_id, "netns": netns, "ifname": ifname}
    return Environment(
        plugin_env(base, command=command, cni_args=cni_args, path=path, **attachment)
    )


def plugin_request(
    conf: Mapping[str, Any],
    *,
    name: str,
    cni_version: str,
    capability_args: Mapping[str, Any] | None = None,
    prev_result: Mapping[str, Any] | None = None,
) -> bytes:
    """The stdin of an ADD, CHECK or DEL call, as bytes.

    ``conf`` is the plugin's own configuration object. ``name`` and ``cniVersion``
    replace whatever it holds; ``prevResult`` is set when given; ``runtimeConfig``
    is set to the declared-and-provided capability arguments, unless there are
    none. Every other key passes through.
    """
    request = _named(conf, name, cni_version)
    if capability_args:
        capabilities = conf.get("capabilities")
        if isinstance(capabilities, Mapping):
            rc = runtime_config(capabilities, capability_args)
            if rc:
                request["runtimeConfig"] = rc
    if prev_result is not None:
        request["prevResult"] = prev_result
    return _encode(request)


class EncodedAttachments:
    """The valid attachments of one GC, whose JSON is made once for all its plugins."""

    __slots__ = ("_text", "pairs")

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.pairs: tuple[tuple[str, str], ...] = tuple(pairs)
        self._text: str | None = None

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)

    def text(self) -> str:
        """The JSON list of ``{"containerID": ..., "ifname": ...}`` objects."""
        if self._text is None:
            self._text = _dumps(_attachment_objects(self.pairs))
        return self._text


def _attachment_objects(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"containerID": cid, "ifname": ifname} for cid, ifname in pairs]


_VALID_KEYS = ("cni.dev/valid-attachments", "cni.dev/attachments")


def gc_request(
    conf: Mapping[str, Any],
    *,
    name: str,
    cni_version: str,
    valid_attachments: Iterable[tuple[str, str]],
) -> bytes:
    """The stdin of a GC call: the configuration with ``name``, ``cniVersion`` and the valid attachments.

    The attachments go under ``cni.dev/valid-attachments`` and, because some
    plugins read that key, under ``cni.dev/attachments`` too.
    """
    request = _named(conf, name, cni_version)
    if isinstance(valid_attachments, EncodedAttachments) and not any(
        k in request for k in _VALID_KEYS
    ):
        try:
            head, text = _dumps(request), valid_attachments.text()
            # The two keys last, as the dict below would put them.
            return f'{head[:-1]},"{_VALID_KEYS[0]}":{text},"{_VALID_KEYS[1]}":{text}}}'.encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: the whole request escaped, below
        except (TypeError, ValueError, RecursionError) as e:
            raise ConfigError("cannot encode plugin request as JSON", str(e)) from e
    attachments = _attachment_objects(valid_attachments)
    request[_VALID_KEYS[0]] = attachments
    request[_VALID_KEYS[1]] = attachments
    return _encode(request)


def status_request(conf: Mapping[str, Any], *, name: str, cni_version: str) -> bytes:
    """The stdin of a STATUS call: the configuration with ``name`` and ``cniVersion`` set."""
    return _encode(_named(conf, name, cni_version))


def _named(conf: Mapping[str, Any], name: str, cni_version: str) -> dict[str, Any]:
    """A copy of ``conf`` with the network's ``name`` and ``cniVersion``."""
    return {**conf, "name": name, "cniVersion": cni_version}


def _encode(request: Mapping[str, Any]) -> bytes:
    try:
        try:
            return _dumps(request).encode()
        except UnicodeEncodeError:
            import json

            # Lone surrogates (from "\ud800" escapes): keep them escaped, as conf does.
            return json.dumps(request, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise ConfigError("cannot encode plugin request as JSON", str(e)) from e


def check_capability_args(capability_args: Mapping[str, Any]) -> None:
    """Refuse capability arguments that have no JSON form (``ConfigError``), before anything runs.

    Object keys must be strings at every level, and numbers finite.
    """
    import json

    try:
        _check_keys(capability_args, "capabilityArgs")
        json.dumps(dict(capability_args), allow_nan=False)
    except RecursionError as e:
        raise ConfigError("invalid capability arguments: nested too deeply") from e
    except (TypeError, ValueError) as e:
        raise ConfigError("invalid capability arguments: not representable as JSON", str(e)) from e


def _check_keys(value: Any, where: str) -> None:
    """Raise ``TypeError`` naming the first mapping key, at any depth, that is not a string."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: key {key!r} is not a string")
            _check_keys(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_keys(item, f"{where}[{i}]")


#: The last snapshot: ``os.environ``'s encoded data and its decoded copy.
_last_environ: tuple[dict[bytes, bytes], dict[str, str]] = ({}, {})


def environ_snapshot() -> dict[str, str]:
    """A copy of ``os.environ``, taken safely while other threads add or remove keys.

    The encoded dict under ``os.environ`` is copied in one call (atomic under the
    GIL), then decoded, or the previous decoding reused when it is unchanged.
    """
    global _last_environ
    env = os.environ
    data = getattr(env, "_data", None)
    decodekey = getattr(env, "decodekey", None)
    decodevalue = getattr(env, "decodevalue", None)
    if type(data) is dict and decodekey is not None and decodevalue is not None:
        raw = data.copy()
        last_raw, last = _last_environ
        if raw != last_raw:
            last = {decodekey(k): decodevalue(v) for k, v in raw.items()}
            _last_environ = (raw, last)
        return last.copy()
    for _ in range(100):  # another Python: retry the copy until no writer interfered
        try:
            return dict(env)
        except (KeyError, RuntimeError):
            continue
    return dict(env)


def encode_cni_args(args: Sequence[tuple[str, str]]) -> str:
    """``CNI_ARGS``: the pairs as ``K=V`` joined by ``;``, in order.

    A pair that cannot be represented (an empty key, or ``;`` or ``=`` in a
    key or value; or anything but two strings) is refused with
    :class:`~libcni.errors.ConfigError` naming it, before any plugin runs.

    >>> encode_cni_args([("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web")])
    'IgnoreUnknown=1;K8S_POD_NAME=web'
    """
    parts = []
    for pair in args:
        two = isinstance(pair, (tuple, list)) and len(pair) == 2
        if not two or not all(isinstance(item, str) for item in pair):
            raise ConfigError("invalid CNI_ARGS pair: must be two strings", repr(pair)[:200])
        key, value = pair
        if not key:
            raise ConfigError("invalid CNI_ARGS pair: empty key", f"{key}={value}")
        if ";" in key or "=" in key or ";" in value or "=" in value or "\0" in key + value:
            raise ConfigError(
                f"invalid CNI_ARGS pair {key!r}: keys and values cannot contain ';', '=' or NUL",
                f"{key}={value}",
            )
        parts.append(f"{key}={value}")
    return ";".join(parts)


def plugin_env(
    base: Mapping[str, str],
    *,
    command: str,
    container_id: str = "",
    netns: str = "",
    ifname: str = "",
    cni_args: str = "",
    path: Sequence[str] = (),
) -> dict[str, str]:
    """The complete environment of a plugin call: ``base`` plus the six CNI variables.

    All six are always set (possibly empty), overriding inherited values.
    """
    cni = {"CNI_COMMAND": command, "CNI_CONTAINERID": container_id, "CNI_NETNS": netns}
    cni |= {"CNI_IFNAME": ifname, "CNI_ARGS": cni_args, "CNI_PATH": ":".join(path)}
    return {**base, **cni}


#: ``CNI_NETNS``, ``CNI_IFNAME`` and ``CNI_PATH`` of a VERSION probe (as Go sets them).
VERSION_DUMMY = "dummy"


def version_env(base: Mapping[str, str], path: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a VERSION probe.

    ``CNI_NETNS``, ``CNI_IFNAME`` and ``CNI_PATH`` are ``dummy``, as the Go
    library sets them (old plugins refuse to run without them). ``path`` is
    accepted for compatibility and not used.
    """
    del path
    dummy = VERSION_DUMMY
    return plugin_env(base, command=VERSION, netns=dummy, ifname=dummy, path=(dummy,))


def _details(value: object) -> str:
    """A ``ValidationError``'s details: the offending value itself, or its ``repr``."""
    return value if isinstance(value, str) else repr(value)[:300]


NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$"
"""What container IDs and network names must match."""
_ID_RE = re.compile(NAME_PATTERN[1:-1])


def validate_container_id(container_id: str) -> None:
    """Container IDs: non-empty (else code 3), ``^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$`` (else code 4)."""
    if not container_id:
        raise ValidationError("missing containerID", code=CODE_UNKNOWN_CONTAINER)
    if not isinstance(container_id, str) or _ID_RE.fullmatch(container_id) is None:
        raise ValidationError(
            "invalid characters in containerID", _details(container_id), code=CODE_INVALID_ENV
        )


def validate_network_name(name: str) -> None:
    """Network names: non-empty and ``^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$`` (code 7)."""
    if not name:
        raise ValidationError("missing network name", code=CODE_INVALID_CONFIG)
    if not isinstance(name, str) or _ID_RE.fullmatch(name) is None:
        raise ValidationError(
            "invalid characters found in network name", _details(name), code=CODE_INVALID_CONFIG
        )


def validate_interface_name(ifname: str) -> None:
    """Interface names (code 4): non-empty, at most 15 bytes, not ``.``/``..``, no ``/``, ``:`` or space."""
    if not ifname:
        raise ValidationError("interface name is empty", code=CODE_INVALID_ENV)
    if not isinstance(ifname, str):
        raise ValidationError(
            "interface name must be a string", _details(ifname), code=CODE_INVALID_ENV
        )
    if len(ifname.encode("utf-8", "surrogatepass")) > 15:
        raise ValidationError("interface name is too long", ifname, code=CODE_INVALID_ENV)
    if ifname in (".", ".."):
        raise ValidationError("interface name is . or ..", ifname, code=CODE_INVALID_ENV)
    for ch in ifname:
        if ch in "/:" or ch.isspace() or ch == "\0":
            why = f"interface name contains an invalid character {ch!r}"
            raise ValidationError(why, ifname, code=CODE_INVALID_ENV)


def validate_attachment(container_id: str, network: str, ifname: str) -> None:
    """The checks ADD makes before running a plugin: container ID, network and interface names."""
    validate_container_id(container_id)
    validate_network_name(network)
    validate_interface_name(ifname)
