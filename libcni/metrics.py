"""Prometheus metrics of CNI operations and plugin runs (``pip install libcni[prometheus]``).

:class:`PrometheusObserver` is an observer (see :class:`~libcni.Event`) that keeps the
metrics containerd exports for its CNI calls, under the same names, plus one
histogram of plugin runs::

    import prometheus_client
    from libcni.metrics import PrometheusObserver

    manager = libcni.NetworkManager(observers=[PrometheusObserver()])
    prometheus_client.start_http_server(9100)

This module imports ``prometheus_client``; ``import libcni`` does not import it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from ._events import Event

__all__ = ["DEFAULT_BUCKETS", "OPERATION_TYPES", "PrometheusObserver"]

#: The ``operation_type`` label of each operation. The manager's are
#: containerd's (``set_up_pod``, ``tear_down_pod``, ``get_pod_network_status``
#: for check); ``gc`` and ``status`` have no containerd counterpart. The
#: operations of ``CNIConfig``/``AsyncCNIConfig`` are the CNI commands in lower
#: case (``add``, ``check``, ``del``, ``gc``, ``status``, ``version``,
#: ``validate``).
OPERATION_TYPES: Mapping[str, str] = {
    "setup": "set_up_pod",
    "teardown": "tear_down_pod",
    "check": "get_pod_network_status",
    "gc": "garbage_collect",
    "status": "get_network_status",
}

#: Histogram buckets, in seconds: a plugin run takes milliseconds, a setup with
#: real plugins tens to hundreds, a stuck one up to its timeout.
DEFAULT_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
DEFAULT_BUCKETS += (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class PrometheusObserver:
    """An observer that counts and times operations and plugin runs in Prometheus metrics.

    Registered in ``registry`` (default: ``prometheus_client.REGISTRY``),
    named ``<namespace>_...``; one observer per registry and namespace (a
    second one there is refused by ``prometheus_client`` as a duplicate):

    ``<namespace>_network_plugin_operations_total{operation_type}``
        operations that ended (counter);
    ``<namespace>_network_plugin_operations_errors_total{operation_type}``
        operations that ended with an error (counter);
    ``<namespace>_network_plugin_operations_duration_seconds{operation_type}``
        how long operations took (histogram);
    ``<namespace>_plugin_exec_duration_seconds{plugin,command}``
        how long each plugin run took, by plugin type and CNI command (histogram);
    ``<namespace>_plugin_exec_errors_total{plugin,command}``
        plugin runs that failed (counter).

    ``operation_type`` is given by :data:`OPERATION_TYPES`. The networks of a
    manager operation are not counted on their own: their plugin runs are.
    Safe to share between threads and between several ``CNIConfig`` and
    managers.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        namespace: str = "libcni",
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        reg = REGISTRY if registry is None else registry
        self.namespace = namespace
        counter = functools.partial(Counter, namespace=namespace, registry=reg)
        histogram = functools.partial(Histogram, namespace=namespace, registry=reg, buckets=buckets)
        ops, runs = ["operation_type"], ["plugin", "command"]
        self.operations = counter(
            "network_plugin_operations_total",
            "Cumulative number of network plugin operations by operation type",
            ops,
        )
        self.errors = counter(
            "network_plugin_operations_errors_total",
            "Cumulative number of network plugin operations that failed, by operation type",
            ops,
        )
        self.duration = histogram(
            "network_plugin_operations_duration_seconds",
            "Latency in seconds of network plugin operations, by operation type",
            ops,
        )
        self.plugin_duration = histogram(
            "plugin_exec_duration_seconds",
            "Latency in seconds of each CNI plugin run, by plugin type and command",
            runs,
        )
        self.plugin_errors = counter(
            "plugin_exec_errors_total",
            "Cumulative number of CNI plugin runs that failed, by plugin type and command",
            runs,
        )
        # The labelled children, looked up once per label set.
        self._children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def _child(self, metric: Any, which: str, *labels: str) -> Any:
        key = (which, *labels)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.setdefault(key, metric.labels(*labels))
        return child

    def __call__(self, event: Event) -> None:
        """Record one end event (start events and network events change nothing)."""
        if event.phase != "end" or event.duration is None:
            return
        if event.kind == "operation":
            op = OPERATION_TYPES.get(event.operation) or event.operation.lower()
            self._child(self.operations, "o", op).inc()
            self._child(self.duration, "d", op).observe(event.duration)
            if not event.ok:
                self._child(self.errors, "e", op).inc()
        elif event.kind == "plugin":
            labels = (event.plugin, event.operation)
            self._child(self.plugin_duration, "pd", *labels).observe(event.duration)
            if not event.ok:
                self._child(self.plugin_errors, "pe", *labels).inc()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r})"
