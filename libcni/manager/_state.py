"""The small typed state every rule of the manager reads, and the values they share."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from .. import request as rq
from ..cache import ResultCache
from ..conf import NetworkConfigList, conf_list_from_bytes
from ..errors import ConfigError
from ..values import Args, CapabilityArgs, RuntimeConf
from ._config import ConfigWatcher
from ._effects import Blocking, Op
from ._values import LOOPBACK_IFNAME, LoadedNetworks, NetworkRequest

LOOPBACK_CONFIG = (
    b'{"cniVersion": "1.0.0", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}'
)

#: ``loopback=INTERNAL_LOOPBACK``: ``lo`` brought up by the manager itself, no plugin.
INTERNAL_LOOPBACK: Literal["internal"] = "internal"

Loopback = bool | Literal["internal"]

#: How a plugin type is found: ``Exec.find_in_path(type, plugin_dirs)``.
Find = Callable[[str, Sequence[str]], str]

#: The default of ``capability_args``: none.
NO_CAPS: Mapping[str, Any] = {}


def loopback_mode(value: object) -> Loopback:
    """``value`` as a ``loopback`` setting (``True``, ``False`` or ``"internal"``), else refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value == INTERNAL_LOOPBACK:
            return INTERNAL_LOOPBACK
        raise ValueError(f"loopback must be True, False or 'internal', not {value!r}")
    raise TypeError(f"loopback must be True, False or 'internal', not {type(value).__name__}")


def _code_networks(networks: Sequence[NetworkConfigList]) -> tuple[NetworkConfigList, ...]:
    """The networks given in code, checked: lists with valid, distinct names and plugins."""
    if isinstance(networks, NetworkConfigList):
        networks = [networks]
    out: list[NetworkConfigList] = []
    seen: set[str] = set()
    for i, net in enumerate(networks):
        if not isinstance(net, NetworkConfigList):
            hint = " (wrap it with conf_list_from_conf)" if hasattr(net, "type") else ""
            raise TypeError(
                f"networks[{i}] must be a NetworkConfigList (conf_list_from_bytes...), "
                f"not {type(net).__name__}{hint}"
            )
        rq.validate_network_name(net.name)
        if not net.plugins:
            raise ConfigError(f"networks[{i}] (network {net.name!r}) has no plugins")
        if net.name in seen:
            raise ConfigError(f"network {net.name!r} is given twice in networks")
        seen.add(net.name)
        out.append(net)
    return tuple(out)


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int, 0 or more, not {value!r}")
    return value


def _max_networks(value: int) -> int:
    return _count("max_networks", value)


def _retry_attempts(value: int) -> int:
    return _count("retry_attempts", value)


def _conf_dir(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _plugin_dirs(value: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    return tuple(os.fspath(p) for p in value)


def _default_networks(value: Sequence[str] | None) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    return None if value is None else tuple(value)


@attrs.frozen(kw_only=True)
class Settings:
    """The manager's constructor values, checked in this order."""

    conf_dir: str | None = attrs.field(converter=_conf_dir)
    plugin_dirs: tuple[str, ...] = attrs.field(converter=_plugin_dirs)
    code_networks: tuple[NetworkConfigList, ...] = attrs.field(converter=_code_networks)
    default_networks: tuple[str, ...] | None = attrs.field(converter=_default_networks)
    max_networks: int = attrs.field(converter=_max_networks)
    loopback: Loopback = attrs.field(converter=loopback_mode)
    interface_prefix: str
    timeout: float | None
    retry_attempts: int = attrs.field(converter=_retry_attempts)


class State:
    """What the rules read, and the memos of the manager's life (each written by one module)."""

    __slots__ = (
        "cache",
        "find",
        "loopback_net",
        "parsed",
        "ready",
        "settings",
        "warned",
        "watcher",
    )

    def __init__(self, settings: Settings, cache: ResultCache, find: Find) -> None:
        self.settings = settings
        self.cache = cache  # the CNIConfig's own: the default directory is decided there
        self.find = find
        self.watcher = ConfigWatcher(
            settings.conf_dir,
            settings.plugin_dirs,
            find,
            settings.default_networks,
            settings.max_networks,
            settings.code_networks,
        )
        self.loopback_net = conf_list_from_bytes(LOOPBACK_CONFIG)
        self.parsed: dict[bytes, NetworkConfigList] = {}  # _held.parse_cached
        self.ready: LoadedNetworks | None = None  # _ready.problem: the last one found ready
        self.warned: set[tuple[str, str]] = set()  # _setup: (network, capability) warned of

    @property
    def plugin_loopback(self) -> bool:
        """Whether setups attach the loopback plugin's network first (``loopback=True``)."""
        return self.settings.loopback is True

    def where(self) -> str:
        """Where the configured networks come from, for messages."""
        conf_dir = self.settings.conf_dir
        if conf_dir is None:
            return "among the networks given to the manager (conf_dir=None)"
        if self.settings.code_networks:
            return f"among the networks given to the manager or in {conf_dir}"
        return f"in {conf_dir}"

    def timeout_or(self, timeout: float | None) -> float | None:
        """``timeout``, else the manager's default."""
        return self.settings.timeout if timeout is None else timeout

    def current(self) -> Op:
        """The configuration as it is now (a cheap check, a reload if anything changed)."""
        loaded: LoadedNetworks = yield Blocking(self.watcher.current)
        return loaded


@attrs.frozen(kw_only=True)
class ContainerRequest:
    """What setup, teardown and attach are asked (by keyword: no two ``str`` to swap)."""

    container_id: str
    netns: str = ""
    networks: Sequence[str | NetworkRequest] | None = None
    args: Args = ()
    capability_args: CapabilityArgs = NO_CAPS


@attrs.frozen
class Item:
    """One network of a setup, ready to run."""

    network: str
    ifname: str
    net: NetworkConfigList
    rt: RuntimeConf


def quoted(names: Iterable[str]) -> str:
    """Network names for a message: ``'a', 'b'``."""
    return ", ".join(map(repr, names))


def why(loaded: LoadedNetworks, name: str) -> str | None:
    """Why the network ``name``, skipped, cannot be used (``None``: no file names it)."""
    return loaded.not_ready.get(name) or loaded.invalid.get(name)


def requests(
    networks: Sequence[str | NetworkRequest] | str | NetworkRequest,
) -> list[NetworkRequest]:
    """``networks`` as requests (a name ``s`` is ``NetworkRequest(s)``); ``ConfigError`` for others."""
    if isinstance(networks, (str, NetworkRequest)):
        networks = [networks]
    out = [NetworkRequest(n) if isinstance(n, str) else n for n in networks]
    for n in out:
        if not isinstance(n, NetworkRequest):
            raise ConfigError(
                f"a network must be a name or a NetworkRequest, not {type(n).__name__}"
            )
    return out


def ifnames(
    settings: Settings, container_id: str, requested: Sequence[NetworkRequest]
) -> list[str]:
    """The interface name of each request: the names given (and ``lo``) reserved first, then
    the first free ``<interface_prefix><n>`` in order; bad or repeated names refused."""
    taken: set[str] = {LOOPBACK_IFNAME} if settings.loopback else set()
    for r in requested:
        if r.ifname is None:
            continue
        rq.validate_interface_name(r.ifname)
        if r.ifname in taken:
            raise ConfigError(
                f"interface name {r.ifname!r} requested twice for container {container_id!r}"
            )
        taken.add(r.ifname)
    names: list[str] = []
    k = 0
    prefix = settings.interface_prefix
    for r in requested:
        ifname = r.ifname
        if ifname is None:
            while f"{prefix}{k}" in taken:
                k += 1
            ifname = f"{prefix}{k}"
            rq.validate_interface_name(ifname)
            taken.add(ifname)
        names.append(ifname)
    return names
