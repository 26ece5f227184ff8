"""``CNIConfig``: the operations of a CNI runtime, blocking API (the rules: ``libcni._ops``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from . import _ops_info as info
from . import request as rq
from ._drive import drive
from ._effects import CacheIO, Effect, GCNetwork, RunPlugin
from ._ops import VALIDATE, Op, Operations, as_list, as_plugin, exec_options, logged
from ._ops_gc import gc
from .conf import NetworkConfigList, PluginConfig
from .types import Result
from .values import GCArgs, NetworkAttachment, RuntimeConf
from .version import PluginInfo

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

_R = TypeVar("_R")

__all__ = ["CNIConfig"]


class CNIConfig(Operations):
    """Runs CNI plugins for a container runtime.

    ``path`` lists the plugin directories, searched in order; ``cache_dir``
    is where results are kept (default :func:`libcni.cache.default_cache_dir`:
    ``/var/lib/cni`` as root, the per-user state directory otherwise); ``exec`` is how
    plugins are run (default :class:`libcni.invoke.RawExec`); ``timeout`` is
    the default time limit of one operation, in seconds; ``observers`` are
    told of every operation and plugin run (:class:`~libcni.Event`).

    Safe to share between threads: operations on different attachments run
    in parallel, operations on the same attachment one after the other.
    """

    def _drive(
        self,
        op: Op[_R],
        operation: str = "",
        net: NetworkConfigList | PluginConfig | None = None,
        rt: RuntimeConf | None = None,
        plugin: str = "",
        *,
        network: bool = False,
    ) -> _R:
        """Run ``op``; with observers, between the events of ``operation`` on ``net``, ``rt``."""
        watch = self._watch
        if watch is None:
            return drive(op, self._perform)
        with watch.operation(operation, net, rt, plugin, network=network) as parent:
            return drive(op, watch.observed(self._perform, parent))

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, RunPlugin):
            with logged(effect):
                return self.exec.exec_plugin(
                    effect.path,
                    effect.stdin,
                    effect.env,
                    effect.timeout,
                    **exec_options(effect, self.exec),
                )
        if isinstance(effect, CacheIO):
            return effect.call(*effect.args)
        if isinstance(effect, GCNetwork):
            return self._drive(effect.op, rq.GC, effect.net, network=True)
        return effect.take()

    def add_network_list(
        self, net: NetworkConfigList, rt: RuntimeConf, *, timeout: float | None = None
    ) -> Result:
        """ADD the container to every network of the list; return the final result (cached)."""
        return self._drive(
            self._add(as_list(net, "add_network_list"), rt, timeout), rq.ADD, net, rt
        )

    def check_network_list(
        self, net: NetworkConfigList, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """CHECK every plugin of the list against the cached result (version 0.4.0 and later)."""
        self._drive(self._check(as_list(net, "check_network_list"), rt, timeout), rq.CHECK, net, rt)

    def del_network_list(
        self, net: NetworkConfigList, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """DEL every plugin of the list in reverse order, then remove the cache entry."""
        self._drive(self._delete(as_list(net, "del_network_list"), rt, timeout), rq.DEL, net, rt)

    def add_network(
        self, net: PluginConfig, rt: RuntimeConf, *, timeout: float | None = None
    ) -> Result:
        """ADD with a single plugin configuration."""
        return self._drive(self._add(as_plugin(net, "add_network"), rt, timeout), rq.ADD, net, rt)

    def check_network(
        self, net: PluginConfig, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """CHECK with a single plugin configuration."""
        self._drive(self._check(as_plugin(net, "check_network"), rt, timeout), rq.CHECK, net, rt)

    def del_network(
        self, net: PluginConfig, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """DEL with a single plugin configuration."""
        self._drive(self._delete(as_plugin(net, "del_network"), rt, timeout), rq.DEL, net, rt)

    def get_network_list_cached_result(
        self, net: NetworkConfigList, rt: RuntimeConf
    ) -> Result | None:
        """The cached result of the attachment, converted to the list's version, or ``None``."""
        return info.cached_result(self, as_list(net, "get_network_list_cached_result"), rt)

    def get_network_cached_result(self, net: PluginConfig, rt: RuntimeConf) -> Result | None:
        """The cached result of a single-plugin attachment, or ``None``."""
        return info.cached_result(self, as_plugin(net, "get_network_cached_result"), rt)

    def get_network_list_cached_config(
        self, net: NetworkConfigList, rt: RuntimeConf
    ) -> tuple[bytes, RuntimeConf] | None:
        """The configuration bytes used at ADD, and ``rt`` with the cached args, or ``None``.

        For an attachment in progress they come from its write-ahead record; a
        record torn by a kill before any plugin ran counts as nothing cached.
        """
        return info.cached_config(self, as_list(net, "get_network_list_cached_config"), rt)

    def get_network_cached_config(
        self, net: PluginConfig, rt: RuntimeConf
    ) -> tuple[bytes, RuntimeConf] | None:
        """As :meth:`get_network_list_cached_config`, for a single plugin."""
        return info.cached_config(self, as_plugin(net, "get_network_cached_config"), rt)

    def get_cached_attachments(self, container_id: str = "") -> list[NetworkAttachment]:
        """Every cached attachment (of one container, or all when the ID is empty)."""
        return info.cached_attachments(self, container_id)

    def validate_network_list(
        self, net: NetworkConfigList, *, timeout: float | None = None
    ) -> list[str]:
        """Check that every plugin exists and supports the list's version; return its capabilities."""
        return self._drive(
            info.validate(self, as_list(net, "validate_network_list"), timeout), VALIDATE, net
        )

    def validate_network(self, net: PluginConfig, *, timeout: float | None = None) -> list[str]:
        """As :meth:`validate_network_list`, for a single plugin."""
        return self._drive(
            info.validate(self, as_plugin(net, "validate_network"), timeout), VALIDATE, net
        )

    def get_version_info(self, plugin_type: str, *, timeout: float | None = None) -> PluginInfo:
        """Ask the plugin which versions it supports (``CNI_COMMAND=VERSION``)."""
        return self._drive(
            info.version_info(self, plugin_type, timeout), rq.VERSION, plugin=plugin_type
        )

    def gc_network_list(
        self, net: NetworkConfigList, args: GCArgs | None = None, *, timeout: float | None = None
    ) -> None:
        """DEL every stale cached attachment of the network, then send GC (1.1.0) to every plugin."""
        self.gc_networks([as_list(net, "gc_network_list")], args, timeout=timeout)

    def gc_networks(
        self,
        nets: Sequence[NetworkConfigList],
        args: GCArgs | None = None,
        *,
        valid_containers: Iterable[str] | None = None,
        cached_networks: bool = False,
        timeout: float | None = None,
    ) -> None:
        """:meth:`gc_network_list` of each network, from one listing of the cache.

        ``valid_containers``: every attachment of these containers is valid
        too (those cached when GC holds the network's lock, passed to its
        plugins' GC). ``cached_networks``: also the networks known only from
        the cache, each with a configuration cached for it. ``timeout``: each
        network's. Every failure is raised at the end, together (``GCError``).
        """
        op = gc(self, nets, args, timeout, keep=valid_containers, cached=cached_networks)
        drive(op, self._perform)

    def get_status_network_list(
        self, net: NetworkConfigList, *, timeout: float | None = None
    ) -> None:
        """Ask every plugin whether it is ready (1.1.0); raises the first plugin error."""
        self._drive(
            info.status(self, as_list(net, "get_status_network_list"), timeout), rq.STATUS, net
        )
