"""``sandbox()``: a container's network namespace and networks, made and undone together.

Create a namespace (:func:`libcni.netns.create`, named as asked), set the container up in
it, hand over the view, then tear down and remove the namespace, in that
order (as containerd does: the networks are torn down while their namespace
still exists). When setup fails it has rolled back already; the namespace is
removed after it, and the setup's error propagates. A teardown failure is
raised after the namespace is removed. Written once for the blocking and the
async manager.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from .. import _log as logging
from .._drive import finish
from ._state import ContainerRequest
from ._values import ContainerNetworks

if TYPE_CHECKING:
    from ..netns import NetNS
    from . import NetworkManager
    from ._async import AsyncNetworkManager

__all__ = ["async_sandbox", "sandbox"]

log = logging.getLogger("libcni")


def _remove_after_failure(ns: NetNS, container_id: str) -> None:
    """Remove ``ns`` while another error propagates: a failure here is logged, not raised."""
    from ..errors import NamespaceError

    try:
        ns.remove()
    except NamespaceError as e:
        log.warning("network namespace of container %r not removed: %s", container_id, e)


@contextlib.contextmanager
def sandbox(
    manager: NetworkManager,
    request: ContainerRequest,
    name: str | None,
    netns_dir: str | os.PathLike[str],
    parallel: bool,
    timeout: float | None,
) -> Iterator[ContainerNetworks]:
    from ..netns import create

    container_id = request.container_id
    ns = create(name, dir=netns_dir)
    try:
        view = manager.setup(
            container_id,
            ns.path,
            networks=request.networks,
            args=request.args,
            capability_args=request.capability_args,
            parallel=parallel,
            timeout=timeout,
        )
    except BaseException:
        _remove_after_failure(ns, container_id)
        raise
    try:
        yield view
    finally:
        try:
            manager.teardown(container_id, ns.path, timeout=timeout)
        except BaseException:
            _remove_after_failure(ns, container_id)
            raise
        ns.remove()


async def _create(name: str | None, netns_dir: str | os.PathLike[str], container_id: str) -> NetNS:
    """:func:`libcni.netns.create` in a worker thread; it finishes even if the caller is
    cancelled meanwhile (then the namespace is removed and the cancellation re-raised)."""
    import asyncio
    import functools

    from ..netns import create

    loop = asyncio.get_running_loop()
    made = loop.run_in_executor(None, functools.partial(create, name, dir=netns_dir))
    if await finish(made) is not None:
        if not made.cancelled() and made.exception() is None:
            _remove_after_failure(made.result(), container_id)
        raise asyncio.CancelledError()
    ns: NetNS = made.result()
    return ns


@contextlib.asynccontextmanager
async def async_sandbox(
    manager: AsyncNetworkManager,
    request: ContainerRequest,
    name: str | None,
    netns_dir: str | os.PathLike[str],
    parallel: bool,
    timeout: float | None,
) -> AsyncIterator[ContainerNetworks]:
    container_id = request.container_id
    ns = await _create(name, netns_dir, container_id)
    try:
        view = await manager.setup(
            container_id,
            ns.path,
            networks=request.networks,
            args=request.args,
            capability_args=request.capability_args,
            parallel=parallel,
            timeout=timeout,
        )
    except BaseException:
        _remove_after_failure(ns, container_id)
        raise
    try:
        yield view
    finally:
        try:
            await manager.teardown(container_id, ns.path, timeout=timeout)
        except BaseException:
            _remove_after_failure(ns, container_id)
            raise
        ns.remove()
