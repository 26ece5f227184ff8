"""The operations as generators of effects, driven by hand with scripted outcomes (sans-IO).

``libcni/_ops.py`` writes each operation once, as a generator that yields
``TakeLock``, ``RunPlugin`` and ``CacheIO`` effects; ``CNIConfig`` and
``AsyncCNIConfig`` only carry them out. These tests are a third driver: no
process starts and no lock is taken. Each effect is answered from a script
(a plugin's stdout, a release function that records itself, a cache call
performed or not), so the order of the effects, the requests the plugins are
sent and the reaction to a thrown-in plugin error are asserted exactly.

``MockExec`` is the executor only so that ``find_in_path`` needs no binary;
it never runs anything here (nothing calls ``exec_plugin``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

import libcni
from libcni import CNIConfig, GCArgs, GCAttachment, GCError, PluginError, RuntimeConf, _ops_gc
from libcni._effects import CacheIO, GCNetwork, RunPlugin, TakeLock
from libcni.testing import MockExec

RT = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0")


def result(address: str, version: str = "1.0.0") -> dict[str, Any]:
    return {"cniVersion": version, "ips": [{"address": address}]}


def conflist(*types: str, version: str = "1.0.0") -> libcni.NetworkConfigList:
    plugins = [{"type": t} for t in types]
    obj = {"cniVersion": version, "name": "net", "plugins": plugins}
    return libcni.conf_list_from_bytes(json.dumps(obj).encode())


def operation(cni: CNIConfig, name: str) -> Callable[..., Generator[Any, Any, Any]]:
    """The generator function of operation ``name`` (``add``, ``delete``, ``gc``...): a
    method (``_add``) or a function of ``libcni._ops_gc`` given the state (``gc``)."""
    found = getattr(cni, f"_{name}", None) or functools.partial(getattr(_ops_gc, name), cni)
    assert callable(found)
    return found


class Script:
    """Answers every effect of one operation and records what happened, in order.

    - ``TakeLock``: ``("lock", what)``, answered by a release function that
      records ``("release", what)``; ``what`` is ``"net+"`` (the network's
      shared lock), ``"net!"`` (exclusive) or ``"cid/ifname"``.
    - ``RunPlugin``: ``("run", plugin, command, container)``, answered from
      ``plugins[(plugin, command, container)]`` or else
      ``plugins[(plugin, command)]``: bytes (the stdout), or an exception,
      which is thrown into the generator as a plugin's failure would be.
      Unscripted: ADD passes its prevResult through (or a result of its
      own), the other commands print nothing.
    - ``CacheIO``: ``("cache", method name)``, performed (on a real cache).
    - ``GCNetwork``: its operation driven in turn (its error thrown back in).
    """

    def __init__(self, plugins: dict[tuple[str, ...], bytes | Exception] | None = None) -> None:
        self.plugins = plugins or {}
        self.events: list[tuple[str, ...]] = []
        self.requests: list[dict[str, Any]] = []

    def _lock(self, effect: TakeLock) -> Callable[[], None]:
        if effect.attachment is None:
            what = "net!" if effect.exclusive else "net+"
        else:
            what = "/".join(effect.attachment)
        self.events.append(("lock", what))
        return lambda: self.events.append(("release", what))

    def drive(self, gen: Generator[Any, Any, Any]) -> Any:
        """Run ``gen`` to its end; its return value (or the exception it raises)."""
        send: Any = None
        throw: Exception | None = None
        while True:
            try:
                effect = gen.throw(throw) if throw is not None else gen.send(send)
            except StopIteration as stop:
                return stop.value
            send, throw = None, None
            if isinstance(effect, TakeLock):
                send = self._lock(effect)
            elif isinstance(effect, RunPlugin):
                self.events.append(("run", effect.plugin, effect.command, effect.container_id))
                request = json.loads(effect.stdin)
                self.requests.append(request)
                key: tuple[str, ...] = (effect.plugin, effect.command, effect.container_id)
                if key not in self.plugins:
                    key = key[:2]
                out = self.plugins.get(key, b"")
                if effect.command == "ADD" and key not in self.plugins:
                    out = json.dumps(request.get("prevResult") or result("10.1.2.3/24")).encode()
                if isinstance(out, Exception):
                    throw = out
                else:
                    send = out
            elif isinstance(effect, CacheIO):
                self.events.append(("cache", effect.call.__name__))
                send = effect.call(*effect.args)
            elif isinstance(effect, GCNetwork):
                try:
                    send = self.drive(effect.op)
                except Exception as e:
                    throw = e
            else:
                raise AssertionError(f"unknown effect {effect!r}")


@pytest.fixture
def cni(tmp_path: Path) -> CNIConfig:
    return CNIConfig([str(tmp_path / "bin")], cache_dir=tmp_path / "cache", exec=MockExec())


def add(cni: CNIConfig, net: libcni.NetworkConfigList, script: Script, rt: RuntimeConf = RT) -> Any:
    return script.drive(operation(cni, "add")(net, rt, None))


# -- ADD -------------------------------------------------------------------------------


def test_add_locks_first_runs_plugins_in_order_chaining_and_caches_last(cni: CNIConfig) -> None:
    r1, r2, r3 = result("10.0.0.1/24"), result("10.0.0.2/24"), result("10.0.0.3/24")
    script = Script(
        {
            ("p1", "ADD"): json.dumps(r1).encode(),
            ("p2", "ADD"): json.dumps(r2).encode(),
            ("p3", "ADD"): json.dumps(r3).encode(),
        }
    )
    got = add(cni, conflist("p1", "p2", "p3"), script)

    assert script.events == [
        ("lock", "net+"),
        ("lock", "ctr1/eth0"),
        ("run", "p1", "ADD", "ctr1"),
        ("run", "p2", "ADD", "ctr1"),
        ("run", "p3", "ADD", "ctr1"),
        ("cache", "write"),
        ("release", "ctr1/eth0"),
        ("release", "net+"),
    ]
    assert "prevResult" not in script.requests[0]
    assert script.requests[1]["prevResult"]["ips"] == r1["ips"]
    assert script.requests[2]["prevResult"]["ips"] == r2["ips"]
    assert got.to_dict()["ips"] == r3["ips"]
    # The write was performed: the last plugin's result is what the cache holds.
    cached = cni.get_network_list_cached_result(conflist("p1", "p2", "p3"), RT)
    assert cached is not None and cached.to_dict()["ips"] == r3["ips"]


def test_add_plugin_error_thrown_in_stops_the_chain_and_releases_the_locks(
    cni: CNIConfig,
) -> None:
    boom = PluginError("boom", code=11, plugin="p2", command="ADD")
    script = Script(
        {("p1", "ADD"): json.dumps(result("10.0.0.1/24")).encode(), ("p2", "ADD"): boom}
    )
    with pytest.raises(PluginError) as info:
        add(cni, conflist("p1", "p2", "p3"), script)
    assert info.value is boom
    assert script.events == [
        ("lock", "net+"),
        ("lock", "ctr1/eth0"),
        ("run", "p1", "ADD", "ctr1"),
        ("run", "p2", "ADD", "ctr1"),
        ("release", "ctr1/eth0"),
        ("release", "net+"),
    ]  # no p3, no cache write
    # Only the write-ahead record, written before p1 ran: in progress, for a DEL to find.
    [att] = cni.get_cached_attachments()
    assert (att.network, att.container_id, att.ifname, att.complete) == (
        "net",
        "ctr1",
        "eth0",
        False,
    )
    assert cni.get_network_list_cached_result(conflist("p1", "p2", "p3"), RT) is None


def test_add_invalid_plugin_output_is_a_plugin_error_and_nothing_is_cached(
    cni: CNIConfig,
) -> None:
    script = Script({("p1", "ADD"): b"not json"})
    with pytest.raises(PluginError) as info:
        add(cni, conflist("p1", "p2"), script)
    assert info.value.plugin == "p1" and info.value.command == "ADD"
    assert [e for e in script.events if e[0] == "run"] == [("run", "p1", "ADD", "ctr1")]
    assert ("cache", "write") not in script.events
    assert script.events[-2:] == [("release", "ctr1/eth0"), ("release", "net+")]


# -- DEL -------------------------------------------------------------------------------


def test_del_runs_plugins_in_reverse_with_the_cached_result_then_removes_it(
    cni: CNIConfig,
) -> None:
    net = conflist("p1", "p2", "p3")
    final = result("10.0.0.3/24")
    add(cni, net, Script({("p3", "ADD"): json.dumps(final).encode()}))

    script = Script()
    assert script.drive(operation(cni, "delete")(net, RT, None)) is None
    assert script.events == [
        ("lock", "net+"),
        ("lock", "ctr1/eth0"),
        ("run", "p3", "DEL", "ctr1"),
        ("run", "p2", "DEL", "ctr1"),
        ("run", "p1", "DEL", "ctr1"),
        ("cache", "forget"),
        ("release", "ctr1/eth0"),
        ("release", "net+"),
    ]
    assert [r["prevResult"]["ips"] for r in script.requests] == [final["ips"]] * 3
    assert cni.get_cached_attachments() == []


def test_del_plugin_error_keeps_the_cache_entry_and_releases_the_locks(cni: CNIConfig) -> None:
    net = conflist("p1", "p2")
    add(cni, net, Script())
    boom = PluginError("busy", code=11, plugin="p2", command="DEL")
    script = Script({("p2", "DEL"): boom})
    with pytest.raises(PluginError):
        script.drive(operation(cni, "delete")(net, RT, None))
    assert script.events == [
        ("lock", "net+"),
        ("lock", "ctr1/eth0"),
        ("run", "p2", "DEL", "ctr1"),
        ("release", "ctr1/eth0"),
        ("release", "net+"),
    ]  # p1 never ran, the entry is not removed
    assert [a.container_id for a in cni.get_cached_attachments()] == ["ctr1"]


# -- GC --------------------------------------------------------------------------------


def test_gc_collects_every_error_and_still_runs_every_plugin(cni: CNIConfig) -> None:
    net = conflist("p1", "p2", version="1.1.0")
    for cid in ("keep", "stale1", "stale2"):
        add(cni, net, Script(), RuntimeConf(cid, f"/ns/{cid}", "eth0"))

    del_error = PluginError("cannot delete", code=11, plugin="p2", command="DEL")
    gc_error = PluginError("cannot collect", code=11, plugin="p1", command="GC")
    script = Script({("p2", "DEL", "stale1"): del_error, ("p1", "GC"): gc_error})
    args = GCArgs([GCAttachment("keep", "eth0")])
    with pytest.raises(GCError) as info:
        script.drive(operation(cni, "gc")([net], args, None))
    assert info.value.errors == [del_error, gc_error]

    runs = [e[1:] for e in script.events if e[0] == "run"]
    assert runs == [
        ("p2", "DEL", "stale1"),  # failed: stale1's p1 is not run, its entry stays
        ("p2", "DEL", "stale2"),
        ("p1", "DEL", "stale2"),
        ("p1", "GC", ""),  # failed: p2's GC runs all the same
        ("p2", "GC", ""),
    ]
    # The exclusive network lock is taken first, the cache listed under it, and released
    # last; then the run's clean-up.
    assert script.events[:3] == [("lock", "net!"), ("cache", "survey"), ("cache", "collect")]
    assert script.events[-2:] == [("release", "net!"), ("cache", "clean_up")]
    assert ("lock", "net+") not in script.events  # the stale DELs run under GC's lock
    gc_requests = [r for r in script.requests if "cni.dev/valid-attachments" in r]
    assert [r["cni.dev/valid-attachments"] for r in gc_requests] == [
        [{"containerID": "keep", "ifname": "eth0"}]
    ] * 2
    assert sorted(a.container_id for a in cni.get_cached_attachments()) == ["keep", "stale1"]
