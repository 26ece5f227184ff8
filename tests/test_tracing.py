"""``libcni.tracing.OpenTelemetryObserver`` (behaviour.md §13) with the OpenTelemetry SDK.

The spans go to an in-memory exporter; the trace context each plugin got is
what the test plugin (``tests/plugins/testplugin``) recorded of its own
environment (``TRACEPARENT``, ``TRACESTATE``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import harness
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import (
    NonRecordingSpan,
    NoOpTracerProvider,
    SpanContext,
    StatusCode,
    TraceFlags,
    TraceState,
)

from libcni import PluginError, SetupError
from libcni.tracing import OpenTelemetryObserver


class Env(harness.ManagerEnv):
    """The test plugin as ``testplugin``, ``loopback``, ``p1``, ``p2``; networks ``a`` and ``b``;
    no trace context of the test's own process in ``os.environ``."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, ("testplugin", "loopback", "p1", "p2"))
        self.write("10-a.conflist", "a", {"type": "testplugin", "record": str(self.record)})
        self.write("20-b.conflist", "b", {"type": "testplugin", "record": str(self.record)})

    def wire(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().wire(monkeypatch)
        monkeypatch.delenv("TRACEPARENT", raising=False)
        monkeypatch.delenv("TRACESTATE", raising=False)

    def runs(self) -> list[dict[str, Any]]:
        """Every plugin run recorded, VERSION probes included."""
        return [r for r in self.records() if "command" in r]


pytestmark = pytest.mark.env(cls=Env)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    yield p
    p.shutdown()


def context_of(span: ReadableSpan) -> SpanContext:
    """The span's own context (typed ``Optional`` by the SDK; always set on a recorded span)."""
    ctx: SpanContext | None = span.get_span_context()
    assert ctx is not None
    return ctx


def traceparent(span: ReadableSpan | SpanContext) -> str:
    ctx = span if isinstance(span, SpanContext) else context_of(span)
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def check_runs_got_their_own_span(env: Env, spans: Sequence[ReadableSpan]) -> None:
    """Each plugin run recorded the trace context of its own plugin span, and only it."""
    plugin_spans = [s for s in spans if " plugin " in s.name]
    runs = env.runs()
    assert len(runs) == len(plugin_spans) > 0
    assert sorted(r["trace"]["TRACEPARENT"] for r in runs) == sorted(
        traceparent(s) for s in plugin_spans
    )
    for r in runs:
        (span,) = [s for s in plugin_spans if traceparent(s) == r["trace"]["TRACEPARENT"]]
        assert span.attributes is not None
        assert span.attributes["cni.command"] == r["command"]
        assert span.attributes["cni.network"] == r["stdin"]["name"]
        assert span.attributes["cni.ifname"] == r["env"]["CNI_IFNAME"]


def test_setup_spans_operation_network_plugin_under_the_callers_span(
    env: Env, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    m = env.manager(observers=[OpenTelemetryObserver(provider)])
    with provider.get_tracer("runtime").start_as_current_span("RunPodSandbox") as caller:
        m.setup("c1", "/var/run/netns/c1")
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert names == [
        "CNI ADD plugin loopback",
        "CNI ADD network cni-loopback",
        "CNI ADD plugin testplugin",
        "CNI ADD network a",
        "CNI ADD plugin testplugin",
        "CNI ADD network b",
        "CNI setup",
        "RunPodSandbox",
    ]
    setup = spans[6]
    assert parent_of(setup) == caller.get_span_context().span_id
    assert {context_of(s).trace_id for s in spans if s.context} == {
        caller.get_span_context().trace_id
    }
    assert setup.attributes == {"cni.operation": "setup", "cni.container_id": "c1"}
    for net, run in ((spans[1], spans[0]), (spans[3], spans[2]), (spans[5], spans[4])):
        assert parent_of(net) == context_of(setup).span_id
        assert parent_of(run) == context_of(net).span_id
    assert spans[3].attributes == {
        "cni.operation": "ADD",
        "cni.container_id": "c1",
        "cni.network": "a",
        "cni.ifname": "eth0",
    }
    assert spans[2].attributes == {
        "cni.operation": "ADD",
        "cni.command": "ADD",
        "cni.container_id": "c1",
        "cni.network": "a",
        "cni.ifname": "eth0",
        "cni.plugin": "testplugin",
    }
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    check_runs_got_their_own_span(env, spans)
    # Every run was sampled: the flags say so (bit 0; the SDK may set its "random" bit too).
    assert {int(r["trace"]["TRACEPARENT"][-2:], 16) & 1 for r in env.runs()} == {1}


def test_cni_config_operations_are_root_spans_without_a_caller_span(
    env: Env, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    cni = env.sync(observers=[OpenTelemetryObserver(provider)])
    net = env.chain({}, {})
    cni.add_network_list(net, env.rt)
    cni.del_network_list(net, env.rt)
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "CNI ADD plugin p1",
        "CNI ADD plugin p2",
        "CNI ADD",
        "CNI DEL plugin p2",
        "CNI DEL plugin p1",
        "CNI DEL",
    ]
    add, delete = spans[2], spans[5]
    assert add.parent is None and delete.parent is None
    assert context_of(add).trace_id != context_of(delete).trace_id
    assert [parent_of(s) for s in spans[:2]] == [context_of(add).span_id] * 2
    check_runs_got_their_own_span(env, spans)


def test_failures_have_the_error_status_and_the_cni_code(
    env: Env, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    env.write(
        "20-b.conflist",
        "b",
        {"type": "testplugin", "test": {"ADD": {"error": {"code": 11, "msg": "try later"}}}},
    )
    m = env.manager(observers=[OpenTelemetryObserver(provider)])
    with pytest.raises(SetupError) as raised:
        m.setup("c1", "/var/run/netns/c1")
    spans = {s.name: s for s in exporter.get_finished_spans() if "DEL" not in s.name}
    failed_run = [
        s
        for s in exporter.get_finished_spans()
        if s.name == "CNI ADD plugin testplugin" and s.status.status_code is StatusCode.ERROR
    ]
    assert len(failed_run) == 1
    run = failed_run[0]
    assert run.attributes is not None and run.attributes["cni.network"] == "b"
    assert run.attributes["cni.error_code"] == 11
    assert run.attributes["error.type"] == "PluginError"
    assert run.status.description == (
        'CNI error 11: plugin type="testplugin" failed (add): try later'
    )
    assert [e.name for e in run.events] == ["exception"]
    net_b = spans["CNI ADD network b"]
    assert net_b.status.status_code is StatusCode.ERROR
    setup = spans["CNI setup"]
    assert setup.status.status_code is StatusCode.ERROR
    assert setup.attributes is not None
    assert setup.attributes["cni.error_code"] == raised.value.code
    assert setup.attributes["error.type"] == "SetupError"
    # The rollback is in the trace: a DEL of each network tried, under the setup.
    dels = [s for s in exporter.get_finished_spans() if s.name.startswith("CNI DEL network")]
    assert [s.attributes["cni.network"] for s in dels if s.attributes] == ["b", "a", "cni-loopback"]
    assert {parent_of(s) for s in dels} == {context_of(setup).span_id}


def test_check_failure_on_a_plain_cni_config(
    env: Env, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    cni = env.sync(observers=[OpenTelemetryObserver(provider)])
    net = env.chain({"CHECK": {"error": {"code": 51, "msg": "limited"}}})
    cni.add_network_list(net, env.rt)
    with pytest.raises(PluginError):
        cni.check_network_list(net, env.rt)
    check = exporter.get_finished_spans()[-1]
    assert check.name == "CNI CHECK"
    assert check.status.status_code is StatusCode.ERROR
    assert check.attributes is not None and check.attributes["cni.error_code"] == 51


def test_not_sampled_runs_get_the_trace_context_with_the_flags_off(
    env: Env, exporter: InMemorySpanExporter
) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    cni = env.sync(observers=[OpenTelemetryObserver(provider)])
    cni.get_version_info("testplugin")
    assert exporter.get_finished_spans() == ()
    (run,) = env.runs()
    version, trace_id, span_id, flags = run["trace"]["TRACEPARENT"].split("-")
    assert version == "00" and int(flags, 16) & 1 == 0  # not sampled
    assert int(trace_id, 16) != 0 and int(span_id, 16) != 0
    assert "TRACESTATE" not in run["trace"]


def remote_parent(state: TraceState | None = None, sampled: bool = True) -> SpanContext:
    """A caller's span context as the runtime got it from its own caller (e.g. the kubelet)."""
    return SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT),
        trace_state=state,
    )


def test_tracestate_is_passed_and_an_inherited_one_is_replaced(
    env: Env,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
    monkeypatch.setenv("TRACESTATE", "stale=1")
    cni = env.sync(observers=[OpenTelemetryObserver(provider)])
    caller = remote_parent(TraceState([("vendor", "abc"), ("other", "x")]))
    with trace.use_span(NonRecordingSpan(caller)):
        cni.get_version_info("testplugin")
    run_span = exporter.get_finished_spans()[0]
    assert run_span.context is not None
    assert context_of(run_span).trace_id == caller.trace_id
    (run,) = env.runs()
    assert run["trace"] == {
        "TRACEPARENT": traceparent(run_span),
        "TRACESTATE": "vendor=abc,other=x",
    }
    # A span without a trace state: the inherited TRACESTATE goes with the inherited TRACEPARENT.
    env.record.unlink()
    cni.get_version_info("testplugin")
    (run,) = env.runs()
    assert run["trace"] == {"TRACEPARENT": traceparent(exporter.get_finished_spans()[-2])}


def test_without_a_valid_span_context_the_environment_passes_through(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    inherited = "00-11111111111111111111111111111111-2222222222222222-01"
    monkeypatch.setenv("TRACEPARENT", inherited)
    monkeypatch.setenv("TRACESTATE", "runtime=1")
    # A no-op tracer provider and no caller span: no valid span context.
    cni = env.sync(observers=[OpenTelemetryObserver(NoOpTracerProvider())])
    net = env.chain({})
    cni.add_network_list(net, env.rt)
    # No OpenTelemetry observer at all: the same.
    env.sync().del_network_list(net, env.rt)
    assert [r["trace"] for r in env.runs()] == [
        {"TRACEPARENT": inherited, "TRACESTATE": "runtime=1"}
    ] * 2
    # A no-op provider under a valid caller span: the plugin joins the caller's trace.
    env.record.unlink()
    caller = remote_parent(sampled=False)
    with trace.use_span(NonRecordingSpan(caller)):
        cni.get_version_info("p1")
    (run,) = env.runs()
    assert run["trace"] == {"TRACEPARENT": traceparent(caller)}


def test_parallel_setups_in_threads_each_under_its_own_span(
    env: Env, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    m = env.manager(observers=[OpenTelemetryObserver(provider)])
    tracer = provider.get_tracer("runtime")
    callers: dict[str, int] = {}
    errors: list[BaseException] = []

    def pod(cid: str) -> None:
        try:
            with tracer.start_as_current_span(f"pod {cid}") as span:
                callers[cid] = span.get_span_context().span_id
                m.setup(cid, f"/var/run/netns/{cid}", parallel=True)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=pod, args=(f"c{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check_tree(exporter.get_finished_spans(), callers)
    check_runs_got_their_own_span(env, exporter.get_finished_spans())


def check_tree(spans: Sequence[ReadableSpan], callers: dict[str, int]) -> None:
    """Each setup under its caller's span, its networks under it, their runs under them."""
    ids = {context_of(s).span_id: s for s in spans if s.context}
    setups = [s for s in spans if s.name == "CNI setup"]
    assert len(setups) == len(callers)
    for setup in setups:
        assert setup.attributes is not None
        cid = str(setup.attributes["cni.container_id"])
        assert parent_of(setup) == callers[cid]
        nets = [
            s for s in spans if " network " in s.name and parent_of(s) == context_of(setup).span_id
        ]
        assert sorted(str(n.attributes["cni.network"]) for n in nets if n.attributes) == [
            "a",
            "b",
            "cni-loopback",
        ]
        for net in nets:
            (run,) = [
                s for s in spans if " plugin " in s.name and parent_of(s) == context_of(net).span_id
            ]
            assert run.attributes is not None and net.attributes is not None
            assert run.attributes["cni.container_id"] == cid
            assert run.attributes["cni.network"] == net.attributes["cni.network"]
    assert all(parent_of(s) in ids or s.name.startswith("pod ") for s in spans)


def test_parallel_setups_in_tasks_each_under_its_own_span(
    env: Env, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    m = env.amanager(observers=[OpenTelemetryObserver(provider)])
    tracer = provider.get_tracer("runtime")
    callers: dict[str, int] = {}

    async def pod(cid: str) -> None:
        with tracer.start_as_current_span(f"pod {cid}") as span:
            callers[cid] = span.get_span_context().span_id
            await asyncio.sleep(0)  # the other tasks start their own spans meanwhile
            await m.setup(cid, f"/var/run/netns/{cid}", parallel=True)
            await m.teardown(cid, f"/var/run/netns/{cid}")

    async def main() -> None:
        await asyncio.gather(*(pod(f"c{i}") for i in range(3)))

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    check_tree(spans, callers)
    teardowns = [s for s in spans if s.name == "CNI teardown"]
    assert {parent_of(s): s.attributes["cni.container_id"] for s in teardowns if s.attributes} == {
        span_id: cid for cid, span_id in callers.items()
    }
    check_runs_got_their_own_span(env, spans)


class ForgedState(TraceState):
    """A trace state whose header is ``header``: what a faulty propagator or SDK could give."""

    def __init__(self, header: str) -> None:
        super().__init__([("k", "v")])
        self.header = header

    def to_header(self) -> str:
        return self.header


@pytest.mark.parametrize(
    ("flags", "state", "passed"),
    [
        (0x1FF, None, None),  # flags of three hex digits: no TRACEPARENT
        (0x01, ForgedState("a=1\nb=2"), "00"),  # a control character: no TRACESTATE
        (0x01, ForgedState(",".join(f"k{i}=v" for i in range(40))), "00"),  # over 32 members
        (0x01, ForgedState("Upper=1"), "00"),  # keys are lower case
        (0x01, ForgedState("a=1, b=2,c=x y"), "00-state"),  # valid: passed as it is
    ],
)
def test_only_w3c_valid_trace_context_reaches_the_plugins(
    env: Env, monkeypatch: pytest.MonkeyPatch, flags: int, state: TraceState | None, passed: str
) -> None:
    monkeypatch.setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
    monkeypatch.setenv("TRACESTATE", "runtime=1")
    caller = SpanContext(0xAF76, 0xB7AD, True, trace_flags=TraceFlags(flags), trace_state=state)
    cni = env.sync(observers=[OpenTelemetryObserver(NoOpTracerProvider())])
    with trace.use_span(NonRecordingSpan(caller)):
        cni.get_version_info("p1")
    (run,) = env.runs()
    if passed is None:  # the runtime's own variables pass through, as with no span context
        assert run["trace"] == {
            "TRACEPARENT": "00-11111111111111111111111111111111-2222222222222222-01",
            "TRACESTATE": "runtime=1",
        }
    elif passed == "00":  # the TRACEPARENT still passed, the inherited TRACESTATE removed
        assert run["trace"] == {"TRACEPARENT": traceparent(caller)}
    else:
        assert state is not None
        assert run["trace"] == {"TRACEPARENT": traceparent(caller), "TRACESTATE": state.to_header()}
