"""The networks of a container: :class:`NetworkManager` and :class:`AsyncNetworkManager`.

What a runtime needs on top of ``CNIConfig``: setup with rollback, teardown
from the cache, check, inspect, readiness and GC across every network. The
rules (``_setup``, ``_teardown``...) yield effects; this module performs them
with blocking calls, :class:`AsyncNetworkManager` with ``await``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .._drive import drive
from ..api import CNIConfig
from ..errors import LockTimeoutError
from ..values import Args, CapabilityArgs, NetworkAttachment
from . import _attach, _gc, _ready, _setup, _teardown
from ._base import DEFAULT_CONF_DIR as DEFAULT_CONF_DIR
from ._base import _ManagerBase
from ._effects import (
    Blocking,
    Call,
    Effect,
    LockContainer,
    LoopbackUp,
    Op,
    Outcome,
    Pause,
    Together,
)
from ._held import attachment_order as attachment_order  # the CLI's order of attachments
from ._sandbox import sandbox
from ._state import NO_CAPS, ContainerRequest
from ._values import (
    LOOPBACK_NETWORK,
    AttachmentResult,
    ContainerInterface,
    ContainerNetworks,
    LoadedNetworks,
    NetworkRequest,
)

if TYPE_CHECKING:
    from ._async import AsyncNetworkManager

__all__ = [
    "LOOPBACK_NETWORK",
    "Args",
    "AsyncNetworkManager",
    "AttachmentResult",
    "CapabilityArgs",
    "ContainerInterface",
    "ContainerNetworks",
    "LoadedNetworks",
    "NetworkManager",
    "NetworkRequest",
]


class NetworkManager(_ManagerBase):
    """Attaches containers to their networks and detaches them.

    ``conf_dir`` holds the network configuration files (``None``: none); ``networks``,
    lists defined in code (:func:`~libcni.conf_list_from_bytes`), come first and shadow
    files of the same name. ``plugin_dirs`` hold the binaries (default: ``/opt/cni/bin``,
    then ``/usr/lib/cni``); a network whose binary is missing is skipped until it appears.
    ``cache_dir``, ``exec`` and ``timeout`` are as for :class:`~libcni.CNIConfig`.
    Without ``default_networks`` a setup given no networks attaches the first
    ``max_networks`` usable ones (``0``: all). ``loopback``: every setup first attaches
    the ``cni-loopback`` network (the ``loopback`` plugin) as ``lo``; ``"internal"``: it
    brings ``lo`` up itself (nothing cached); ``False``: neither. Other interfaces are
    ``<interface_prefix><n>`` unless a request names them. ``retry_attempts``: an ADD
    failing with code 11 ("try again later") is DELeted and retried that many more times,
    with a back-off, within the setup's timeout. ``observers`` are told of every
    operation, network and plugin run (:class:`~libcni.Event`).

    Every constructor argument can be read back under its name (``manager.plugin_dirs``).
    Safe to share between threads; nothing runs in the background.
    """

    _cni: CNIConfig

    def _drive(self, op: Op) -> Any:
        return drive(op, self._perform)

    def _operation(self, op: Op, name: str, container_id: str = "") -> Any:
        """:meth:`_drive` ``op``; with observers, between the events of the operation ``name``."""
        if self._watch is None:
            return self._drive(op)
        with self._watch.span("operation", name, container_id=container_id) as parent:
            return self._under(parent)._drive(op)

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Call):
            return effect.call(self._calls)
        if isinstance(effect, Together):
            return self._together(effect.calls, effect.width)
        if isinstance(effect, LockContainer):
            try:  # waits in flock, or tries after the pauses of _deadline.LOCK_WAIT
                return effect.cache.container_lock(effect.container_id, effect.timeout).release
            except LockTimeoutError:
                raise effect.timed_out() from None
        if isinstance(effect, Pause):
            time.sleep(effect.seconds)
            return None
        if isinstance(effect, LoopbackUp):
            return effect.wait()
        assert isinstance(effect, Blocking)
        return effect.call(*effect.args)

    def _together(self, calls: Sequence[Call | Op], width: int = 0) -> list[Outcome]:
        def one(call: Call | Op) -> Outcome:
            try:
                if isinstance(call, Call):
                    return self._perform(call), None
                return self._drive(call), None
            except Exception as e:
                return None, e

        if len(calls) == 1:
            return [one(calls[0])]
        # Each call in a copy of the caller's context, as an asyncio task runs
        # (what an observer or an Exec reads from context variables: the trace).
        contexts = [contextvars.copy_context() for _ in calls]
        threads = min(len(calls), width) if width else len(calls)
        with ThreadPoolExecutor(threads, thread_name_prefix="libcni-together") as pool:
            return list(pool.map(lambda call, ctx: ctx.run(one, call), calls, contexts))

    def networks(self) -> LoadedNetworks:
        """The configuration as of now (re-read if anything changed on disk)."""
        loaded: LoadedNetworks = self._drive(self._state.current())
        return loaded

    def setup(
        self,
        container_id: str,
        netns: str,
        *,
        networks: Sequence[str | NetworkRequest] | None = None,
        args: Args = (),
        capability_args: CapabilityArgs = NO_CAPS,
        parallel: bool = False,
        timeout: float | None = None,
    ) -> ContainerNetworks:
        """Attach the container to the loopback network and to ``networks`` (default networks
        when ``None``); on failure roll everything back and raise :class:`~libcni.errors.SetupError`.

        ``args`` (pairs, or a mapping) reach every network as ``CNI_ARGS``;
        ``capability_args`` (a mapping, or a :class:`~libcni.capabilities.RuntimeConfig`)
        are checked before anything runs; one no network declares is logged.
        ``timeout`` bounds all the ADDs (retries included); each rollback DEL has its own.
        """
        req = ContainerRequest(
            container_id=container_id,
            netns=netns,
            networks=networks,
            args=args,
            capability_args=capability_args,
        )
        view: ContainerNetworks = self._operation(
            _setup.setup(self._state, req, parallel, timeout), "setup", container_id
        )
        return view

    def teardown(
        self,
        container_id: str,
        netns: str = "",
        *,
        networks: Sequence[str | NetworkRequest] | None = None,
        args: Args = (),
        capability_args: CapabilityArgs = NO_CAPS,
        timeout: float | None = None,
    ) -> None:
        """DEL every attachment the cache holds for the container, complete or in progress
        (or those of ``networks``), last first; every DEL runs, failures raise together as
        :class:`~libcni.errors.TeardownError`.

        Each DEL uses the configuration, args and capability args cached at ADD (and the
        cached netns when ``netns`` is empty). A network of ``networks`` with nothing cached
        is DELeted with its current configuration, the interface setup would give it,
        ``args`` and ``capability_args``.
        """
        req = ContainerRequest(
            container_id=container_id,
            netns=netns,
            networks=networks,
            args=args,
            capability_args=capability_args,
        )
        self._operation(_teardown.teardown(self._state, req, timeout), "teardown", container_id)

    def check(self, container_id: str, netns: str = "", *, timeout: float | None = None) -> None:
        """CHECK every cached attachment of the container, with what it cached (and its
        netns when ``netns`` is empty); the first failure is raised. A container with
        nothing cached or recorded is :class:`~libcni.errors.NotAttachedError`."""
        self._operation(
            _teardown.check(self._state, container_id, netns, timeout), "check", container_id
        )

    def inspect(self, container_id: str) -> ContainerNetworks:
        """The merged view of the container's attachments, from the cache (runs nothing)."""
        view: ContainerNetworks = self._drive(_teardown.inspect(self._state, container_id))
        return view

    def containers(self) -> tuple[str, ...]:
        """Every container the cache holds an attachment of, complete or in progress, sorted:
        what a restarted runtime compares with the containers it knows before :meth:`gc`."""
        return tuple(self._state.cache.containers())

    def attach(
        self,
        container_id: str,
        network: str | NetworkRequest,
        netns: str = "",
        *,
        args: Args = (),
        capability_args: CapabilityArgs = NO_CAPS,
        timeout: float | None = None,
    ) -> ContainerNetworks:
        """Attach a set-up container to one more network (Podman's ``network connect``);
        the container's whole merged view.

        ``netns`` must be the cached one (``""`` takes it); the interface is the request's,
        or the first free ``<interface_prefix><n>``. Already attached:
        :class:`~libcni.errors.AlreadyAttachedError`; nothing cached:
        :class:`~libcni.errors.NotAttachedError`; a failed ADD is rolled back (that
        network only): :class:`~libcni.errors.SetupError`.
        """
        req = ContainerRequest(
            container_id=container_id,
            netns=netns,
            networks=[network],
            args=args,
            capability_args=capability_args,
        )
        view: ContainerNetworks = self._operation(
            _attach.attach(self._state, req, timeout), "attach", container_id
        )
        return view

    def detach(
        self, container_id: str, network: str, *, timeout: float | None = None
    ) -> ContainerNetworks:
        """DEL one network of the container with what it cached (Podman's ``network
        disconnect``); the others, loopback included, stay. The view after.

        Nothing cached, or not on ``network``: :class:`~libcni.errors.NotAttachedError`;
        a failed DEL: :class:`~libcni.errors.TeardownError` (its entry stays).
        """
        view: ContainerNetworks = self._operation(
            _attach.detach(self._state, container_id, network, timeout), "detach", container_id
        )
        return view

    def forget(
        self, container_id: str, *, networks: Sequence[str] | None = None
    ) -> tuple[NetworkAttachment, ...]:
        """Drop the container's attachments (those of ``networks``, or all, complete or in
        progress) from the cache without running any plugin; return what was dropped.

        The way out for an attachment whose DEL always fails: each one is logged
        (WARNING) and returned with its configuration, netns and args, for a person to
        remove by hand what its plugins made. Nothing cached: ``()``. Takes the
        container's lock, as :meth:`teardown`.
        """
        dropped: tuple[NetworkAttachment, ...] = self._drive(
            _teardown.forget(self._state, container_id, networks)
        )
        return dropped

    def status(self, *, timeout: float | None = None) -> None:
        """Return when containers can be attached, else raise :class:`~libcni.errors.NotReadyError`."""
        self._operation(_ready.status(self._state, timeout), "status")

    def gc(self, valid_containers: Iterable[str], *, timeout: float | None = None) -> None:
        """Collect every attachment of containers not in ``valid_containers``, on every
        configured or cached network, one after the other, from one listing of the cache
        (:meth:`~libcni.CNIConfig.gc_networks`); failures raise together as
        :class:`~libcni.errors.GCError`."""
        self._operation(_gc.gc(self._state, valid_containers, timeout), "gc")

    def sandbox(  # noqa: PLR0913  (the public signature: setup's arguments and a name)
        self,
        container_id: str,
        *,
        networks: Sequence[str | NetworkRequest] | None = None,
        args: Args = (),
        capability_args: CapabilityArgs = NO_CAPS,
        name: str | None = None,
        netns_dir: str | os.PathLike[str] = "/run/netns",
        parallel: bool = False,
        timeout: float | None = None,
    ) -> contextlib.AbstractContextManager[ContainerNetworks]:
        """A context manager: a new network namespace ``name`` (``cni-<uuid>`` when ``None``)
        in ``netns_dir`` (:func:`libcni.netns.create`), the container set up in it, its
        :class:`ContainerNetworks` (``.netns`` is the namespace's path) for the
        ``with`` block; then teardown, and the namespace removed.

        A failed setup rolls back, removes the namespace and raises its
        :class:`~libcni.errors.SetupError`; a failed teardown raises its
        :class:`~libcni.errors.TeardownError` after the namespace is removed.
        """
        request = ContainerRequest(
            container_id=container_id, networks=networks, args=args, capability_args=capability_args
        )
        return sandbox(self, request, name, netns_dir, parallel, timeout)


def __getattr__(name: str) -> Any:
    if name == "AsyncNetworkManager":
        from ._async import AsyncNetworkManager

        globals()[name] = AsyncNetworkManager
        return AsyncNetworkManager
    raise AttributeError(f"module 'libcni.manager' has no attribute {name!r}")
