"""``gc``: every configured or cached network, keeping the valid containers' attachments."""

from __future__ import annotations

from collections.abc import Iterable

from ._effects import Op, call_gc
from ._state import State
from ._values import LOOPBACK_NETWORK, LoadedNetworks

__all__ = ["gc"]


def gc(state: State, valid_containers: Iterable[str], timeout: float | None) -> Op:
    """One ``gc_networks`` of every configured or cached network."""
    if isinstance(valid_containers, str):
        valid_containers = [valid_containers]
    keep = frozenset(valid_containers)
    loaded: LoadedNetworks = yield from state.current()
    nets = list(loaded.networks.values())
    if state.plugin_loopback and LOOPBACK_NETWORK not in loaded.networks:
        # A setup killed while writing its first record left one of it: only its GC removes it.
        nets.append(state.loopback_net)
    yield call_gc(tuple(nets), keep, state.timeout_or(timeout))
    return None
