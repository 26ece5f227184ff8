"""``AsyncNetworkManager``: the same rules, their effects awaited (a cancelled setup rolls
back, its DELs finished, before ``CancelledError`` propagates)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

from .._deadline import Deadline, apoll
from .._drive import finish
from ..aio import AsyncCNIConfig
from ..values import Args, CapabilityArgs, NetworkAttachment
from . import _attach, _gc, _ready, _setup, _teardown
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
from ._sandbox import async_sandbox
from ._state import NO_CAPS, ContainerRequest
from ._values import ContainerNetworks, LoadedNetworks, NetworkRequest

__all__ = ["AsyncNetworkManager"]


def _outcome(task: asyncio.Future[Any]) -> Outcome:
    if task.cancelled():
        return None, asyncio.CancelledError()
    error = task.exception()
    return (None, error) if error is not None else (task.result(), None)


class AsyncNetworkManager(_ManagerBase):
    """The asyncio form of :class:`~libcni.NetworkManager`: same constructor, same rules;
    safe to share between tasks (one container's operations never interleave)."""

    _ASYNC = True
    _CNI = AsyncCNIConfig
    _cni: AsyncCNIConfig

    async def _operation(self, op: Op, name: str, container_id: str = "") -> Any:
        if self._watch is None:
            return await self._drive(op)
        with self._watch.span("operation", name, container_id=container_id) as parent:
            return await self._under(parent)._drive(op)

    async def _drive(self, op: Op) -> Any:
        outcome: Any = None
        error: BaseException | None = None
        cancelled_meanwhile = False
        while True:
            try:
                effect = op.send(outcome) if error is None else op.throw(error)
            except StopIteration as stop:
                if cancelled_meanwhile:
                    raise asyncio.CancelledError() from None
                return stop.value
            except BaseException as e:
                if cancelled_meanwhile and not isinstance(e, asyncio.CancelledError):
                    raise asyncio.CancelledError() from e
                raise
            outcome, error = None, None
            try:
                if isinstance(effect, Call) and effect.protected:
                    task = asyncio.ensure_future(self._perform(effect))
                    cancelled = await finish(task)
                    cancelled_meanwhile = cancelled_meanwhile or cancelled is not None
                    outcome = task.result()
                else:
                    outcome = await self._perform(effect)
            except BaseException as e:  # handed to the rule, which may handle it
                error = e

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Call):
            return await effect.call(self._calls)
        if isinstance(effect, Together):
            return await self._together(effect.calls, effect.width)
        if isinstance(effect, LockContainer):
            return await self._lock(effect)
        if isinstance(effect, Pause):
            await asyncio.sleep(effect.seconds)
            return None
        if isinstance(effect, LoopbackUp):  # in its own thread: the loop never waits for lo
            try:
                return await asyncio.wait_for(asyncio.wrap_future(effect.start()), effect.timeout)
            except asyncio.TimeoutError:
                raise effect.timed_out() from None
        assert isinstance(effect, Blocking)
        # Short local reads, inline (a worker thread would queue them behind fsyncs), after a
        # turn of the loop that operations begun at once share (docs/performance.md).
        await asyncio.sleep(0)
        return effect.call(*effect.args)

    async def _together(self, calls: Sequence[Call | Op], width: int = 0) -> list[Outcome]:
        room = asyncio.Semaphore(width) if width and width < len(calls) else None

        async def one(c: Call | Op) -> Any:
            async with room or contextlib.nullcontext():
                return await (self._perform(c) if isinstance(c, Call) else self._drive(c))

        tasks = [asyncio.ensure_future(one(c)) for c in calls]
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            for t in tasks:
                await finish(t)
            for t in tasks:  # retrieved: asyncio would log them as never retrieved
                if not t.cancelled():
                    t.exception()
            raise
        return [_outcome(t) for t in tasks]

    @staticmethod
    async def _lock(effect: LockContainer) -> Any:
        """The container lock, polled without blocking the loop."""
        cache, container_id = effect.cache, effect.container_id
        lock = await apoll(lambda: cache.try_container_lock(container_id), Deadline(effect.timeout))
        if lock is None:
            raise effect.timed_out()
        return lock.release

    async def networks(self) -> LoadedNetworks:
        """The configuration as of now (re-read if anything changed on disk)."""
        loaded: LoadedNetworks = await self._drive(self._state.current())
        return loaded

    async def setup(
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
        """As :meth:`NetworkManager.setup`; a cancelled setup rolls back, then re-raises."""
        req = ContainerRequest(
            container_id=container_id,
            netns=netns,
            networks=networks,
            args=args,
            capability_args=capability_args,
        )
        view: ContainerNetworks = await self._operation(
            _setup.setup(self._state, req, parallel, timeout), "setup", container_id
        )
        return view

    async def teardown(
        self,
        container_id: str,
        netns: str = "",
        *,
        networks: Sequence[str | NetworkRequest] | None = None,
        args: Args = (),
        capability_args: CapabilityArgs = NO_CAPS,
        timeout: float | None = None,
    ) -> None:
        """As :meth:`NetworkManager.teardown`."""
        req = ContainerRequest(
            container_id=container_id,
            netns=netns,
            networks=networks,
            args=args,
            capability_args=capability_args,
        )
        await self._operation(
            _teardown.teardown(self._state, req, timeout), "teardown", container_id
        )

    async def check(
        self, container_id: str, netns: str = "", *, timeout: float | None = None
    ) -> None:
        """As :meth:`NetworkManager.check`."""
        await self._operation(
            _teardown.check(self._state, container_id, netns, timeout), "check", container_id
        )

    async def inspect(self, container_id: str) -> ContainerNetworks:
        """As :meth:`NetworkManager.inspect`."""
        view: ContainerNetworks = await self._drive(_teardown.inspect(self._state, container_id))
        return view

    async def containers(self) -> tuple[str, ...]:
        """As :meth:`NetworkManager.containers`."""
        return tuple(self._state.cache.containers())

    async def attach(
        self,
        container_id: str,
        network: str | NetworkRequest,
        netns: str = "",
        *,
        args: Args = (),
        capability_args: CapabilityArgs = NO_CAPS,
        timeout: float | None = None,
    ) -> ContainerNetworks:
        """As :meth:`NetworkManager.attach`; a cancelled attach rolls back, then re-raises."""
        req = ContainerRequest(
            container_id=container_id,
            netns=netns,
            networks=[network],
            args=args,
            capability_args=capability_args,
        )
        view: ContainerNetworks = await self._operation(
            _attach.attach(self._state, req, timeout), "attach", container_id
        )
        return view

    async def detach(
        self, container_id: str, network: str, *, timeout: float | None = None
    ) -> ContainerNetworks:
        """As :meth:`NetworkManager.detach`."""
        view: ContainerNetworks = await self._operation(
            _attach.detach(self._state, container_id, network, timeout), "detach", container_id
        )
        return view

    async def forget(
        self, container_id: str, *, networks: Sequence[str] | None = None
    ) -> tuple[NetworkAttachment, ...]:
        """As :meth:`NetworkManager.forget`."""
        dropped: tuple[NetworkAttachment, ...] = await self._drive(
            _teardown.forget(self._state, container_id, networks)
        )
        return dropped

    async def status(self, *, timeout: float | None = None) -> None:
        """As :meth:`NetworkManager.status`."""
        await self._operation(_ready.status(self._state, timeout), "status")

    async def gc(self, valid_containers: Iterable[str], *, timeout: float | None = None) -> None:
        """As :meth:`NetworkManager.gc`."""
        await self._operation(_gc.gc(self._state, valid_containers, timeout), "gc")

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
    ) -> contextlib.AbstractAsyncContextManager[ContainerNetworks]:
        """As :meth:`NetworkManager.sandbox`, an async context manager (``async with``); a
        cancelled setup rolls back and removes the namespace before ``CancelledError``."""
        request = ContainerRequest(
            container_id=container_id, networks=networks, args=args, capability_args=capability_args
        )
        return async_sandbox(self, request, name, netns_dir, parallel, timeout)
