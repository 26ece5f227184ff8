"""What the library tells observers: :class:`Event`, and how the drivers emit it.

An *observer* is any callable taking an :class:`Event`; one that raises is
logged on the ``libcni`` logger and changes nothing. An observer may also have
a method ``plugin_env(event)`` (called with the start event of a plugin run)
returning variables to add to that run's environment (``None`` removes one;
``CNI_*`` variables are never replaced). The drivers run each operation in a
:class:`Span` and each plugin run through :meth:`Watch.observed`.
"""

from __future__ import annotations

import copy
import itertools
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import attrs

from . import _log as logging
from ._effects import RunPlugin, in_context
from ._env import Environment
from .errors import CNIError, PluginError, PluginTimeoutError
from .values import RuntimeConf

__all__ = ["Event", "Observer", "Span", "Watch"]

log = logging.getLogger("libcni")

_R = TypeVar("_R")


class Event(NamedTuple):
    """One thing that started or ended: an operation, a network of a manager operation, a plugin run.

    ``kind``: ``"operation"`` (``CNIConfig``'s ``ADD``, ``CHECK``, ``DEL``,
    ``GC``, ``STATUS``, ``VERSION``, ``VALIDATE``; the manager's ``setup``,
    ``teardown``, ``check``, ``gc``, ``status``), ``"network"`` (one network
    of a manager operation: its ``ADD``, ``DEL``, ``CHECK``, ``GC`` or
    ``STATUS``) or ``"plugin"`` (one plugin run; ``operation`` is the CNI
    command it was given).

    ``phase``: ``"start"`` or ``"end"``. The start and the end of one run
    share ``id`` (unique in the process), and the end repeats what the start
    said. ``parent`` is the ``id`` of the run this one is part of (a plugin
    run's operation or network, a network's operation), ``None`` for an
    operation.

    ``network``, ``container_id``, ``ifname``: what the run concerns (empty
    when it concerns none: GC and STATUS have no container, VERSION no
    network); ``plugin``: the plugin type (plugin runs, and VERSION).

    End events only: ``duration`` (seconds), ``error`` (the
    :class:`~libcni.errors.CNIError` that ended the run, with its ``code``)
    and ``exception`` (whatever ended it: the same error, or another
    exception, such as :class:`asyncio.CancelledError` or a ``ValueError``
    for a bad argument). Both are ``None`` when the run succeeded (:attr:`ok`).

    Immutable: a named tuple, faster to make than an attrs class.
    """

    kind: Literal["operation", "network", "plugin"]
    phase: Literal["start", "end"]
    id: int
    operation: str
    network: str = ""
    container_id: str = ""
    ifname: str = ""
    plugin: str = ""
    parent: int | None = None
    duration: float | None = None
    error: CNIError | None = None
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Whether the run succeeded (an end event without an exception); ``True`` for a start."""
        return self.exception is None

    def ended(self, duration: float, exception: BaseException | None) -> Event:
        """The end event of this start event."""
        error = exception if isinstance(exception, CNIError) else None
        return self._replace(phase="end", duration=duration, error=error, exception=exception)


#: Anything that takes an :class:`Event`: told of every operation, network and plugin run.
Observer = Callable[[Event], None]
#: An observer's ``plugin_env``: the variables it adds to a plugin run (``None`` removes one).
PluginEnv = Callable[[Event], "Mapping[str, str | None] | None"]

_ids = itertools.count(1)  # next() is atomic: ids unique across threads

_clock = time.perf_counter

#: The longest ``KEY=VALUE`` exec takes, its NUL included (Linux's MAX_ARG_STRLEN: 32 pages).
_ENTRY_MAX = 32 * os.sysconf("SC_PAGE_SIZE")
#: Observers that held a run up longer than this (seconds) have their time taken from its limit.
_SLOW = 0.001


def _valid_entry(key: object, value: object) -> bool:
    """Whether an observer's environment entry can be passed to a plugin (and is not libcni's).

    Not a ``CNI_`` name, nor one with ``=``; no NUL; encodable and short
    enough for exec (beyond, exec fails with ``E2BIG``).
    """
    if not isinstance(key, str) or not key or "=" in key or key.startswith("CNI_"):
        return False
    if value is not None and not isinstance(value, str):
        return False
    text = key if value is None else f"{key}={value}"
    try:
        return "\0" not in text and len(os.fsencode(text)) < _ENTRY_MAX
    except UnicodeError:
        return False


class _Watched(Protocol):
    """What :meth:`Watch.network` views: a ``CNIConfig`` or ``AsyncCNIConfig``."""

    _watch: Watch | None


_W = TypeVar("_W", bound=_Watched)


class Span:
    """One run between its start and end events: ``with span as id:`` (sync and async code)."""

    __slots__ = ("began", "start", "started", "watch")

    def __init__(self, watch: Watch, start: Event) -> None:
        self.watch = watch
        self.start = start
        self.began = self.started = 0.0  # before, and after, the start event was told

    def __enter__(self) -> int:
        start = self.start
        self.began = _clock()
        self.watch.emit(start)
        self.started = _clock()
        return start.id

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        duration = _clock() - self.started
        if e is None:
            self.watch.emit(self.start._replace(phase="end", duration=duration))
        else:
            self.watch.emit(self.start.ended(duration, e))

    def less(self, timeout: float | None) -> float | None:
        """``timeout`` less the time the observers took with the start event (§13)."""
        spent = self.started - self.began
        if timeout is None or spent <= _SLOW:
            return timeout
        return max(0.0, timeout - spent)


class Watch:
    """The observers of one ``CNIConfig`` or manager; its events filed under ``parent``."""

    __slots__ = ("contributors", "observers", "parent")

    def __init__(
        self,
        observers: Sequence[Observer],
        contributors: Sequence[PluginEnv] | None = None,
        parent: int | None = None,
    ) -> None:
        self.observers = tuple(observers)
        if contributors is None:
            hooks = (getattr(o, "plugin_env", None) for o in self.observers)
            contributors = [h for h in hooks if callable(h)]
        self.contributors: tuple[PluginEnv, ...] = tuple(contributors)
        self.parent = parent

    @classmethod
    def of(cls, observers: Sequence[Observer] | Observer) -> Watch | None:
        """The watch of ``observers`` (a sequence of callables, or one); ``None`` if there are none."""
        if callable(observers):
            observers = (observers,)
        try:
            listed = tuple(observers)
        except TypeError:
            raise TypeError(
                f"observers must be a sequence of callables, not {type(observers).__name__}"
            ) from None
        for o in listed:
            if not callable(o):
                raise TypeError(f"an observer must be callable (it is given each Event), not {o!r}")
        return cls(listed) if listed else None

    def under(self, parent: int) -> Watch:
        """The same observers, the events filed under the event ``parent``."""
        return Watch(self.observers, self.contributors, parent)

    def emit(self, event: Event) -> None:
        """Tell every observer; one that raises is logged and the others are told all the same."""
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                log.exception(
                    "observer %r failed on the %s event of %s %s (id %d); ignored",
                    observer,
                    event.phase,
                    event.kind,
                    event.operation,
                    event.id,
                )

    def span(
        self,
        kind: Literal["operation", "network"],
        operation: str,
        net: Any = None,
        rt: RuntimeConf | None = None,
        *,
        container_id: str = "",
        plugin: str = "",
    ) -> Span:
        """The span of an operation or a network (on ``net``, ``rt``), under this watch's parent."""
        start = Event(
            kind=kind,
            phase="start",
            id=next(_ids),
            operation=operation,
            network="" if net is None else net.name,
            container_id=container_id if rt is None else rt.container_id,
            ifname="" if rt is None else rt.ifname,
            plugin=plugin,
            parent=self.parent,
        )
        return Span(self, start)

    def operation(
        self,
        operation: str,
        net: Any = None,
        rt: RuntimeConf | None = None,
        plugin: str = "",
        *,
        network: bool = False,
    ) -> AbstractContextManager[int]:
        """Around an operation of a ``CNIConfig``: its span, entered as its plugin runs' parent.

        Under a manager's network, no event of its own; ``network`` (one network of
        ``gc_networks``): the span of a network."""
        if self.parent is None:
            return self.span("operation", operation, net, rt, plugin=plugin)
        if network:
            return self.span("network", operation, net, rt)
        return nullcontext(self.parent)

    def observed(self, perform: Callable[[Any], _R], parent: int) -> Callable[[Any], _R]:
        """``perform``, each ``RunPlugin`` between the events of a plugin run under ``parent``."""

        def perform_observed(effect: Any) -> _R:
            if type(effect) is not RunPlugin:
                return perform(effect)
            start, began, t0 = self._started(effect, parent)
            try:
                effect = self._prepared(effect, start, began)
                out = perform(effect)
            except BaseException as e:
                self._failed(effect, start, _clock() - t0, e)
                raise
            self.emit(start._replace(phase="end", duration=_clock() - t0))
            return out

        return perform_observed

    def aobserved(
        self, perform: Callable[[Any], Awaitable[_R]], parent: int
    ) -> Callable[[Any], Awaitable[_R]]:
        """:meth:`observed` for an async performer."""

        async def perform_observed(effect: Any) -> _R:
            if type(effect) is not RunPlugin:
                return await perform(effect)
            start, began, t0 = self._started(effect, parent)
            try:
                effect = self._prepared(effect, start, began)
                out = await perform(effect)
            except BaseException as e:
                self._failed(effect, start, _clock() - t0, e)
                raise
            self.emit(start._replace(phase="end", duration=_clock() - t0))
            return out

        return perform_observed

    def _started(self, effect: RunPlugin, parent: int) -> tuple[Event, float, float]:
        """The start event of a plugin run under ``parent``, told; the clock before and after."""
        began = _clock()
        start = Event(
            kind="plugin",
            phase="start",
            id=next(_ids),
            operation=effect.command,
            network=effect.network,
            container_id=effect.container_id,
            ifname=effect.env.get("CNI_IFNAME", ""),
            plugin=effect.plugin,
            parent=parent,
        )
        self.emit(start)
        return start, began, _clock()

    def _prepared(self, effect: RunPlugin, start: Event, began: float) -> RunPlugin:
        """``effect`` with the observers' environment, and the time they took since ``began``
        off its time left (none left: :class:`~libcni.errors.PluginTimeoutError`)."""
        if self.contributors:
            effect = self.with_env(effect, start)
        if effect.timeout is None:
            return effect
        spent = _clock() - began
        left = effect.timeout - spent
        if left <= 0:
            raise PluginTimeoutError(f"plugin {effect.plugin} could not start: no time left")
        return attrs.evolve(effect, timeout=left) if spent > _SLOW else effect

    def _failed(self, effect: RunPlugin, start: Event, duration: float, e: BaseException) -> None:
        """Tell the end event of a run that ``e`` ended (a ``PluginError`` put in context first)."""
        if isinstance(e, PluginError):
            in_context(effect, e)
        self.emit(start.ended(duration, e))

    def with_env(self, effect: RunPlugin, start: Event) -> RunPlugin:
        """``effect`` with what the observers add to its environment (itself if nothing)."""
        extra: dict[str, str | None] = {}
        for contribute in self.contributors:
            try:
                got = dict(contribute(start) or {})
            except Exception:
                log.exception(
                    "observer %r failed to give the environment of a plugin run; ignored",
                    contribute,
                )
                continue
            for key, value in got.items():
                if _valid_entry(key, value):
                    extra[key] = value
                else:
                    log.warning(
                        "observer %r gave an environment entry that cannot be passed to a plugin"
                        " (a CNI_* name, '=' in a name, a NUL, or too large for exec): %.80r=%.80r; ignored",
                        contribute,
                        key,
                        value,
                    )
        if not extra:
            return effect
        env = {k: v for k, v in {**effect.env, **extra}.items() if v is not None}
        return attrs.evolve(effect, env=Environment(env))

    def network(
        self,
        cni: _W,
        operation: str,
        net: Any,
        rt: RuntimeConf | None,
        timeout: float | None,
        call: Callable[[_W, float | None], _R],
    ) -> _R:
        """``call(view, timeout)`` between the events of a network of a manager operation.

        ``view`` is ``cni`` watched under the network, ``timeout`` less the observers' time (§13).
        """
        span = self.span("network", operation, net, rt)
        with span as parent:
            return call(self.under(parent).view(cni), span.less(timeout))

    async def anetwork(
        self,
        cni: _W,
        operation: str,
        net: Any,
        rt: RuntimeConf | None,
        timeout: float | None,
        call: Callable[[_W, float | None], Awaitable[_R]],
    ) -> _R:
        """:meth:`network` for ``AsyncCNIConfig``: the events around the awaited call."""
        span = self.span("network", operation, net, rt)
        with span as parent:
            return await call(self.under(parent).view(cni), span.less(timeout))

    def view(self, cni: _W) -> _W:
        """``cni`` watched by this watch (a shallow copy)."""
        view = copy.copy(cni)
        view._watch = self
        return view
