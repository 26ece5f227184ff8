"""Observers and events (behaviour.md §13) of both APIs, sync and async, the manager included.

Real plugin runs (``tests/plugins/testplugin``); the observers are plain
callables recording what they are told.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import harness
import pytest

import libcni
from libcni import (
    Event,
    GCArgs,
    PluginError,
    PluginNotFoundError,
    PluginTimeoutError,
    RuntimeConf,
    SetupError,
)

MODES = ("sync", "async")


class Recorder:
    """An observer keeping every event, in order (thread-safe: ``list.append``)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def seq(self, *kinds: str) -> list[tuple[str, str, str, str]]:
        """(kind, phase, operation, plugin-or-network) of the events of ``kinds`` (default: all)."""
        return [
            (e.kind, e.phase, e.operation, e.plugin or e.network)
            for e in self.events
            if not kinds or e.kind in kinds
        ]

    def starts(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind and e.phase == "start"]

    def end_of(self, start: Event) -> Event:
        (end,) = [e for e in self.events if e.phase == "end" and e.id == start.id]
        return end


def check_pairs(events: list[Event]) -> None:
    """Every start has one end after it, with the same id and fields; parents enclose children."""
    starts = {e.id: i for i, e in enumerate(events) if e.phase == "start"}
    ends = {e.id: i for i, e in enumerate(events) if e.phase == "end"}
    assert len(starts) == len([e for e in events if e.phase == "start"])  # ids unique
    assert starts.keys() == ends.keys()
    for ident, i in starts.items():
        start, end = events[i], events[ends[ident]]
        assert ends[ident] > i
        assert (start.duration, start.error, start.exception) == (None, None, None)
        fields = ("kind", "operation", "network", "container_id", "ifname", "plugin", "parent")
        assert [getattr(end, f) for f in fields] == [getattr(start, f) for f in fields]
        assert end.duration is not None and end.duration >= 0
        assert end.error is end.exception or end.error is None
        if start.parent is not None:
            assert starts[start.parent] < i and ends[ident] < ends[start.parent]


def run(mode: str, call: Callable[[], Any]) -> Any:
    """``call()``, awaited in a new event loop for async clients."""
    if mode == "async":

        async def main() -> Any:
            return await call()

        return asyncio.run(main())
    return call()


def client(env: harness.Env, mode: str, *observers: Any) -> Any:
    return (env.aio if mode == "async" else env.sync)(observers=list(observers))


# -- CNIConfig / AsyncCNIConfig ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_add_check_del_tell_each_operation_and_plugin_run(env: harness.Env, mode: str) -> None:
    rec = Recorder()
    cni = client(env, mode, rec)
    net = env.chain({}, {})
    rt = env.rt
    run(mode, lambda: cni.add_network_list(net, rt))
    run(mode, lambda: cni.check_network_list(net, rt))
    run(mode, lambda: cni.del_network_list(net, rt))
    plugin_runs = [
        ("plugin", "start", "{op}", "p1"),
        ("plugin", "end", "{op}", "p1"),
        ("plugin", "start", "{op}", "p2"),
        ("plugin", "end", "{op}", "p2"),
    ]

    def op(name: str, runs: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
        inner = [(k, p, o.format(op=name), w) for k, p, o, w in runs]
        return [("operation", "start", name, "net"), *inner, ("operation", "end", name, "net")]

    reverse = plugin_runs[2:] + plugin_runs[:2]
    assert rec.seq() == op("ADD", plugin_runs) + op("CHECK", plugin_runs) + op("DEL", reverse)
    check_pairs(rec.events)
    for e in rec.events:
        assert (e.network, e.container_id, e.ifname) == ("net", "ctr1", "eth0")
        assert e.ok
    for p in rec.starts("plugin"):
        (parent,) = [o for o in rec.starts("operation") if o.id == p.parent]
        assert parent.operation == p.operation
    # What the events say ran is what ran.
    assert [(e.plugin, e.operation) for e in rec.starts("plugin")] == env.types_called()


@pytest.mark.parametrize("mode", MODES)
def test_single_plugin_gc_status_version_and_validate_are_operations(
    env: harness.Env, mode: str
) -> None:
    rec = Recorder()
    cni = client(env, mode, rec)
    net = env.chain({}, version="1.1.0")
    one = libcni.conf_from_bytes(
        json.dumps(env.plugin("p2") | {"cniVersion": "1.1.0", "name": "n1"})
    )
    stale = RuntimeConf("stale", "/var/run/netns/x", "eth0")
    run(mode, lambda: cni.add_network_list(net, stale))
    run(mode, lambda: cni.add_network(one, env.rt))
    run(mode, lambda: cni.del_network(one, env.rt))
    rec.events.clear()
    run(mode, lambda: cni.gc_network_list(net, GCArgs()))
    run(mode, lambda: cni.get_status_network_list(net))
    run(mode, lambda: cni.get_version_info("p3"))
    run(mode, lambda: cni.validate_network_list(net))
    run(mode, lambda: cni.validate_network_list(net))  # the probe is remembered: no run
    check_pairs(rec.events)
    ops = rec.starts("operation")
    assert [(o.operation, o.network, o.container_id, o.plugin) for o in ops] == [
        ("GC", "net", "", ""),
        ("STATUS", "net", "", ""),
        ("VERSION", "", "", "p3"),
        ("VALIDATE", "net", "", ""),
        ("VALIDATE", "net", "", ""),
    ]
    by_parent = {
        o.operation + str(i): [
            (p.operation, p.plugin, p.container_id)
            for p in rec.starts("plugin")
            if p.parent == o.id
        ]
        for i, o in enumerate(ops)
    }
    assert by_parent == {
        # GC DELs the stale attachment, then sends GC to every plugin.
        "GC0": [("DEL", "p1", "stale"), ("GC", "p1", "")],
        "STATUS1": [("STATUS", "p1", "")],
        "VERSION2": [("VERSION", "p3", "")],
        "VALIDATE3": [("VERSION", "p1", "")],
        "VALIDATE4": [],
    }


@pytest.mark.parametrize("mode", MODES)
def test_failures_end_with_the_error_and_its_cni_code(env: harness.Env, mode: str) -> None:
    rec = Recorder()
    told: list[str] = []  # the error as the observer was told, when it was told

    def snapshot(e: Event) -> None:
        if e.error is not None:
            told.append(f"{e.kind}: {e.error.describe()}")  # type: ignore[attr-defined]

    cni = client(env, mode, rec, snapshot)
    net = env.chain({}, {"ADD": {"error": {"code": 11, "msg": "try later"}}})
    with pytest.raises(PluginError) as raised:
        run(mode, lambda: cni.add_network_list(net, env.rt))
    assert told == [f"{kind}: {raised.value.describe()}" for kind in ("plugin", "operation")]
    assert "p2" in told[0] and "'net'" in told[0] and "(add)" in told[0]
    check_pairs(rec.events)
    ends = [e for e in rec.events if e.phase == "end"]
    assert [(e.kind, e.plugin, e.ok) for e in ends] == [
        ("plugin", "p1", True),
        ("plugin", "p2", False),
        ("operation", "", False),
    ]
    failed_run, failed_op = ends[1], ends[2]
    # The very error the caller gets, with its code and its context already given.
    assert failed_run.error is raised.value and failed_op.error is raised.value
    assert failed_run.error.code == 11
    assert (failed_run.error.plugin, failed_run.error.command, failed_run.error.network) == (
        "p2",
        "ADD",
        "net",
    )

    # An error before any plugin runs: the operation's end only.
    rec.events.clear()
    missing = env.conflist(env.plugin("nosuch"))
    with pytest.raises(PluginNotFoundError) as not_found:
        run(mode, lambda: cni.add_network_list(missing, env.rt))
    assert [(e.kind, e.phase) for e in rec.events] == [("operation", "start"), ("operation", "end")]
    assert (
        rec.events[1].error is not_found.value and rec.events[1].error.code == not_found.value.code
    )

    # Not a CNI error (a bad timeout): told as the exception, with no error.
    rec.events.clear()
    with pytest.raises(ValueError):
        run(mode, lambda: cni.del_network_list(net, env.rt, timeout=-1))
    end = rec.events[-1]
    assert (end.phase, end.error, type(end.exception), end.ok) == ("end", None, ValueError, False)


def test_a_cancelled_async_operation_ends_its_events_with_the_cancellation(
    env: harness.Env,
) -> None:
    rec = Recorder()
    cni = env.aio(observers=[rec])
    net = env.chain({"ADD": {"sleep": 30}})

    async def main() -> None:
        task = asyncio.ensure_future(cni.add_network_list(net, env.rt))
        await env.await_call(lambda r: r.get("command") == "ADD")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    check_pairs(rec.events)
    assert [(e.kind, type(e.exception).__name__) for e in rec.events if e.phase == "end"] == [
        ("plugin", "CancelledError"),
        ("operation", "CancelledError"),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_an_observer_that_raises_is_logged_and_changes_nothing(
    env: harness.Env, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError(f"observer bug at {event.phase}")

    class BrokenEnv:
        def __call__(self, event: Event) -> None:
            pass

        def plugin_env(self, event: Event) -> Mapping[str, str]:
            raise RuntimeError("env bug")

    rec = Recorder()
    cni = client(env, mode, broken, BrokenEnv(), rec)
    net = env.chain({})
    with caplog.at_level(logging.ERROR, logger="libcni"):
        result = run(mode, lambda: cni.add_network_list(net, env.rt))
        run(mode, lambda: cni.del_network_list(net, env.rt))
    plain = client(env, mode)
    assert result.to_dict() == run(mode, lambda: plain.add_network_list(net, env.rt)).to_dict()
    # The observers after the broken one are told everything.
    assert len(rec.events) == 8
    check_pairs(rec.events)
    failures = [r for r in caplog.records if r.name == "libcni" and r.exc_info]
    assert len(failures) == 8 + 2  # each event, and each plugin run's environment
    assert "observer" in failures[0].getMessage()
    assert {str(r.exc_info[1]) for r in failures if r.exc_info} == {
        "observer bug at start",
        "observer bug at end",
        "env bug",
    }
    # The runs got libcni's environment, unchanged.
    assert all(r["env"]["CNI_COMMAND"] in ("ADD", "DEL") for r in env.records())


def test_observers_add_environment_entries_to_each_plugin_run(
    env: harness.Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Tracer:
        def __init__(self) -> None:
            self.seen: list[Event] = []

        def __call__(self, event: Event) -> None:
            pass

        def plugin_env(self, event: Event) -> Mapping[str, str | None]:
            self.seen.append(event)
            return {
                "TRACEPARENT": f"run-{event.id}",
                "TRACESTATE": None,  # removed
                "CNI_COMMAND": "EVIL",  # libcni's: refused
                "BAD=KEY": "x",  # cannot be passed: refused
            }

    monkeypatch.setenv("TRACESTATE", "inherited=1")
    monkeypatch.setenv("TRACEPARENT", "inherited")
    tracer, rec = Tracer(), Recorder()
    cni = env.sync(observers=[rec, tracer])
    net = env.chain({}, {})
    with caplog.at_level(logging.WARNING, logger="libcni"):
        cni.add_network_list(net, env.rt)
    runs = [r for r in env.records() if "command" in r]
    assert [r["trace"] for r in runs] == [
        {"TRACEPARENT": f"run-{e.id}"} for e in rec.starts("plugin")
    ]
    assert [r["env"]["CNI_COMMAND"] for r in runs] == ["ADD", "ADD"]
    assert tracer.seen == rec.starts("plugin")  # the start event of each run
    refused = [r.getMessage() for r in caplog.records if "cannot be passed" in r.getMessage()]
    assert len(refused) == 4 and "'CNI_COMMAND'" in refused[0] and "'BAD=KEY'" in refused[1]
    # Without an observer that adds some, the runtime's own variables pass through.
    env.record.unlink()
    env.sync(observers=[rec]).del_network_list(net, env.rt)
    assert [r["trace"] for r in env.records()] == [
        {"TRACEPARENT": "inherited", "TRACESTATE": "inherited=1"}
    ] * 2


@pytest.mark.parametrize("mode", MODES)
def test_an_observer_past_the_deadline_does_not_get_the_plugin_started(
    env: harness.Env, mode: str
) -> None:
    # behaviour.md §13: the deadline is checked after the start events were delivered.
    def slow(event: Event) -> None:
        if event.kind == "plugin" and event.phase == "start":
            time.sleep(1.2)

    rec = Recorder()
    cni = client(env, mode, slow, rec)
    with pytest.raises(PluginTimeoutError, match="within the 1s timeout") as raised:
        run(mode, lambda: cni.add_network_list(env.chain({}), env.rt, timeout=1.0))
    assert [r for r in env.records() if "command" in r] == []  # never started
    (start,) = rec.starts("plugin")
    assert rec.end_of(start).error is raised.value and raised.value.plugin == "p1"


def test_an_environment_entry_too_large_for_exec_is_left_out(
    env: harness.Env, caplog: pytest.LogCaptureFixture
) -> None:
    class Big:
        def __call__(self, event: Event) -> None:
            pass

        def plugin_env(self, event: Event) -> Mapping[str, str]:
            # 200 KB: exec fails with E2BIG; a lone surrogate cannot be encoded.
            return {"TRACEPARENT": "ok", "TRACESTATE": "x" * 200_000, "ODD": "\ud800"}

    with caplog.at_level(logging.WARNING, logger="libcni"):
        env.sync(observers=[Big()]).add_network_list(env.chain({}), env.rt)
    (record,) = [r for r in env.records() if "command" in r]  # it ran
    assert record["trace"] == {"TRACEPARENT": "ok"}
    refused = [r.getMessage() for r in caplog.records if "cannot be passed" in r.getMessage()]
    assert len(refused) == 2 and "'TRACESTATE'" in refused[0] and len(refused[0]) < 1000


def test_observers_argument_takes_callables_only(env: harness.Env) -> None:
    rec = Recorder()
    cni = env.sync(observers=rec)  # one observer alone is taken as one
    cni.get_version_info("p1")
    assert [e.kind for e in rec.events] == ["operation", "plugin", "plugin", "operation"]
    with pytest.raises(TypeError, match=r"an observer must be callable.*'nope'"):
        env.sync(observers=[rec, "nope"])
    with pytest.raises(TypeError, match="observers must be a sequence of callables, not int"):
        env.sync(observers=3)


# -- the network manager ----------------------------------------------------------------


class ManagerEnv(harness.ManagerEnv):
    def observed(self, mode: str, *observers: Any) -> Any:
        """A manager (``AsyncNetworkManager`` for ``mode`` "async") with ``observers``."""
        make = self.amanager if mode == "async" else self.manager
        return make(observers=list(observers))

    def network(self, file: str, name: str, version: str = "1.0.0", **test: Any) -> None:
        self.write(file, name, self.plugin("testplugin", **test), version=version)


manager_env = pytest.mark.env(cls=ManagerEnv)


def tree(rec: Recorder) -> list[tuple[str, str, list[tuple[str, str, list[tuple[str, str]]]]]]:
    """operation -> networks -> plugin runs, as (operation, what, children), in start order."""
    out = []
    for op in rec.starts("operation"):
        nets = []
        for net in rec.starts("network"):
            if net.parent == op.id:
                runs = [(p.operation, p.plugin) for p in rec.starts("plugin") if p.parent == net.id]
                nets.append((net.operation, f"{net.network}/{net.ifname}", runs))
        out.append((op.operation, op.container_id, nets))
    return out


@manager_env
@pytest.mark.parametrize("mode", MODES)
def test_manager_operations_have_network_events_not_nested_operations(
    env: ManagerEnv, mode: str
) -> None:
    env.network("10-a.conflist", "a", version="1.1.0")
    env.network("20-b.conflist", "b", version="1.1.0")
    rec = Recorder()
    m = env.observed(mode, rec)
    run(mode, lambda: m.setup("c1", "/var/run/netns/c1"))
    run(mode, lambda: m.check("c1", "/var/run/netns/c1"))
    run(mode, lambda: m.status())
    run(mode, lambda: m.inspect("c1"))  # runs nothing: no event
    run(mode, lambda: m.teardown("c1", "/var/run/netns/c1"))
    run(mode, lambda: m.setup("c2", "/var/run/netns/c2", networks=["a"]))
    run(mode, lambda: m.gc([]))
    check_pairs(rec.events)
    lo = [("ADD", "loopback")]
    *ops, (gc, gc_cid, gc_nets) = tree(rec)
    # One network after the other, each a network event (gc_networks emits them).
    assert (gc, gc_cid, gc_nets) == ("gc", "", [
        # c2 is not valid: its attachment of a is DELed under a's GC, then GC itself.
        ("GC", "a/", [("DEL", "testplugin"), ("GC", "testplugin")]),
        ("GC", "b/", [("GC", "testplugin")]),
        # The loopback network has only a cached configuration (1.0.0: no GC command).
        ("GC", "cni-loopback/", [("DEL", "loopback")]),
    ])  # fmt: skip
    assert ops == [
        ("setup", "c1", [("ADD", "cni-loopback/lo", lo), ("ADD", "a/eth0", [("ADD", "testplugin")]), ("ADD", "b/eth1", [("ADD", "testplugin")])]),
        ("check", "c1", [("CHECK", "cni-loopback/lo", [("CHECK", "loopback")]), ("CHECK", "a/eth0", [("CHECK", "testplugin")]), ("CHECK", "b/eth1", [("CHECK", "testplugin")])]),
        ("status", "", [("STATUS", "a/", [("STATUS", "testplugin")]), ("STATUS", "b/", [("STATUS", "testplugin")])]),
        ("teardown", "c1", [("DEL", "b/eth1", [("DEL", "testplugin")]), ("DEL", "a/eth0", [("DEL", "testplugin")]), ("DEL", "cni-loopback/lo", [("DEL", "loopback")])]),
        ("setup", "c2", [("ADD", "cni-loopback/lo", lo), ("ADD", "a/eth0", [("ADD", "testplugin")])]),
    ]  # fmt: skip
    # Every plugin event belongs to a network event, every network event to an operation.
    assert all(e.parent is not None for e in rec.events if e.kind != "operation")
    assert [e.container_id for e in rec.starts("network")][:3] == ["c1"] * 3


@manager_env
@pytest.mark.parametrize("mode", MODES)
def test_parallel_setup_pairs_each_network_with_its_own_runs(env: ManagerEnv, mode: str) -> None:
    for i in range(4):
        env.network(f"{i}.conflist", f"n{i}", ADD={"sleep": 0.2, "passthrough": True})
    rec = Recorder()
    m = env.observed(mode, rec)
    run(mode, lambda: m.setup("c1", "/var/run/netns/c1", parallel=True))
    check_pairs(rec.events)
    (op,) = rec.starts("operation")
    nets = rec.starts("network")
    assert sorted(n.network for n in nets) == ["cni-loopback", "n0", "n1", "n2", "n3"]
    assert {n.parent for n in nets} == {op.id}
    for net in nets:
        (p,) = [p for p in rec.starts("plugin") if p.parent == net.id]
        assert (p.network, p.ifname, p.container_id) == (net.network, net.ifname, "c1")
    # They did run at the same time: every network started before the first one ended.
    first_end = min(
        i
        for i, e in enumerate(rec.events)
        if e.kind == "network" and e.phase == "end" and e.network != "cni-loopback"
    )
    assert all(rec.events.index(n) < first_end for n in nets)


@manager_env
@pytest.mark.parametrize("mode", MODES)
def test_failed_setup_tells_the_failure_and_the_rollback(env: ManagerEnv, mode: str) -> None:
    env.network("10-a.conflist", "a")
    env.network("20-b.conflist", "b", ADD={"error": {"code": 7, "msg": "bad config"}})
    rec = Recorder()
    m = env.observed(mode, rec)
    with pytest.raises(SetupError) as raised:
        run(mode, lambda: m.setup("c1", "/var/run/netns/c1"))
    check_pairs(rec.events)
    ends = [
        (e.kind, e.operation, e.network, e.error.code if e.error else None)
        for e in rec.events
        if e.phase == "end" and e.kind != "plugin"
    ]
    assert ends == [
        ("network", "ADD", "cni-loopback", None),
        ("network", "ADD", "a", None),
        ("network", "ADD", "b", 7),
        # The rollback, last first.
        ("network", "DEL", "b", None),
        ("network", "DEL", "a", None),
        ("network", "DEL", "cni-loopback", None),
        ("operation", "setup", "", raised.value.code),
    ]  # fmt: skip
    assert rec.events[-1].error is raised.value


@manager_env
def test_threads_share_one_observer_and_keep_their_own_ids(env: ManagerEnv) -> None:
    env.network("10-a.conflist", "a")
    rec = Recorder()
    m = env.observed("sync", rec)
    errors: list[BaseException] = []

    def one(cid: str) -> None:
        try:
            m.setup(cid, f"/var/run/netns/{cid}")
            m.teardown(cid, f"/var/run/netns/{cid}")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(f"c{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check_pairs(rec.events)
    for op in rec.starts("operation"):
        nets = [n for n in rec.starts("network") if n.parent == op.id]
        assert {n.container_id for n in nets} == {op.container_id}
        runs = [p for p in rec.starts("plugin") if p.parent in {n.id for n in nets}]
        assert {p.container_id for p in runs} == {op.container_id} and len(runs) == 2


@manager_env
def test_a_network_observer_past_the_setup_deadline_starts_no_plugin(env: ManagerEnv) -> None:
    env.network("10-a.conflist", "a")

    def slow(event: Event) -> None:
        if event.kind == "network" and event.phase == "start" and event.network == "a":
            time.sleep(0.5)

    m = env.manager(observers=[slow], loopback=False)
    with pytest.raises(SetupError) as raised:
        m.setup("c1", "/var/run/netns/c1", timeout=0.3)
    assert isinstance(raised.value.cause, PluginTimeoutError)
    assert [r["command"] for r in env.records() if "command" in r] == ["DEL"]  # the rollback
