"""What the cache holds for a container, read back: its attachments in order, the
configuration each cached at ADD (parsed once), and the merged view (``inspect``)."""

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

#: How many cached configurations a manager keeps parsed.
_PARSED_MAX = 256

#: One attachment the cache holds for a container: its entry and ``True`` (complete), or
#: its write-ahead record and ``False`` (in progress).
Held = tuple[CacheEntry, bool]


@functools.lru_cache(maxsize=256)
def _natural(ifname: str) -> tuple[Any, ...]:
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(ifname)))


def attachment_order(ifname: str, network: str) -> tuple[Any, ...]:
    """The order of what is read back from the cache: ``lo`` first, then natural ifname order."""
    return (ifname != LOOPBACK_IFNAME, _natural(ifname), network)


def held(state: State, container_id: str) -> list[Held]:
    """The container's attachments in order: entries (complete), records (in progress)."""
    entries, records = state.cache.attachments_of(container_id)
    out: list[Held] = [(e, True) for e in entries]
    out += [(r, False) for r in records]
    out.sort(key=lambda h: attachment_order(h[0].ifname, h[0].network_name))
    return out


def _parse_cached(state: State, config: bytes) -> NetworkConfigList:
    """The cached configuration as a list (a plugin's: a list of one), parsed once."""
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
    """The list and args ``att`` cached at ADD (else the current file's list)."""
    network = att.network_name
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
    """The attachment of an entry with its result (``None``: none, or unreadable: logged)."""
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
