"""What the library tells observers: :class:`Event`, and how the drivers emit it.

An *observer* is any callable taking an :class:`Event` (``observers=`` of
``CNIConfig``, ``AsyncCNIConfig``, ``NetworkManager``, ``AsyncNetworkManager``).
It is told when each operation, each network of a manager operation and each
plugin run starts and ends. An observer that raises is logged on the
``libcni`` logger and changes nothing.

An observer may also contribute environment variables to each plugin run (the
W3C trace context of :class:`libcni.tracing.OpenTelemetryObserver`): a method
``plugin_env(event)``, called with the start event of the run, returning a
mapping (a value of ``None`` removes the variable) or ``None``. The entries
are merged into the environment the core built for the operation (the
``env`` of its ``RunPlugin``), for that one run; ``CNI_*`` variables are
libcni's and never replaced.

Observers wrap the performer of effects, never the rules nor the driver loop
(``_drive.drive``/``adrive`` stay the only loops): a driver with a
:class:`Watch` runs the operation in a :class:`Span` (its events) with the
performer :meth:`Watch.observed` (or :meth:`Watch.aobserved`) gives, which
puts each ``RunPlugin`` between the events of a plugin run. The parent of an
event is passed explicitly: a :class:`Watch` made :meth:`~Watch.under` an
event files its events under it. The network manager runs each operation in a
span and hands its calls a watch under it; each network's call
(:meth:`Watch.network`) runs in a span of its own, with a view of the
manager's ``CNIConfig`` watched under that network, whose operation then emits
plugin events only.

With no observer, a driver keeps ``Watch`` out of the way (``_watch is None``).
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

    Immutable. A named tuple rather than an attrs class, as the library's
    other values are: two are made at every plugin run, and a tuple is made
    ten times faster (``_replace`` gives a changed copy).
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
    """One run between its start and end events: ``with span as id:`` (sync and async code).

    Entering tells the observers the start event and gives its ``id``;
    leaving tells them the end event, with the duration (from after the start
    event) and what ended the run.
    """

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
    """The observers of one ``CNIConfig`` or manager, and the drivers' side of the events.

    ``parent``: the id of the event its events belong to (``None``: they are
    operations); :meth:`under` gives the watch of another.
    """

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
        """Around an operation of a ``CNIConfig``: its span, entered as the id of its plugin
        runs' parent. Under a manager operation's network, no event of its own: the plugin
        runs belong to that network; ``network`` (one network of ``gc_networks``): under a
        manager operation, the span of a network."""
        if self.parent is None:
            return self.span("operation", operation, net, rt, plugin=plugin)
        if network:
            return self.span("network", operation, net, rt)
        return nullcontext(self.parent)

    # -- the performers of effects ----------------------------------------

    def observed(self, perform: Callable[[Any], _R], parent: int) -> Callable[[Any], _R]:
        """``perform``, each ``RunPlugin`` between the events of a plugin run under ``parent``."""

        def perform_observed(effect: Any) -> _R:
            if type(effect) is not RunPlugin:
                return perform(effect)
            began = _clock()
            start = self._started(effect, parent)
            t0 = _clock()
            try:
                if self.contributors or effect.timeout is not None:
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
            began = _clock()
            start = self._started(effect, parent)
            t0 = _clock()
            try:
                if self.contributors or effect.timeout is not None:
                    effect = self._prepared(effect, start, began)
                out = await perform(effect)
            except BaseException as e:
                self._failed(effect, start, _clock() - t0, e)
                raise
            self.emit(start._replace(phase="end", duration=_clock() - t0))
            return out

        return perform_observed

    def _started(self, effect: RunPlugin, parent: int) -> Event:
        """The start event of a plugin run under ``parent``, told."""
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
        return start

    def _prepared(self, effect: RunPlugin, start: Event, began: float) -> RunPlugin:
        """``effect`` with what the observers add to its environment, and the time they took
        since ``began`` (its start event, its environment) off its time left.

        None left: :class:`~libcni.errors.PluginTimeoutError`, the plugin is
        not started (worded as ``_ops`` words it, by ``in_context``).
        """
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
        """Tell the end event of a run that ``e`` ended (a ``PluginError`` in context first,
        as the operation will raise it)."""
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
        env = dict(effect.env)
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return attrs.evolve(effect, env=Environment(env))

    # -- the network manager ------------------------------------------------

    def network(
        self,
        cni: _W,
        operation: str,
        net: Any,
        rt: RuntimeConf | None,
        timeout: float | None,
        call: Callable[[_W, float | None], _R],
    ) -> _R:
        """``call(view, timeout)``, a network's ``operation`` in a manager operation, between
        the events of the network: ``view`` is ``cni`` watched under the network (its
        operation emits plugin events only), ``timeout`` less the observers' time (§13).

        ``call`` may return an awaitable (``AsyncCNIConfig``): :meth:`anetwork`.
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
        """``cni`` watched by this watch, its events under this watch's parent (shared state
        and all: a shallow copy)."""
        view = copy.copy(cni)
        view._watch = self
        return view
