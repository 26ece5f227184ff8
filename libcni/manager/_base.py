"""The constructor and the properties shared by the sync and async managers."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeVar

from ..api import CNIConfig
from ..conf import NetworkConfigList
from ..invoke import DEFAULT_PLUGIN_DIRS, Exec
from ._calls import CNICalls
from ._effects import NetworkCalls
from ._state import Settings, State

if TYPE_CHECKING:
    from .._events import Observer, Watch
    from ..aio import AsyncCNIConfig

__all__ = ["DEFAULT_CONF_DIR"]

#: Where the network configuration files are, by default.
DEFAULT_CONF_DIR = "/etc/cni/net.d"


_M = TypeVar("_M", bound="_ManagerBase")


class _ManagerBase:
    """The constructor and the properties shared by the sync and async managers."""

    #: Whether the operations' calls return awaitables (``AsyncNetworkManager``).
    _ASYNC = False
    _CNI: type[CNIConfig] | type[AsyncCNIConfig] = CNIConfig

    def __init__(  # noqa: PLR0913  (the public constructor: one keyword per setting)
        self,
        conf_dir: str | os.PathLike[str] | None = DEFAULT_CONF_DIR,
        plugin_dirs: Sequence[str | os.PathLike[str]] = DEFAULT_PLUGIN_DIRS,
        *,
        networks: Sequence[NetworkConfigList] = (),
        cache_dir: str | os.PathLike[str] | None = None,
        default_networks: Sequence[str] | None = None,
        max_networks: int = 1,
        loopback: bool | Literal["internal"] = True,
        interface_prefix: str = "eth",
        timeout: float | None = None,
        retry_attempts: int = 0,
        exec: Exec | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        cni = self._CNI(
            plugin_dirs, cache_dir=cache_dir, exec=exec, timeout=timeout, observers=observers
        )
        self._cni: CNIConfig | AsyncCNIConfig = cni
        # The CNIConfig's observers (checked there) are the manager's (libcni._events).
        self._watch: Watch | None = None
        if observers:
            from .._events import Watch

            self._watch = Watch.of(observers)
        settings = Settings(
            conf_dir=conf_dir,
            plugin_dirs=plugin_dirs,
            code_networks=networks,
            default_networks=default_networks,
            max_networks=max_networks,
            loopback=loopback,
            interface_prefix=interface_prefix,
            timeout=timeout,
            retry_attempts=retry_attempts,
        )
        self._state = State(settings, cni.cache, cni.exec.find_in_path)
        # The seam: what each Call of the rules calls.
        self._calls: NetworkCalls = CNICalls(cni, self._watch, asynchronous=self._ASYNC)

    def _under(self: _M, parent: int) -> _M:
        """A shallow copy whose calls' network events are filed under the event ``parent``."""
        assert self._watch is not None
        view = copy.copy(self)
        view._calls = CNICalls(self._cni, self._watch.under(parent), asynchronous=self._ASYNC)
        return view

    def __repr__(self) -> str:
        settings = self._state.settings
        return (
            f"{type(self).__name__}(conf_dir={settings.conf_dir!r}, "
            f"plugin_dirs={list(settings.plugin_dirs)!r}, cache_dir={self.cache_dir!r})"
        )

    @property
    def conf_dir(self) -> str | None:
        """The configuration directory (``None``: only the networks given in code)."""
        return self._state.settings.conf_dir

    @property
    def plugin_dirs(self) -> tuple[str, ...]:
        """The plugin directories, searched in order."""
        return self._state.settings.plugin_dirs

    @property
    def cache_dir(self) -> str:
        """The cache directory (the default one when none was given)."""
        return self._state.cache.dir

    @property
    def default_networks(self) -> tuple[str, ...] | None:
        """The names a setup without networks attaches (``None``: the first usable ones)."""
        return self._state.settings.default_networks

    @property
    def max_networks(self) -> int:
        """How many usable networks a setup without networks attaches (``0``: all)."""
        return self._state.settings.max_networks

    @property
    def loopback(self) -> bool | Literal["internal"]:
        """How ``lo`` is set up: ``True`` the loopback plugin (cached as
        ``cni-loopback``), ``"internal"`` by the manager itself, ``False`` not at all."""
        return self._state.settings.loopback

    @property
    def interface_prefix(self) -> str:
        """The prefix of the interface names given to unnamed networks."""
        return self._state.settings.interface_prefix

    @property
    def timeout(self) -> float | None:
        """The default time limit of each operation, in seconds (``None``: none)."""
        return self._state.settings.timeout

    @property
    def retry_attempts(self) -> int:
        """How many more times a setup ADDs a network that failed with code 11."""
        return self._state.settings.retry_attempts

    @property
    def observers(self) -> tuple[Observer, ...]:
        """The observers told of every operation, network and plugin run (``()``: none)."""
        return () if self._watch is None else self._watch.observers

    @property
    def exec(self) -> Exec:
        """How plugins are run (the ``exec`` given, or the default ``RawExec``)."""
        return self._cni.exec
