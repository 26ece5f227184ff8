"""``sandbox()``: a network namespace and the container's networks, made and undone together
(torn down while the namespace exists, as containerd does)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import attrs

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


def _in(request: ContainerRequest, ns: NetNS) -> dict[str, Any]:
    """``request`` in ``ns``, as keyword arguments of ``setup``."""
    return attrs.asdict(attrs.evolve(request, netns=ns.path), recurse=False)


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
        view = manager.setup(**_in(request, ns), parallel=parallel, timeout=timeout)
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
        view = await manager.setup(**_in(request, ns), parallel=parallel, timeout=timeout)
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
