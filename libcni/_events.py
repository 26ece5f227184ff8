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
are merged into the environment the core built for the operation
(``request.operation_env``), for that one run; ``CNI_*`` variables are
libcni's and never replaced.

The drivers call observers, never the rules (``_ops``, the manager's ``_setup``...):

- ``CNIConfig``/``AsyncCNIConfig``: ``Watch.drive`` / ``Watch.adrive`` around
  one operation (its operation events, and a plugin event around each
  ``RunPlugin`` it performs);
- the network managers: ``Watch.scoped`` / ``Watch.ascoped`` around one
  operation, ``Watch.network`` / ``Watch.anetwork`` around each call of the
  manager's own ``CNIConfig`` that is a network's ADD, DEL, CHECK, GC or
  STATUS. That call emits no operation event of its own: the manager's scope
  (a context variable naming the ``CNIConfig`` and the id of the network
  event) tells it to emit plugin events only, under the network's id. A
  context variable follows the call into asyncio tasks; the blocking
  manager's parallel setup runs each call in a copy of its context.

With no observer, a driver keeps ``Watch`` out of the way (``_watch is None``).
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal, NamedTuple, TypeVar

import attrs

from . import _log as logging
from ._drive import adrive
from ._env import Environment
from ._ops import RunPlugin, in_context
from .errors import CNIError, PluginError, PluginTimeoutError
from .values import RuntimeConf

__all__ = ["Event", "Observer", "Watch"]

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
        if exception is None:
            return _new(Event, (*self[:1], "end", *self[2:9], duration, None, None))
        error = exception if isinstance(exception, CNIError) else None
        return _new(Event, (*self[:1], "end", *self[2:9], duration, error, exception))


#: ``_new(Event, fields)``: an event made from all its fields in order, at C speed.
_new = tuple.__new__


#: Anything that takes an :class:`Event`: told of every operation, network and plugin run.
Observer = Callable[[Event], None]
#: An observer's ``plugin_env``: the variables it adds to a plugin run (``None`` removes one).
PluginEnv = Callable[[Event], "Mapping[str, str | None] | None"]

_ids = itertools.count(1)  # next() is atomic: ids unique across threads

#: Inside a manager operation or network: (the manager's CNIConfig, the id of that run).
_SCOPE: ContextVar[tuple[object, int] | None] = ContextVar("libcni_observed_scope", default=None)

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


def _in_time(effect: RunPlugin, spent: float) -> RunPlugin:
    """``effect`` with the ``spent`` seconds its observers took off its time left.

    None left: :class:`~libcni.errors.PluginTimeoutError`, the plugin is not
    started (worded as ``_ops`` words it, by ``in_context``).
    """
    left = (effect.timeout or 0.0) - spent  # called with a timeout
    if left <= 0:
        raise PluginTimeoutError(f"plugin {effect.plugin} could not start: no time left")
    return attrs.evolve(effect, timeout=left) if spent > _SLOW else effect


def _less_time(kwargs: dict[str, Any], spent: float) -> dict[str, Any]:
    """``kwargs`` of a network's call with the ``spent`` seconds its observers took off its timeout."""
    timeout = kwargs.get("timeout")
    if timeout is None or spent <= _SLOW:
        return kwargs
    return {**kwargs, "timeout": max(0.0, timeout - spent)}


def _failed(observer: Observer, event: Event) -> None:
    """Log what an observer raised (called in its ``except`` clause)."""
    log.exception(
        "observer %r failed on the %s event of %s %s (id %d); ignored",
        observer,
        event.phase,
        event.kind,
        event.operation,
        event.id,
    )


class Watch:
    """The observers of one ``CNIConfig`` or manager, and the drivers' side of the events."""

    __slots__ = ("contributors", "observers")

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)
        hooks = (getattr(o, "plugin_env", None) for o in self.observers)
        self.contributors: tuple[PluginEnv, ...] = tuple(h for h in hooks if callable(h))

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

    # -- emitting --------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Tell every observer; one that raises is logged and the others are told all the same."""
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                _failed(observer, event)

    def _timed(self, start: Event, call: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
        """``call(*args, **kwargs)`` between ``start`` and its end event (less its ``timeout``)."""
        began = _clock()
        self.emit(start)
        t0 = _clock()
        kwargs = _less_time(kwargs, t0 - began)
        try:
            value = call(*args, **kwargs)
        except BaseException as e:
            self.emit(start.ended(_clock() - t0, e))
            raise
        self.emit(start.ended(_clock() - t0, None))
        return value

    async def _atimed(
        self, start: Event, call: Callable[..., Awaitable[_R]], *args: Any, **kwargs: Any
    ) -> _R:
        """``await call(*args, **kwargs)`` between ``start`` and its end event (less its ``timeout``)."""
        began = _clock()
        self.emit(start)
        t0 = _clock()
        kwargs = _less_time(kwargs, t0 - began)
        try:
            value = await call(*args, **kwargs)
        except BaseException as e:
            self.emit(start.ended(_clock() - t0, e))
            raise
        self.emit(start.ended(_clock() - t0, None))
        return value

    # -- plugin runs -----------------------------------------------------
    # The paths below run at every plugin run: written out, without helpers.

    def _with_env(self, effect: RunPlugin, start: Event) -> RunPlugin:
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

    def _plugin(self, perform: Callable[[Any], Any], parent: int, effect: RunPlugin) -> Any:
        """``perform(effect)`` between the plugin events of the run.

        At every plugin run: written out (the events made here, the loops of
        :meth:`emit` inline; the end event is the start's fields and the
        duration), as each call costs.
        """
        start = _new(
            Event,
            (
                "plugin",
                "start",
                next(_ids),
                effect.command,
                effect.network,
                effect.container_id,
                effect.env.get("CNI_IFNAME", ""),
                effect.plugin,
                parent,
                None,
                None,
                None,
            ),
        )
        began = _clock()
        for observer in self.observers:
            try:
                observer(start)
            except Exception:
                _failed(observer, start)
        t0 = _clock()
        try:
            if self.contributors:
                effect = self._with_env(effect, start)
            if effect.timeout is not None:  # the deadline, checked after the observers
                effect = _in_time(effect, _clock() - began)
            out = perform(effect)
        except BaseException as e:
            if isinstance(e, PluginError):
                in_context(effect, e)  # as the operation will raise it
            self.emit(start.ended(_clock() - t0, e))
            raise
        end = _new(Event, ("plugin", "end", *start[2:9], _clock() - t0, None, None))
        for observer in self.observers:
            try:
                observer(end)
            except Exception:
                _failed(observer, end)
        return out

    async def _aplugin(
        self, perform: Callable[[Any], Awaitable[Any]], parent: int, effect: Any
    ) -> Any:
        """:meth:`_plugin` for the async driver (the plugin's run is much longer than its events)."""
        if type(effect) is not RunPlugin:
            return await perform(effect)
        start = _new(
            Event,
            (
                "plugin",
                "start",
                next(_ids),
                effect.command,
                effect.network,
                effect.container_id,
                effect.env.get("CNI_IFNAME", ""),
                effect.plugin,
                parent,
                None,
                None,
                None,
            ),
        )
        began = _clock()
        self.emit(start)
        t0 = _clock()
        try:
            if self.contributors:
                effect = self._with_env(effect, start)
            if effect.timeout is not None:
                effect = _in_time(effect, _clock() - began)
            out = await perform(effect)
        except BaseException as e:
            if isinstance(e, PluginError):
                in_context(effect, e)
            self.emit(start.ended(_clock() - t0, e))
            raise
        self.emit(start.ended(_clock() - t0, None))
        return out

    # -- CNIConfig operations --------------------------------------------

    @staticmethod
    def _operation_start(operation: str, net: Any, rt: RuntimeConf | None, plugin: str) -> Event:
        return _new(
            Event,
            (
                "operation",
                "start",
                next(_ids),
                operation,
                "" if net is None else net.name,
                "" if rt is None else rt.container_id,
                "" if rt is None else rt.ifname,
                plugin,
                None,
                None,
                None,
                None,
            ),
        )

    def drive(
        self,
        op: Generator[Any, Any, _R],
        perform: Callable[[Any], Any],
        owner: object,
        operation: str,
        net: Any = None,
        rt: RuntimeConf | None = None,
        plugin: str = "",
        *,
        network: bool = False,
    ) -> _R:
        """Drive one operation of ``owner`` (a ``CNIConfig``) between its events.

        Inside a network of the manager that owns it: the plugin events only,
        under that network. ``network``: one network of a call that covers
        several (``gc_networks``): inside a manager operation, a network event.
        """
        scope = _SCOPE.get()
        if scope is not None and scope[0] is owner:
            if network:
                start = self._network_start(owner, operation, (net,))
                value: _R = self._timed(start, self._loop, op, perform, start[2])
                return value
            return self._loop(op, perform, scope[1])
        start = self._operation_start(operation, net, rt, plugin)
        observers = self.observers
        for observer in observers:
            try:
                observer(start)
            except Exception:
                _failed(observer, start)
        t0 = _clock()
        try:
            value = self._loop(op, perform, start[2])
        except BaseException as e:
            self.emit(start.ended(_clock() - t0, e))
            raise
        end = _new(Event, (*start[:1], "end", *start[2:9], _clock() - t0, None, None))
        for observer in observers:
            try:
                observer(end)
            except Exception:
                _failed(observer, end)
        return value

    def _loop(self, op: Generator[Any, Any, _R], perform: Callable[[Any], Any], parent: int) -> _R:
        """``_drive.drive(op, perform)``, each ``RunPlugin`` performed by :meth:`_plugin`.

        The loop of ``drive`` written again rather than wrapping ``perform``:
        the other effects then cost nothing more than without observers.
        """
        outcome: Any = None
        error: BaseException | None = None
        plugin = self._plugin
        while True:
            try:
                effect = op.send(outcome) if error is None else op.throw(error)
            except StopIteration as stop:
                value: _R = stop.value
                return value
            outcome, error = None, None
            try:
                if type(effect) is RunPlugin:
                    outcome = plugin(perform, parent, effect)
                else:
                    outcome = perform(effect)
            except BaseException as e:  # handed to the operation, which may handle it
                error = e

    async def adrive(
        self,
        op: Generator[Any, Any, _R],
        perform: Callable[[Any], Awaitable[Any]],
        owner: object,
        operation: str,
        net: Any = None,
        rt: RuntimeConf | None = None,
        plugin: str = "",
        *,
        network: bool = False,
    ) -> _R:
        """:meth:`drive` for ``AsyncCNIConfig``."""
        scope = _SCOPE.get()
        if scope is not None and scope[0] is owner:
            if network:
                start = self._network_start(owner, operation, (net,))
                each = functools.partial(self._aplugin, perform, start[2])
                return await self._atimed(start, adrive, op, each)
            return await adrive(op, functools.partial(self._aplugin, perform, scope[1]))
        start = self._operation_start(operation, net, rt, plugin)
        self.emit(start)
        t0 = _clock()
        try:
            value = await adrive(op, functools.partial(self._aplugin, perform, start[2]))
        except BaseException as e:
            self.emit(start.ended(_clock() - t0, e))
            raise
        self.emit(start.ended(_clock() - t0, None))
        return value

    # -- the managers ----------------------------------------------------

    def scoped(
        self, call: Callable[[Any], _R], op: Any, owner: object, operation: str, container_id: str
    ) -> _R:
        """``call(op)``, one manager operation, between its events; ``owner``: the manager's ``CNIConfig``."""
        start = Event("operation", "start", next(_ids), operation, "", container_id)
        token = _SCOPE.set((owner, start.id))
        try:
            return self._timed(start, call, op)
        finally:
            _SCOPE.reset(token)

    async def ascoped(
        self,
        call: Callable[[Any], Awaitable[_R]],
        op: Any,
        owner: object,
        operation: str,
        container_id: str,
    ) -> _R:
        """:meth:`scoped` for ``AsyncNetworkManager``."""
        start = Event("operation", "start", next(_ids), operation, "", container_id)
        token = _SCOPE.set((owner, start.id))
        try:
            return await self._atimed(start, call, op)
        finally:
            _SCOPE.reset(token)

    @staticmethod
    def _network_start(owner: object, operation: str, args: Sequence[Any]) -> Event:
        scope = _SCOPE.get()
        net = args[0] if args else None
        rt = args[1] if len(args) > 1 and isinstance(args[1], RuntimeConf) else None
        return Event(
            "network",
            "start",
            next(_ids),
            operation,
            getattr(net, "name", ""),
            "" if rt is None else rt.container_id,
            "" if rt is None else rt.ifname,
            "",
            scope[1] if scope is not None and scope[0] is owner else None,
        )

    def network(
        self,
        call: Callable[..., _R],
        owner: object,
        operation: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> _R:
        """``call(*args, **kwargs)``, a network's ``operation`` in a manager operation, between its events.

        ``args`` are those of the ``CNIConfig`` method: the network list,
        then the ``RuntimeConf`` if there is one.
        """
        start = self._network_start(owner, operation, args)
        token = _SCOPE.set((owner, start.id))
        try:
            return self._timed(start, call, *args, **kwargs)
        finally:
            _SCOPE.reset(token)

    async def anetwork(
        self,
        call: Callable[..., Awaitable[_R]],
        owner: object,
        operation: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> _R:
        """:meth:`network` for ``AsyncNetworkManager``."""
        start = self._network_start(owner, operation, args)
        token = _SCOPE.set((owner, start.id))
        try:
            return await self._atimed(start, call, *args, **kwargs)
        finally:
            _SCOPE.reset(token)
