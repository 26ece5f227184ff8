"""Teardown, check, inspect and forget: what the cache holds for a container, DELeted,
CHECKed, shown or dropped (``detach`` DELs with :func:`delete_each` too)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _log as logging
from .. import request as rq
from ..cache import CacheEntry
from ..errors import CNIError, NotAttachedError, TeardownError
from ..values import NetworkAttachment, RuntimeConf, _pairs, capability_mapping
from ._effects import Blocking, LockContainer, Op, call_check, call_delete
from ._held import Held, attachment_order, cached_net, held, view
from ._state import ContainerRequest, Item, State, ifnames, requests
from ._values import (
    LOOPBACK_IFNAME,
    LOOPBACK_NETWORK,
    ContainerNetworks,
    LoadedNetworks,
    NetworkRequest,
)

__all__ = ["check", "delete_each", "forget", "inspect", "teardown"]

log = logging.getLogger("libcni")


def _network(att: CacheEntry | Item) -> str:
    return att.network if isinstance(att, Item) else att.network_name


def delete_each(
    state: State,
    container_id: str,
    todo: Sequence[CacheEntry | Item],
    netns: str,
    timeout: float | None,
    what: str,
    protected: bool = False,
) -> Op:
    """DEL each of ``todo``, last first, with what it cached (and its netns when ``netns`` is
    empty); failures raise together as :class:`TeardownError`. ``what``: for the log;
    ``protected`` (a rollback): each DEL finishes even if the caller is cancelled."""
    errors: list[CNIError] = []
    for att in reversed(todo):
        try:
            if isinstance(att, Item):
                net, rt = att.net, att.rt
            else:  # complete (its entry is not read again) or in progress
                net, rt = cached_net(state, att, netns or att.netns)
            yield call_delete(net, rt, timeout, protected=protected)
        except CNIError as e:
            log.warning(
                "%s of network %r (%s) for container %r failed: %s",
                what,
                _network(att),
                att.ifname,
                container_id,
                e,
            )
            errors.append(e)
    if errors:
        raise TeardownError(container_id, errors)
    return None


def teardown(state: State, req: ContainerRequest, timeout: float | None) -> Op:
    """DEL every attachment the cache holds, or those of ``req.networks``, last one first."""
    container_id = req.container_id
    timeout = state.timeout_or(timeout)
    pairs, caps = _pairs(req.args), capability_mapping(req.capability_args)  # refused before
    named = None if req.networks is None else requests(req.networks)
    names = None if named is None else ifnames(state.settings, container_id, named)
    release = yield LockContainer(state.cache, container_id, timeout, "teardown")
    try:
        atts: list[Held] = yield Blocking(held, (state, container_id))
        todo: list[CacheEntry | Item] = [att for att, _ in atts]
        if named is not None and names is not None:
            req = ContainerRequest(
                container_id=container_id, netns=req.netns, args=pairs, capability_args=caps
            )
            todo = yield from _named(state, req, atts, list(zip(named, names, strict=True)))
        yield from delete_each(state, container_id, todo, req.netns, timeout, "teardown")
    finally:
        release()
    return None


def _names(request: NetworkRequest, entry: CacheEntry) -> bool:
    return request.network == entry.network_name and request.ifname in (None, entry.ifname)


def _named(
    state: State,
    req: ContainerRequest,
    atts: Sequence[Held],
    named: Sequence[tuple[NetworkRequest, str]],
) -> Op:
    """What a teardown given networks DELs, in order (:func:`_uncached` for the unknown)."""
    todo: list[CacheEntry | Item] = [
        att for att, _ in atts if any(_names(r, att) for r, _ in named)
    ]
    unknown = [(r, ifname) for r, ifname in named if not any(_names(r, a) for a, _ in atts)]
    if unknown:
        loaded: LoadedNetworks = yield from state.current()
        for r, ifname in unknown:
            item = _uncached(state, loaded, req, r, ifname)
            if item is not None:
                todo.append(item)
        todo.sort(key=lambda att: attachment_order(att.ifname, _network(att)))
    return todo


def _uncached(
    state: State,
    loaded: LoadedNetworks,
    req: ContainerRequest,
    request: NetworkRequest,
    ifname: str,
) -> Item | None:
    """The DEL of a named network nothing is cached for, with its current configuration
    (ocicni's fallback); ``None`` (logged) when there is none."""
    container_id = req.container_id
    net = loaded.networks.get(request.network)
    if request.network == LOOPBACK_NETWORK:
        net = net or state.loopback_net
        ifname = request.ifname or LOOPBACK_IFNAME
    if net is None:
        log.warning(
            "teardown of network %r for container %r: nothing is cached for it and no "
            "configuration of that name is %s; nothing to DEL",
            request.network,
            container_id,
            state.where(),
        )
        return None
    log.warning(
        "nothing is cached for network %r (%s) of container %r; DELeting it with its "
        "current configuration",
        request.network,
        ifname,
        container_id,
    )
    caps = req.capability_args if request.capability_args is None else request.capability_args
    args = (*_pairs(req.args), *request.args)
    rt = RuntimeConf(container_id, req.netns, ifname, args, caps)
    return Item(request.network, ifname, net, rt)


def check(state: State, container_id: str, netns: str, timeout: float | None) -> Op:
    """CHECK every cached attachment in order (``NetworkManager.check``)."""
    timeout = state.timeout_or(timeout)
    release = yield LockContainer(state.cache, container_id, timeout, "check")
    try:
        atts: list[Held] = yield Blocking(held, (state, container_id))
        if not atts:  # a health check must not report an unknown container healthy
            raise NotAttachedError(f"cannot check container {container_id!r}: nothing cached")
        for entry in (e for e, complete in atts if complete):
            net, rt = cached_net(state, entry, netns or entry.netns)
            yield call_check(net, rt, timeout)
    finally:
        release()
    return None


def inspect(state: State, container_id: str) -> Op:
    merged: ContainerNetworks = yield Blocking(view, (state, container_id))
    return merged


def forget(state: State, container_id: str, networks: Sequence[str] | None) -> Op:
    """Drop the container's entries and records (those of ``networks``, or all), no DEL."""
    rq.validate_container_id(container_id)
    if isinstance(networks, str):
        networks = [networks]
    names = None if networks is None else frozenset(networks)
    for name in names or ():
        rq.validate_network_name(name)
    timeout = state.settings.timeout
    release = yield LockContainer(state.cache, container_id, timeout, "forget")
    try:
        dropped: tuple[NetworkAttachment, ...] = yield Blocking(
            _forget, (state, container_id, names)
        )
    finally:
        release()
    return dropped


def _forget_one(state: State, e: CacheEntry, complete: bool) -> NetworkAttachment:
    cache, container_id = state.cache, e.container_id
    lock = cache.lock(e.network_name, container_id, e.ifname, timeout=state.settings.timeout)
    try:
        cache.forget(e.network_name, container_id, e.ifname)
    finally:
        lock.release()
    log.warning(
        "forgot network %r (%s) of container %r without DEL%s: netns %r, args %r, "
        "capability args %r; what its plugins made stays until removed by hand",
        e.network_name,
        e.ifname,
        container_id,
        "" if complete else " (in progress)",
        e.netns,
        e.cni_args,
        e.capability_args,
    )
    return e.attachment()


def _forget(
    state: State, container_id: str, names: frozenset[str] | None
) -> tuple[NetworkAttachment, ...]:
    return tuple(
        _forget_one(state, e, complete)
        for e, complete in held(state, container_id)
        if names is None or e.network_name in names
    )
