"""``AsyncCNIConfig``: every operation of ``CNIConfig`` as a coroutine, never blocking the
event loop (plugins by ``aexec_plugin``, the cache's disk work in worker threads). Cancelling
the task kills the running plugin's process group and re-raises :class:`asyncio.CancelledError`.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any, TypeVar

from . import _ops_info as info
from . import request as rq
from ._deadline import Deadline, apoll
from ._drive import adrive, finish
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

__all__ = ["AsyncCNIConfig"]


async def _in_thread(call: functools.partial[Any]) -> Any:
    """``call()`` in a worker thread; a cancellation waits for it to finish, then propagates."""
    loop = asyncio.get_running_loop()
    done = loop.run_in_executor(None, call)
    cancelled = await finish(done)
    if cancelled is not None:
        if not done.cancelled():
            done.exception()  # retrieved: asyncio would log it as never retrieved
        raise cancelled
    return done.result()


class AsyncCNIConfig(Operations):
    """The asyncio form of :class:`libcni.CNIConfig`: same constructor, same rules.

    Safe to share between tasks and threads; operations on different
    attachments run concurrently, operations on the same attachment one after
    the other (also across processes).
    """

    async def _drive(
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
            return await adrive(op, self._perform)
        with watch.operation(operation, net, rt, plugin, network=network) as parent:
            return await adrive(op, watch.aobserved(self._perform, parent))

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, RunPlugin):
            with logged(effect):
                # An AsyncExec (isinstance on the Protocol: 6 µs); RawExec's takes pass_fd.
                run: Any = getattr(self.exec, "aexec_plugin", None)
                if run is not None:
                    return await run(
                        *effect.args, **exec_options(effect, self.exec, "aexec_plugin")
                    )
                return await _in_thread(functools.partial(self.exec.exec_plugin, *effect.args))
        if isinstance(effect, CacheIO):
            return await _in_thread(functools.partial(effect.call, *effect.args))
        if isinstance(effect, GCNetwork):
            return await self._drive(effect.op, rq.GC, effect.net, network=True)
        await asyncio.sleep(0)  # the loop turns between the steps of many operations
        # The lock without blocking the loop: the blocking wait's tries, pauses and error.
        release = await apoll(lambda: effect.take(wait=False), Deadline(effect.timeout))
        if release is None:
            raise effect.timed_out()
        return release

    async def add_network_list(
        self, net: NetworkConfigList, rt: RuntimeConf, *, timeout: float | None = None
    ) -> Result:
        """ADD the container to every network of the list; return the final result (cached)."""
        return await self._drive(
            self._add(as_list(net, "add_network_list"), rt, timeout), rq.ADD, net, rt
        )

    async def check_network_list(
        self, net: NetworkConfigList, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """CHECK every plugin of the list against the cached result (version 0.4.0 and later)."""
        await self._drive(
            self._check(as_list(net, "check_network_list"), rt, timeout), rq.CHECK, net, rt
        )

    async def del_network_list(
        self, net: NetworkConfigList, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """DEL every plugin of the list in reverse order, then remove the cache entry."""
        await self._drive(
            self._delete(as_list(net, "del_network_list"), rt, timeout), rq.DEL, net, rt
        )

    async def add_network(
        self, net: PluginConfig, rt: RuntimeConf, *, timeout: float | None = None
    ) -> Result:
        """ADD with a single plugin configuration."""
        return await self._drive(
            self._add(as_plugin(net, "add_network"), rt, timeout), rq.ADD, net, rt
        )

    async def check_network(
        self, net: PluginConfig, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """CHECK with a single plugin configuration."""
        await self._drive(
            self._check(as_plugin(net, "check_network"), rt, timeout), rq.CHECK, net, rt
        )

    async def del_network(
        self, net: PluginConfig, rt: RuntimeConf, *, timeout: float | None = None
    ) -> None:
        """DEL with a single plugin configuration."""
        await self._drive(self._delete(as_plugin(net, "del_network"), rt, timeout), rq.DEL, net, rt)

    async def get_network_list_cached_result(
        self, net: NetworkConfigList, rt: RuntimeConf
    ) -> Result | None:
        """The cached result of the attachment, converted to the list's version, or ``None``."""
        return info.cached_result(self, as_list(net, "get_network_list_cached_result"), rt)

    async def get_network_cached_result(self, net: PluginConfig, rt: RuntimeConf) -> Result | None:
        """The cached result of a single-plugin attachment, or ``None``."""
        return info.cached_result(self, as_plugin(net, "get_network_cached_result"), rt)

    async def get_network_list_cached_config(
        self, net: NetworkConfigList, rt: RuntimeConf
    ) -> tuple[bytes, RuntimeConf] | None:
        """The configuration bytes used at ADD, and ``rt`` with the cached args, or ``None``."""
        return info.cached_config(self, as_list(net, "get_network_list_cached_config"), rt)

    async def get_network_cached_config(
        self, net: PluginConfig, rt: RuntimeConf
    ) -> tuple[bytes, RuntimeConf] | None:
        """As :meth:`get_network_list_cached_config`, for a single plugin."""
        return info.cached_config(self, as_plugin(net, "get_network_cached_config"), rt)

    async def get_cached_attachments(self, container_id: str = "") -> list[NetworkAttachment]:
        """Every cached attachment (of one container, or all when the ID is empty)."""
        return info.cached_attachments(self, container_id)

    async def validate_network_list(
        self, net: NetworkConfigList, *, timeout: float | None = None
    ) -> list[str]:
        """Check that every plugin exists and supports the list's version; return its capabilities."""
        return await self._drive(
            info.validate(self, as_list(net, "validate_network_list"), timeout), VALIDATE, net
        )

    async def validate_network(
        self, net: PluginConfig, *, timeout: float | None = None
    ) -> list[str]:
        """As :meth:`validate_network_list`, for a single plugin."""
        return await self._drive(
            info.validate(self, as_plugin(net, "validate_network"), timeout), VALIDATE, net
        )

    async def get_version_info(
        self, plugin_type: str, *, timeout: float | None = None
    ) -> PluginInfo:
        """Ask the plugin which versions it supports (``CNI_COMMAND=VERSION``)."""
        return await self._drive(
            info.version_info(self, plugin_type, timeout), rq.VERSION, plugin=plugin_type
        )

    async def gc_network_list(
        self, net: NetworkConfigList, args: GCArgs | None = None, *, timeout: float | None = None
    ) -> None:
        """DEL every stale cached attachment of the network, then send GC (1.1.0) to every plugin."""
        await self.gc_networks([as_list(net, "gc_network_list")], args, timeout=timeout)

    async def gc_networks(
        self,
        nets: Sequence[NetworkConfigList],
        args: GCArgs | None = None,
        *,
        valid_containers: Iterable[str] | None = None,
        cached_networks: bool = False,
        timeout: float | None = None,
    ) -> None:
        """As :meth:`libcni.CNIConfig.gc_networks` (the cache's work in worker threads)."""
        op = gc(self, nets, args, timeout, keep=valid_containers, cached=cached_networks)
        await adrive(op, self._perform)

    async def get_status_network_list(
        self, net: NetworkConfigList, *, timeout: float | None = None
    ) -> None:
        """Ask every plugin whether it is ready (1.1.0); raises the first plugin error."""
        await self._drive(
            info.status(self, as_list(net, "get_status_network_list"), timeout), rq.STATUS, net
        )
