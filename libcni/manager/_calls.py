"""The seam's one implementation: the manager's calls over a ``CNIConfig`` or ``AsyncCNIConfig``.

:class:`CNICalls` implements :class:`~libcni.manager._effects.NetworkCalls`, the
protocol the rules call through (each :class:`~libcni.manager._effects.Call`).
``AsyncCNIConfig`` has the same methods as ``CNIConfig``, returning
coroutines: the async driver awaits what a call returns, the blocking one
takes it as it is. With observers, each network's operation (ADD, DEL,
CHECK, STATUS, GC of one network) runs between the events of a network
(``Watch.network`` / ``Watch.anetwork``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import request as rq
from ..conf import NetworkConfigList
from ..values import RuntimeConf

if TYPE_CHECKING:
    from .._events import Watch
    from ..aio import AsyncCNIConfig
    from ..api import CNIConfig

__all__ = ["CNICalls"]

#: ``Watch.network`` or ``Watch.anetwork``: a call between the events of a network.
_Observed = Callable[[Callable[..., Any], object, str, Sequence[Any], Mapping[str, Any]], Any]


class CNICalls:
    """:class:`~libcni.manager._effects.NetworkCalls` over ``cni`` (a ``CNIConfig`` or an
    ``AsyncCNIConfig``, ``asynchronous``, whose calls the async driver awaits); ``watch``:
    its observers."""

    __slots__ = ("_cni", "_observed")

    def __init__(
        self, cni: CNIConfig | AsyncCNIConfig, watch: Watch | None, *, asynchronous: bool
    ) -> None:
        self._cni = cni
        self._observed: _Observed | None = None
        if watch is not None:
            self._observed = watch.anetwork if asynchronous else watch.network

    def add(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.add_network_list(net, rt, timeout=timeout)
        call = self._cni.add_network_list
        return self._observed(call, self._cni, rq.ADD, (net, rt), {"timeout": timeout})

    def delete(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.del_network_list(net, rt, timeout=timeout)
        call = self._cni.del_network_list
        return self._observed(call, self._cni, rq.DEL, (net, rt), {"timeout": timeout})

    def check(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.check_network_list(net, rt, timeout=timeout)
        call = self._cni.check_network_list
        return self._observed(call, self._cni, rq.CHECK, (net, rt), {"timeout": timeout})

    def status(self, net: NetworkConfigList, timeout: float | None) -> Any:
        if self._observed is None:
            return self._cni.get_status_network_list(net, timeout=timeout)
        call = self._cni.get_status_network_list
        return self._observed(call, self._cni, rq.STATUS, (net,), {"timeout": timeout})

    def gc(
        self, nets: Sequence[NetworkConfigList], keep: frozenset[str], timeout: float | None
    ) -> Any:
        # Each network's GC is a network event of its own (``gc_networks`` emits them).
        return self._cni.gc_networks(
            nets, valid_containers=keep, cached_networks=True, timeout=timeout
        )
