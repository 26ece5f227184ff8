"""The effects the manager's rules yield (each class says its outcome), and the seam every
plugin run goes through (:class:`NetworkCalls`), as in :mod:`libcni._ops`."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import attrs

from .._deadline import Deadline, lock_timeout
from ..cache import ResultCache
from ..conf import NetworkConfigList
from ..errors import LockTimeoutError, PluginTimeoutError
from ..values import RuntimeConf


@attrs.frozen
class LoopbackUp:
    """Effect: bring ``lo`` up in ``netns`` in a thread, for at most ``timeout`` s; ``None``."""

    netns: str
    timeout: float | None
    limit: float | None  # the setup's timeout, for the message

    def start(self) -> concurrent.futures.Future[None]:
        """The bring-up, started in a new thread."""
        from ..netns import _loopback_up

        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return  # given up on before it started
            try:
                _loopback_up(self.netns)
            except BaseException as e:  # handed to the waiter
                done.set_exception(e)
            else:
                done.set_result(None)

        threading.Thread(target=run, name="libcni-loopback", daemon=True).start()
        return done

    def wait(self) -> None:
        try:
            self.start().result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise self.timed_out() from None

    def timed_out(self) -> PluginTimeoutError:
        """The setup's timeout error: ``lo`` was not up in time."""
        return PluginTimeoutError(
            f"setup timed out after {self.limit:.3g}s while bringing lo up in {self.netns} "
            '(loopback="internal")'
        )


class NetworkCalls(Protocol):
    """The seam: what a :class:`Call` may call (``_calls.CNICalls`` implements it)."""

    def add(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        """ADD (``add_network_list``); the outcome is the result."""

    def delete(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        """DEL (``del_network_list``)."""

    def check(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        """CHECK (``check_network_list``)."""

    def status(self, net: NetworkConfigList, timeout: float | None) -> Any:
        """STATUS (``get_status_network_list``)."""

    def gc(
        self, nets: Sequence[NetworkConfigList], keep: frozenset[str], timeout: float | None
    ) -> Any:
        """GC (``gc_networks``) of ``nets`` and of the cached networks, keeping ``keep``."""


@attrs.frozen
class Call:
    """Effect: ``call(calls)``, its value; ``protected`` ones finish even if cancelled."""

    call: Callable[[NetworkCalls], Any]
    protected: bool = False


# The calls the rules make (closures over arguments, never over a loop's variables).


def call_add(net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Call:
    return Call(lambda calls: calls.add(net, rt, timeout))


def call_delete(
    net: NetworkConfigList, rt: RuntimeConf, timeout: float | None, *, protected: bool = False
) -> Call:
    return Call(lambda calls: calls.delete(net, rt, timeout), protected)


def call_check(net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Call:
    return Call(lambda calls: calls.check(net, rt, timeout))


def call_status(net: NetworkConfigList, timeout: float | None) -> Call:
    return Call(lambda calls: calls.status(net, timeout))


def call_gc(nets: Sequence[NetworkConfigList], keep: frozenset[str], timeout: float | None) -> Call:
    return Call(lambda calls: calls.gc(nets, keep, timeout))


@attrs.frozen
class Together:
    """Effect: run ``calls`` together, ``width`` at once (``0``: all); ``[(value, error)]``."""

    calls: tuple[Call | Generator[Any, Any, Any], ...]
    width: int = 0


@attrs.frozen
class LockContainer:
    """Effect: hold the lock of one container; the outcome is a function releasing it."""

    cache: ResultCache
    container_id: str
    timeout: float | None
    operation: str = ""  # for the LockTimeoutError message

    def timed_out(self) -> LockTimeoutError:
        """The error of a wait for this lock that outlasted ``timeout``."""
        path = self.cache.container_lock_path(self.container_id)
        return lock_timeout(f"container {self.container_id!r}", path, self.timeout, self.operation)


@attrs.frozen
class Blocking:
    """Effect: ``call(*args)``, a short local read (stats, small files)."""

    call: Callable[..., Any]
    args: tuple[Any, ...] = ()


@attrs.frozen
class Pause:
    """Effect: wait ``seconds`` (a back-off); the outcome is ``None``."""

    seconds: float


Effect = Call | Together | LockContainer | Blocking | Pause | LoopbackUp
Op = Generator[Effect, Any, Any]
Outcome = tuple[Any, BaseException | None]


def time_left(deadline: Deadline, network: str, container_id: str) -> float | None:
    """The timeout of a setup's next call; :class:`PluginTimeoutError` when no time is left."""
    if deadline.expired:
        raise PluginTimeoutError(
            f"setup timed out after {deadline.limit:.3g}s before network {network!r} "
            "could be added",
            command="ADD",
            network=network,
            container_id=container_id,
        )
    return call_timeout(deadline)


def call_timeout(deadline: Deadline) -> float | None:
    """The time left, or the limit itself when it sets no end (``None``: the default)."""
    left = deadline.left()
    return deadline.limit if left is None else left
