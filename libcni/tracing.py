"""OpenTelemetry spans of CNI operations, passed on to the plugins (``pip install libcni[otel]``).

:class:`OpenTelemetryObserver` is an observer (see :class:`~libcni.Event`) that makes a
span of every operation, of every network of a manager operation and of every
plugin run, each a child of the one it is part of, the operation a child of
the caller's current span::

    CNI setup                          cni.operation=setup cni.container_id=...
      CNI ADD network cni-loopback     cni.network=cni-loopback cni.ifname=lo
        CNI ADD plugin loopback        cni.plugin=loopback cni.command=ADD
      CNI ADD network mynet            cni.network=mynet cni.ifname=eth0
        CNI ADD plugin bridge          cni.plugin=bridge cni.command=ADD
        CNI ADD plugin portmap         ...

Each plugin gets the W3C trace context of its own span in ``TRACEPARENT``
(and ``TRACESTATE``), as Go libcni passes it. This module imports ``opentelemetry-api``; ``import libcni`` does not import it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import __version__
from ._events import Event

__all__ = ["OpenTelemetryObserver"]

_PROPAGATOR = TraceContextTextMapPropagator()

# W3C Trace Context: what a plugin may be given (level 1, version 00).
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_MEMBER = re.compile(
    r"(?:[a-z][a-z0-9_*/-]{0,255}|[a-z0-9][a-z0-9_*/-]{0,240}@[a-z][a-z0-9_*/-]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)


def _valid_tracestate(header: str) -> bool:
    """Whether ``header`` is a W3C ``tracestate``: at most 32 list members, each ``key=value``."""
    members = [m.strip(" \t") for m in header.split(",")]
    return len(members) <= 32 and all(_MEMBER.fullmatch(m) for m in members)


def _name(event: Event) -> str:
    if event.kind == "plugin":
        return f"CNI {event.operation} plugin {event.plugin}"
    if event.kind == "network":
        return f"CNI {event.operation} network {event.network}"
    return f"CNI {event.operation}"


def _attributes(event: Event) -> dict[str, str]:
    attributes = {"cni.operation": event.operation}
    if event.kind == "plugin":
        attributes["cni.command"] = event.operation
    about = {"cni.container_id": event.container_id, "cni.network": event.network}
    about |= {"cni.ifname": event.ifname, "cni.plugin": event.plugin}
    return attributes | {key: value for key, value in about.items() if value}


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is asyncio's cancellation (asyncio is not imported for this)."""
    aio = sys.modules.get("asyncio")
    return aio is not None and isinstance(exc, aio.CancelledError)


class OpenTelemetryObserver:
    """An observer that traces operations, networks and plugin runs, and passes the trace on.

    ``tracer_provider``: where the spans go (default: the global one,
    ``opentelemetry.trace.get_tracer_provider()``; one installed after the
    observer is made is used too). The tracer is named ``libcni``.

    Span names: ``CNI <operation>`` (``CNI setup``, ``CNI ADD``...), ``CNI
    <operation> network <network>``, ``CNI <command> plugin <type>``.
    Attributes: ``cni.operation``; ``cni.container_id``, ``cni.network``,
    ``cni.ifname``, ``cni.plugin`` (those that apply); ``cni.command`` on
    plugin runs. A run that fails has the status ``ERROR`` (description
    ``CNI error <code>: <message>``), the attributes ``cni.error_code`` (for a
    CNI error) and ``error.type`` (the exception's class), and the exception
    recorded.

    Every plugin run whose span context is valid receives it as ``TRACEPARENT``
    and ``TRACESTATE`` (an inherited ``TRACESTATE`` is removed; one that is not
    valid W3C Trace Context is left out). With no valid span context nothing is
    added.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("libcni", __version__, tracer_provider=tracer_provider)
        # The spans of runs that have started and not ended, by event id.
        self._spans: dict[int, Span] = {}

    def __call__(self, event: Event) -> None:
        """Start the span of a start event; end the span of an end event."""
        if event.phase == "start":
            parent = None if event.parent is None else self._spans.get(event.parent)
            # No parent (an operation): the caller's current span, read in its thread or task.
            context = None if parent is None else trace.set_span_in_context(parent)
            self._spans[event.id] = self._tracer.start_span(
                _name(event), context=context, kind=SpanKind.INTERNAL, attributes=_attributes(event)
            )
            return
        span = self._spans.pop(event.id, None)
        if span is None:
            return
        exc = event.exception
        if exc is not None:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__qualname__)
            if event.error is not None:
                span.set_attribute("cni.error_code", event.error.code)
                description = f"CNI error {event.error.code}: {event.error}"
            elif _cancelled(exc):
                description = "cancelled"
            else:
                description = f"{type(exc).__name__}: {exc}"
            span.set_status(Status(StatusCode.ERROR, description))
        span.end()

    def plugin_env(self, event: Event) -> Mapping[str, str | None] | None:
        """The trace context of a plugin run's span: ``TRACEPARENT`` and ``TRACESTATE``."""
        span = self._spans.get(event.id)
        if span is None or not span.get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
        traceparent, tracestate = carrier.get("traceparent", ""), carrier.get("tracestate")
        if not _TRACEPARENT.fullmatch(traceparent):
            return None
        if tracestate and not _valid_tracestate(tracestate):
            tracestate = None  # left out, the TRACEPARENT still passed
        return {"TRACEPARENT": traceparent, "TRACESTATE": tracestate or None}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
