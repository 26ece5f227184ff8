"""``attach`` and ``detach``: one network more or less for a running container, made of the
pieces of setup and teardown (the decisions: docs/attaching.rst)."""

from __future__ import annotations

import os

import attrs

from .. import _log as logging
from .. import request as rq
from .._deadline import Deadline
from ..errors import AlreadyAttachedError, CNIError, ConfigError, NotAttachedError, ValidationError
from ._effects import Blocking, LockContainer, Op
from ._held import Held, held, view
from ._setup import Run, attempt, del_dead_attempts, plan, refuse_not_netns, undo
from ._state import ContainerRequest, Settings, State, requests
from ._teardown import delete_each
from ._values import LOOPBACK_IFNAME, ContainerNetworks, NetworkRequest

__all__ = ["attach", "detach"]

log = logging.getLogger("libcni")


def _nothing_cached(container_id: str, what: str) -> NotAttachedError:
    return NotAttachedError(
        f"cannot {what} container {container_id!r}: nothing is cached for it "
        "(never set up here, or torn down); set it up first"
    )


def _same_netns(given: str, cached: str) -> bool:
    if given == cached:
        return True
    try:
        a, b = os.stat(given), os.stat(cached)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _netns_of(container_id: str, atts: list[Held], netns: str) -> str:
    """The netns of an attach: the cached one (``netns`` must be it), else ``netns``."""
    cached = next((e.netns for e, _ in atts if e.netns), "")
    if netns and cached and not _same_netns(netns, cached):
        raise ValidationError(
            f"cannot attach container {container_id!r} in netns {netns!r}: "
            f"its networks are in {cached!r}"
        )
    if not (netns or cached):
        raise ValidationError(
            f"no network namespace given for container {container_id!r} and none cached: "
            "attach needs the path of the container's network namespace"
        )
    return cached or netns  # the cached path: every entry of the container holds the same


def _ifname_of(
    settings: Settings, container_id: str, atts: list[Held], request: NetworkRequest
) -> str:
    """The interface of an attach: the request's, or the first free ``<prefix><n>``."""
    network = request.network
    for e, complete in atts:
        if complete and e.network_name == network:
            raise AlreadyAttachedError(network, container_id, e.ifname)
    # A dead attempt of this network is DELeted first: its interface name is free.
    taken = {e.ifname for e, _ in atts if e.network_name != network}
    if settings.loopback:
        taken.add(LOOPBACK_IFNAME)
    if request.ifname is not None:
        rq.validate_interface_name(request.ifname)
        if request.ifname in taken:
            raise ConfigError(
                f"interface name {request.ifname!r} is taken in container {container_id!r}"
            )
        return request.ifname
    k = 0
    while f"{settings.interface_prefix}{k}" in taken:
        k += 1
    return f"{settings.interface_prefix}{k}"


def attach(state: State, req: ContainerRequest, timeout: float | None) -> Op:
    """ADD one more network to an attached container (``NetworkManager.attach``)."""
    request = requests(req.networks or ())[0]  # (a list in the list is refused: one network)
    container_id = req.container_id
    rq.validate_container_id(container_id)
    loaded = yield from state.current()
    timeout = state.timeout_or(timeout)
    release = yield LockContainer(state.cache, container_id, timeout, "attach")
    try:
        atts: list[Held] = yield Blocking(held, (state, container_id))
        if not atts:
            raise _nothing_cached(container_id, "attach a network to")
        netns = _netns_of(container_id, atts, req.netns)
        ifname = _ifname_of(state.settings, container_id, atts, request)
        named = attrs.evolve(request, ifname=ifname)
        item = plan(state, loaded, attrs.evolve(req, netns=netns, networks=[named]))[-1]
        yield Blocking(refuse_not_netns, (netns,))
        if os.path.lexists(state.cache.entry_path(item.network, container_id, ifname)):
            raise AlreadyAttachedError(item.network, container_id, ifname)  # unreadable entry
        deadline = Deadline(timeout)
        dead = [e for e, complete in atts if not complete and e.network_name == item.network]
        yield from del_dead_attempts(state, container_id, dead, deadline)
        run = Run([item])
        run.attempted.append(item)
        try:
            run.succeeded(0, (yield from attempt(state, item, deadline)))
        except CNIError as e:
            run.failure = e
        except BaseException as e:  # cancelled, or interrupted: roll back, then re-raise
            run.interrupted = e
        if not run.done:
            yield from undo(state, container_id, run)  # raises
        merged: ContainerNetworks = yield Blocking(view, (state, container_id))
    finally:
        release()
    return merged


def detach(state: State, container_id: str, network: str, timeout: float | None) -> Op:
    """DEL every attachment of ``network`` the container holds (``NetworkManager.detach``)."""
    rq.validate_container_id(container_id)
    rq.validate_network_name(network)
    timeout = state.timeout_or(timeout)
    release = yield LockContainer(state.cache, container_id, timeout, "detach")
    try:
        atts: list[Held] = yield Blocking(held, (state, container_id))
        if not atts:
            raise _nothing_cached(container_id, f"detach network {network!r} from")
        mine = [e for e, _ in atts if e.network_name == network]
        if not mine:
            on = ", ".join(sorted({e.network_name for e, _ in atts}))
            raise NotAttachedError(
                f"container {container_id!r} is not attached to network {network!r} "
                f"(its networks: {on})"
            )
        yield from delete_each(state, container_id, mine, "", timeout, "detach")
        merged: ContainerNetworks = yield Blocking(view, (state, container_id))
    finally:
        release()
    return merged
