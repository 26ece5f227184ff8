"""What the cache holds for a container, read back: its attachments in order, the
configuration each cached at ADD (parsed once), and the merged view (``inspect``).

Read by every operation family: teardown, check and inspect, the dead
attempts of setup and attach, detach and forget.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .. import _log as logging
from .. import request as rq
from ..cache import CacheEntry
from ..conf import NetworkConfigList, conf_from_bytes, conf_list_from_bytes, conf_list_from_conf
from ..errors import CNIError, ConfigError
from ..types import result_from_dict
from ..values import RuntimeConf
from ._state import State
from ._values import (
    LOOPBACK_IFNAME,
    LOOPBACK_NETWORK,
    AttachmentResult,
    ContainerNetworks,
    LoadedNetworks,
)

__all__ = ["Held", "attachment_order", "cached_net", "held", "view"]

log = logging.getLogger("libcni")

_DIGITS = re.compile(r"(\d+)")

#: How many cached configurations a manager keeps parsed (see :func:`_parse_cached`).
_PARSED_MAX = 256

#: One attachment the cache holds for a container: its entry and ``True`` (complete), or
#: its write-ahead record and ``False`` (in progress).
Held = tuple[CacheEntry, bool]


@functools.lru_cache(maxsize=256)
def _natural(ifname: str) -> tuple[Any, ...]:
    """The natural sort key of an interface name (remembered: containers share a few)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(ifname)))


def attachment_order(ifname: str, network: str) -> tuple[Any, ...]:
    """The order of what is read back from the cache: ``lo`` first, then natural ifname order."""
    return (ifname != LOOPBACK_IFNAME, _natural(ifname), network)


def held(state: State, container_id: str) -> list[Held]:
    """Every attachment the cache holds for the container, in order: its complete entries
    and the records of attachments without one (in progress).

    Found through the container's records directory, its index
    (``ResultCache.attachments_of``): the cost does not grow with the other
    containers cached; a container set up by the Go library or an older
    libcni (no records) is found by a listing of the entries.
    """
    entries, records = state.cache.attachments_of(container_id)
    out: list[Held] = [(e, True) for e in entries]
    out += [(r, False) for r in records]
    out.sort(key=lambda h: attachment_order(h[0].ifname, h[0].network_name))
    return out


def _parse_cached(state: State, config: bytes) -> NetworkConfigList:
    """The cached configuration as a list, remembered: containers share a few configurations.

    A single plugin's configuration (cached by ``add_network``, or by Go's
    ``AddNetwork``) is the list of that one plugin (``conf_list_from_conf``).
    A configuration list is immutable, so one parse serves every teardown
    and check of the containers attached with it. Bounded: the memory is
    cleared when it holds too many (configurations that are gone).
    """
    net = state.parsed.get(config)
    if net is None:
        net = conf_list_from_bytes(config)
        if not net.plugins and isinstance(net.raw.get("type"), str):
            net = conf_list_from_conf(conf_from_bytes(config))
        if len(state.parsed) >= _PARSED_MAX:
            state.parsed.clear()
        state.parsed[config] = net
    return net


def cached_net(
    state: State, att: CacheEntry, netns: str, loaded: LoadedNetworks | None = None
) -> tuple[NetworkConfigList, RuntimeConf]:
    """The list, args and capability args cached at ADD (the current file as a fallback).

    ``att`` is a cache entry or record: the same one
    ``get_network_list_cached_config`` reads, without reading it again.
    """
    network = att.network_name
    # As get_network_list_cached_config: the cached args (none given here).
    rt = att.runtime_conf(netns=netns)
    try:
        net = _parse_cached(state, att.config)
        if net.plugins and net.name == network:
            return net, rt
        problem = "the cached configuration has no plugins"
    except ConfigError as e:
        problem = f"the cached configuration cannot be read: {e}"
    if loaded is None:  # needed only now: the configuration as it is now
        loaded = state.watcher.current()
    current = loaded.networks.get(network)
    if network == LOOPBACK_NETWORK and current is None:
        current = state.loopback_net
    if current is not None:
        log.warning(
            "network %r of container %r: %s; using the current configuration",
            network,
            att.container_id,
            problem,
        )
        return current, rt
    raise ConfigError(
        f"cannot use network {network!r} of container {att.container_id!r}: {problem} "
        f"and no configuration of that name is {state.where()}"
    )


def _result(e: CacheEntry) -> AttachmentResult | None:
    """The attachment of a complete entry with its result, ``None`` when it has none or
    it cannot be read (logged)."""
    if e.result is None:
        return None
    try:
        result = result_from_dict(e.result)
    except CNIError as err:
        log.warning(
            "cached result of %s-%s-%s cannot be read: %s",
            e.network_name,
            e.container_id,
            e.ifname,
            err,
        )
        return None
    return AttachmentResult(e.network_name, e.ifname, result)


def view(state: State, container_id: str) -> ContainerNetworks:
    """The merged view of the container, from the cache alone (``inspect``)."""
    rq.validate_container_id(container_id)
    atts = held(state, container_id)
    results = [_result(e) for e, complete in atts if complete]
    return ContainerNetworks.merge(
        container_id,
        [r for r in results if r is not None],
        netns=next((e.netns for e, _ in atts if e.netns), ""),
        incomplete=[(e.network_name, e.ifname) for e, complete in atts if not complete],
    )
