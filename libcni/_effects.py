"""The effects the operations of ``libcni._ops`` yield, and what their drivers need of them."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ._deadline import lock_timeout, timeout_message
from .errors import LockTimeoutError, PluginError, PluginTimeoutError

if TYPE_CHECKING:
    from .cache import ResultCache
    from .conf import NetworkConfigList

__all__ = ["CacheIO", "Effect", "GCNetwork", "Release", "RunPlugin", "TakeLock", "in_context"]


@attrs.frozen
class RunPlugin:
    """Effect: run the plugin binary ``path``; the outcome is its stdout. ``path``, ``stdin``,
    ``env`` and ``timeout`` (the time left) are ``Exec.exec_plugin``'s arguments; the others
    the context a ``PluginError`` gets (``_ops._run``) and the DEBUG record shows."""

    path: str
    stdin: bytes
    env: Mapping[str, str]
    timeout: float | None
    plugin: str
    command: str
    network: str = ""
    container_id: str = ""
    limit: float | None = None  # the whole operation's timeout, for the error message
    #: An ADD's attachment lock, inherited by the plugin and its children (RawExec only):
    #: held while any process of the ADD lives, even after the runtime died (behaviour §4.3).
    lock_fd: int | None = None

    @property
    def args(self) -> tuple[str, bytes, Mapping[str, str], float | None]:
        """The arguments of ``Exec.exec_plugin``."""
        return self.path, self.stdin, self.env, self.timeout


@attrs.frozen
class TakeLock:
    """Effect: hold a cache lock; the outcome is a function that releases it. With
    ``attachment`` (container ID, interface name) that attachment's, else the ``network``'s
    (``exclusive`` for GC, shared for ADD and DEL); bad names are a ``ValidationError``."""

    cache: ResultCache
    network: str
    attachment: tuple[str, str] | None = None
    exclusive: bool = True
    timeout: float | None = None  # the operation's time left; None: wait as long as it takes
    command: str = ""  # for the LockTimeoutError message
    limit: float | None = None  # the whole operation's timeout, for the message

    def take(self, *, wait: bool = True) -> Release | None:
        """Take the lock; the function that releases it. ``wait``: for at most ``timeout``
        seconds, then ``LockTimeoutError``; otherwise one try, ``None`` if the lock is busy."""
        cache = self.cache
        try:
            if self.attachment is not None:
                lock = (
                    cache.lock(self.network, *self.attachment, timeout=self.timeout)
                    if wait
                    else cache.try_lock(self.network, *self.attachment)
                )
            elif wait:
                lock = cache.network_lock(self.network, self.exclusive, timeout=self.timeout)
            else:
                lock = cache.try_network_lock(self.network, self.exclusive)
        except LockTimeoutError as e:
            raise self.timed_out(e.details) from None
        return None if lock is None else lock.release

    def timed_out(self, details: str = "") -> LockTimeoutError:
        """The error of a wait for this lock that outlasted the operation's timeout."""
        if self.attachment is None:
            what = f"network {self.network!r}"
            path = self.cache.network_lock_path(self.network)
        else:
            cid, ifname = self.attachment
            what = f"attachment (network {self.network!r}, container {cid!r}, interface {ifname!r})"
            path = self.cache.attachment_lock_path(self.network, cid, ifname)
        limit = self.limit if self.limit is not None else self.timeout
        return lock_timeout(what, details or path, limit, self.command)


@attrs.frozen
class CacheIO:
    """Effect: ``call(*args)``, a cache method that may wait for the disk; the outcome is its
    value. The operation holds its locks until the call is over, even if cancelled meanwhile."""

    call: Callable[..., Any]
    args: tuple[Any, ...]


@attrs.frozen
class GCNetwork:
    """Effect: ``op``, the GC of the network ``net`` in a GC run, driven as an operation of
    its own (observers see one per network); the outcome is its value."""

    net: NetworkConfigList
    op: Generator[Any, Any, None]


Effect = RunPlugin | TakeLock | CacheIO | GCNetwork
Release = Callable[[], None]


def in_context(effect: RunPlugin, e: PluginError) -> None:
    """Give ``e`` the context of ``effect`` (idempotent: the observed drivers apply it early)."""
    e.plugin = effect.plugin
    e.command = effect.command
    e.network = e.network or effect.network
    e.container_id = e.container_id or effect.container_id
    if isinstance(e, PluginTimeoutError) and effect.limit is not None:
        e.msg = timeout_message(
            effect.command, effect.limit, f"plugin {effect.plugin} did not finish"
        )
