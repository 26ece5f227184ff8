"""One network more or less for a running container.

The rules of ``attach`` (Podman's ``network connect``) and ``detach``
(``network disconnect``), as generators over the manager's :class:`~libcni.manager._core.Core` that yield
its effects, like the operations of ``_core``; the sync and async managers
drive them.

Decisions (docs/attaching.rst):

- ``attach`` needs something cached for the container (a setup); it names
  the interface the first free ``<interface_prefix><n>`` (``eth0``, ``eth2``
  cached: ``eth1``, as setup and Podman fill gaps); a netns given must be the
  cached one (the same path, or the same namespace by another path).
- ``detach`` of a network the container is not on is ``NotAttachedError``
  naming it; of the last network, the loopback attachment stays (the
  container is still known: ``attach`` works again; ``teardown`` ends it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import request as rq
from .._deadline import Deadline
from ..errors import (
    AlreadyAttachedError,
    CNIError,
    ConfigError,
    NotAttachedError,
    TeardownError,
    ValidationError,
)
from ..values import Args, CapabilityArgs
from ._core import (
    Blocking,
    Held,
    LockContainer,
    Op,
    _delete,
    _refuse_not_netns,
    _requests,
    _Run,
    log,
)
from ._values import LOOPBACK_IFNAME, ContainerNetworks, NetworkRequest

if TYPE_CHECKING:
    from ._core import Core

__all__ = ["attach", "detach"]


def _nothing_cached(container_id: str, what: str) -> NotAttachedError:
    return NotAttachedError(
        f"cannot {what} container {container_id!r}: nothing is cached for it "
        "(never set up here, or torn down); set it up first"
    )


def _same_netns(given: str, cached: str) -> bool:
    """Whether ``given`` is the cached netns: the same path, or the same namespace."""
    if given == cached:
        return True
    try:
        a, b = os.stat(given), os.stat(cached)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _netns_of(container_id: str, held: list[Held], netns: str) -> str:
    """The netns of an attach: the cached one (``netns`` must be it, or another path to
    that namespace; ``""`` takes it); ``netns`` when none is cached."""
    cached = next((e.netns for e, _ in held if e.netns), "")
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


def _ifname_of(core: Core, container_id: str, held: list[Held], request: NetworkRequest) -> str:
    """The interface of an attach: the request's, or the first free ``<prefix><n>``;
    the network already attached is :class:`AlreadyAttachedError`."""
    network = request.network
    for e, complete in held:
        if complete and e.network_name == network:
            raise AlreadyAttachedError(network, container_id, e.ifname)
    # A dead attempt of this network is DELeted first: its interface name is free.
    taken = {e.ifname for e, _ in held if e.network_name != network}
    if core.loopback:
        taken.add(LOOPBACK_IFNAME)
    if request.ifname is not None:
        rq.validate_interface_name(request.ifname)
        if request.ifname in taken:
            raise ConfigError(
                f"interface name {request.ifname!r} is taken in container {container_id!r}"
            )
        return request.ifname
    k = 0
    while f"{core.interface_prefix}{k}" in taken:
        k += 1
    return f"{core.interface_prefix}{k}"


def attach(
    core: Core,
    container_id: str,
    network: str | NetworkRequest,
    netns: str,
    args: Args,
    capability_args: CapabilityArgs,
    timeout: float | None,
) -> Op:
    """ADD one more network to an attached container; a failure rolls back that one only.

    Under the container's lock, every check of setup runs before any plugin
    (``Core._plan`` makes the network's run); a dead attempt of that network
    is DELeted first. The outcome is the container's merged view.
    """
    request = _requests([network])[0]  # (a list is refused: one network)
    rq.validate_container_id(container_id)
    loaded = yield from core.current()
    timeout = core._timeout(timeout)
    release = yield LockContainer(core.cache, container_id, timeout, "attach")
    try:
        held: list[Held] = yield Blocking(core._held, (container_id,))
        if not held:
            raise _nothing_cached(container_id, "attach a network to")
        netns = _netns_of(container_id, held, netns)
        ifname = _ifname_of(core, container_id, held, request)
        named = NetworkRequest(request.network, ifname, request.args, request.capability_args)
        item = core._plan(loaded, container_id, netns, [named], args, capability_args)[-1]
        yield Blocking(_refuse_not_netns, (netns,))
        if os.path.lexists(core.cache.entry_path(item.network, container_id, ifname)):
            raise AlreadyAttachedError(item.network, container_id, ifname)  # unreadable entry
        deadline = Deadline(timeout)
        dead = [e for e, complete in held if not complete and e.network_name == item.network]
        yield from core._del_dead_attempts(container_id, dead, deadline)
        run = _Run([item])
        run.attempted.append(item)
        try:
            run.succeeded(0, (yield from core._attempt(item, deadline)))
        except CNIError as e:
            run.failure = e
        except BaseException as e:  # cancelled, or interrupted: roll back, then re-raise
            run.interrupted = e
        if not run.done:
            yield from core._undo(container_id, run)  # raises
        view: ContainerNetworks = yield Blocking(core._inspect, (container_id,))
    finally:
        release()
    return view


def detach(core: Core, container_id: str, network: str, timeout: float | None) -> Op:
    """DEL every attachment of ``network`` the container holds, with what it cached; the
    other attachments stay. The outcome is the container's merged view after it."""
    rq.validate_container_id(container_id)
    rq.validate_network_name(network)
    timeout = core._timeout(timeout)
    release = yield LockContainer(core.cache, container_id, timeout, "detach")
    try:
        held: list[Held] = yield Blocking(core._held, (container_id,))
        if not held:
            raise _nothing_cached(container_id, f"detach network {network!r} from")
        mine = [e for e, _ in held if e.network_name == network]
        if not mine:
            on = ", ".join(sorted({e.network_name for e, _ in held}))
            raise NotAttachedError(
                f"container {container_id!r} is not attached to network {network!r} "
                f"(its networks: {on})"
            )
        errors: list[CNIError] = []
        for entry in reversed(mine):
            try:
                net, rt = core._cached_net(entry, entry.netns)
                yield _delete(net, rt, timeout)
            except CNIError as e:
                log.warning(
                    "detach of network %r (%s) from container %r failed: %s",
                    network,
                    entry.ifname,
                    container_id,
                    e,
                )
                errors.append(e)
        if errors:
            raise TeardownError(container_id, errors)
        view: ContainerNetworks = yield Blocking(core._inspect, (container_id,))
    finally:
        release()
    return view
