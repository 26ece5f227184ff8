"""The seam's one implementation: the manager's calls over a ``CNIConfig`` or ``AsyncCNIConfig``
(whose coroutines the async driver awaits), each a network event for observers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import request as rq
from ..conf import NetworkConfigList
from ..values import RuntimeConf

if TYPE_CHECKING:
    from .._events import Watch
    from ..aio import AsyncCNIConfig
    from ..api import CNIConfig

__all__ = ["CNICalls"]

#: ``Watch.network`` or ``Watch.anetwork`` of the ``CNIConfig``.
_Observed = Callable[
    [str, NetworkConfigList, "RuntimeConf | None", "float | None", Callable[[Any, Any], Any]], Any
]


class CNICalls:
    """:class:`~libcni.manager._effects.NetworkCalls` over ``cni`` (a ``CNIConfig`` or an
    ``AsyncCNIConfig``, ``asynchronous``, whose calls the async driver awaits); ``watch``:
    its observers, under the operation the calls are made for."""

    __slots__ = ("_cni", "_observed", "_watch")

    def __init__(
        self, cni: CNIConfig | AsyncCNIConfig, watch: Watch | None, *, asynchronous: bool
    ) -> None:
        self._cni = cni
        self._watch = watch
        self._observed: _Observed | None = None
        if watch is not None:
            self._observed = functools.partial(
                watch.anetwork if asynchronous else watch.network, cni
            )

    def add(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.add_network_list(net, rt, timeout=timeout)
        return self._observed(
            rq.ADD, net, rt, timeout, lambda c, t: c.add_network_list(net, rt, timeout=t)
        )

    def delete(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.del_network_list(net, rt, timeout=timeout)
        return self._observed(
            rq.DEL, net, rt, timeout, lambda c, t: c.del_network_list(net, rt, timeout=t)
        )

    def check(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.check_network_list(net, rt, timeout=timeout)
        return self._observed(
            rq.CHECK, net, rt, timeout, lambda c, t: c.check_network_list(net, rt, timeout=t)
        )

    def status(self, net: NetworkConfigList, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.get_status_network_list(net, timeout=timeout)
        return self._observed(
            rq.STATUS, net, None, timeout, lambda c, t: c.get_status_network_list(net, timeout=t)
        )

    def gc(
        self, nets: Sequence[NetworkConfigList], keep: frozenset[str], timeout: float | None
    ) -> Any:
        # gc_networks emits each network's event, under this watch's operation.
        cni = self._cni if self._watch is None else self._watch.view(self._cni)
        return cni.gc_networks(nets, valid_containers=keep, cached_networks=True, timeout=timeout)
