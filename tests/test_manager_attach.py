"""attach, detach, containers and check of an unknown container (behaviour.md §11.3, issue 31),
with the real test plugin (tests/plugins/testplugin)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from harness import run_cli
from test_manager import Env, fail
from test_manager_records import ARGS, CAPS, conf, plant_record, records_of

from libcni import (
    AlreadyAttachedError,
    ConfigError,
    NamespaceError,
    NetworkRequest,
    NotAttachedError,
    SetupError,
    TeardownError,
    ValidationError,
)
from libcni.cache import CacheEntry, ResultCache
from libcni.cache._results import Entries

pytestmark = pytest.mark.env(cls=Env)

NS = "/var/run/netns/c1"


def held(view: Any) -> list[tuple[str, str]]:
    return [(a.network, a.ifname) for a in view.attachments]


def three(env: Env) -> None:
    for name in ("a", "b", "c"):
        env.write(f"10-{name}.conflist", name)


# -- check --------------------------------------------------------------------------------


def test_check_of_a_container_never_set_up_is_not_attached(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    with pytest.raises(NotAttachedError, match="'ghost'") as info:
        m.check("ghost", NS)
    assert info.value.code == 3
    m.setup("c1", NS)
    m.teardown("c1")
    with pytest.raises(NotAttachedError):  # torn down: unknown again
        m.check("c1", NS)
    with pytest.raises(NotAttachedError):
        asyncio.run(env.amanager().check("ghost"))
    assert env.runs() == [r for r in env.runs() if r["command"] != "CHECK"]


def test_check_of_a_container_with_only_a_record_is_not_refused(env: Env) -> None:
    plant_record(env, "a", "c2", "eth0", conf("a"))
    env.manager().check("c2")  # something is recorded: known (nothing complete to CHECK)


# -- containers ---------------------------------------------------------------------------


def test_containers_lists_entries_records_and_go_entries_sorted(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    assert m.containers() == ()
    m.setup("zeta", NS)
    m.setup("alpha", NS)
    plant_record(env, "a", "dead", "eth0", conf("a"))  # an ADD whose runtime died
    cache = ResultCache(env.cache)
    cache.write(CacheEntry("go1", "a", "eth0", conf("a"), NS, (), {}, result={}))  # Go's
    assert m.containers() == ("alpha", "dead", "go1", "zeta")
    assert asyncio.run(env.amanager().containers()) == ("alpha", "dead", "go1", "zeta")
    m.teardown("zeta")
    m.teardown("dead")
    assert m.containers() == ("alpha", "go1")


def test_containers_skips_attachments_another_tool_deleted(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", NS)
    for name in env.cached():  # Go's DEL or cnitool removed the entries: records complete
        (env.cache / "results" / name).unlink()
    assert m.containers() == ()


def test_containers_reads_no_entry_that_has_a_record(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    for i in range(20):
        m.setup(f"c{i:02d}", NS)
    ResultCache(env.cache).write(CacheEntry("go", "a", "eth0", conf("a"), NS, (), {}, result={}))
    opened: list[str] = []
    load = Entries.load_listed

    def counting(self: Entries, dfd: int, name: str) -> Any:
        opened.append(name)
        return load(self, dfd, name)

    monkeypatch.setattr(Entries, "load_listed", counting)
    assert len(m.containers()) == 21
    assert opened == ["a-go-eth0"]  # only the entry without a record


def test_libcni_list(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    wired = {
        "NETCONFPATH": str(env.conf),
        "CNI_PATH": str(env.bin),
        "CNI_CACHE_DIR": str(env.cache),
    }
    assert run_cli("list", **wired).stdout == ""
    m.setup("c2", NS)
    m.setup("c1", NS)
    done = run_cli("list", **wired)
    assert (done.returncode, done.stdout, done.stderr) == (0, "c1\nc2\n", "")


# -- attach -------------------------------------------------------------------------------


def test_attach_adds_one_network_in_the_cached_netns_as_the_next_interface(env: Env) -> None:
    three(env)
    m = env.manager()
    m.setup("c1", NS, networks=["a"], args=ARGS)
    env.record.unlink()
    view = m.attach("c1", "b", capability_args=CAPS)
    assert held(view) == [("cni-loopback", "lo"), ("a", "eth0"), ("b", "eth1")]
    assert view.netns == NS
    assert [env.call_of(r) for r in env.runs()] == [("ADD", "b", "eth1")]
    (run,) = env.runs()
    assert run["env"]["CNI_NETNS"] == NS
    assert run["env"]["CNI_ARGS"] == ""  # the attach's own arguments, not setup's
    assert held(m.inspect("c1")) == held(view)
    m.teardown("c1")
    assert env.cached() == []


def test_attach_fills_the_first_gap_and_takes_a_named_interface(env: Env) -> None:
    three(env)
    env.write("40-d.conflist", "d")
    m = env.manager()
    m.setup("c1", NS, networks=["a", "b", "c"])
    m.detach("c1", "b")  # eth0, eth2 left
    assert held(m.attach("c1", "d"))[-2:] == [("d", "eth1"), ("c", "eth2")]
    m.detach("c1", "d")
    view = m.attach("c1", NetworkRequest("b", "net9", args=[("K", "V")]), NS)
    assert ("b", "net9") in held(view)
    assert env.runs()[-1]["env"]["CNI_ARGS"] == "K=V"


def test_attach_refusals_run_nothing(env: Env) -> None:
    three(env)
    m = env.manager()
    with pytest.raises(NotAttachedError, match="'c1'"):
        m.attach("c1", "b", NS)
    m.setup("c1", NS, networks=["a"])
    env.record.unlink()
    with pytest.raises(AlreadyAttachedError) as info:
        m.attach("c1", "a")
    assert (info.value.network, info.value.ifname) == ("a", "eth0")
    with pytest.raises(ConfigError, match="'eth0'"):
        m.attach("c1", NetworkRequest("b", "eth0"))
    with pytest.raises(ConfigError, match="'lo'"):
        m.attach("c1", NetworkRequest("b", "lo"))
    with pytest.raises(ConfigError, match="'nope'"):
        m.attach("c1", "nope")
    with pytest.raises(ValidationError, match="/run/netns/other"):
        m.attach("c1", "b", "/run/netns/other")
    with pytest.raises(ConfigError):  # an argument CNI_ARGS cannot carry
        m.attach("c1", "b", args=[("K", "a;b")])
    with pytest.raises(ValidationError):  # a well-known capability that breaks its rules
        m.attach("c1", "b", capability_args={"portMappings": [{"hostPort": "80"}]})
    with pytest.raises(ValidationError):
        m.attach("bad/id", "b", NS)
    assert env.runs() == []
    assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]


def test_attach_takes_another_path_to_the_cached_namespace(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    pid = os.getpid()  # (the test plugin never enters it)
    cached = f"/proc/{pid}/ns/net"
    m = env.manager()
    m.setup("c1", cached, networks=["a"])
    env.record.unlink()
    view = m.attach("c1", "b", f"/proc/{pid}/task/{pid}/ns/net")
    assert view.netns == cached
    assert [r["env"]["CNI_NETNS"] for r in env.runs()] == [cached]


def test_attach_refuses_a_netns_that_is_not_a_namespace(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    pin = env.root / "pin"
    m = env.manager()
    m.setup("c1", str(pin), networks=["a"])  # a path that does not exist: passed as given
    pin.write_text("")  # now a regular file (a pin left empty)
    env.record.unlink()
    with pytest.raises(NamespaceError):
        m.attach("c1", "b")
    assert env.runs() == []


def test_attach_failure_rolls_back_that_network_only(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-bad.conflist", "bad", fail("ADD", 7, "no"))
    m = env.manager()
    m.setup("c1", NS, networks=["a"])
    env.record.unlink()
    with pytest.raises(SetupError) as info:
        m.attach("c1", "bad")
    assert info.value.cause.code == 7
    assert [env.call_of(r) for r in env.runs()] == [("ADD", "bad", "eth1"), ("DEL", "bad", "eth1")]
    assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]
    assert records_of(env, "c1") == ["a-c1-eth0", "cni-loopback-c1-lo"]


def test_attach_dels_a_dead_attempt_of_that_network_first(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager()
    m.setup("c1", NS, networks=["a"])
    plant_record(env, "b", "c1", "eth5", conf("b"), netns=NS)  # an attach whose runtime died
    env.record.unlink()
    view = m.attach("c1", "b")
    assert [env.call_of(r) for r in env.runs()] == [("DEL", "b", "eth5"), ("ADD", "b", "eth1")]
    assert env.runs()[0]["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"  # recorded
    assert held(view)[-1] == ("b", "eth1") and view.incomplete == ()


def test_async_attach_and_detach(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")

    async def main() -> None:
        m = env.amanager()
        await m.setup("c1", NS, networks=["a"])
        assert held(await m.attach("c1", "b"))[-1] == ("b", "eth1")
        assert held(await m.detach("c1", "b"))[-1] == ("a", "eth0")
        with pytest.raises(NotAttachedError):
            await m.detach("c1", "b")

    asyncio.run(main())
    assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]


def test_async_cancelled_attach_rolls_back_that_network_only(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b", {"type": "testplugin", "test": {"ADD": {"sleep": 30}}})

    async def main() -> None:
        m = env.amanager()
        await m.setup("c1", NS, networks=["a"])
        task = asyncio.create_task(m.attach("c1", "b"))
        await env.await_call(lambda r: r.get("command") == "ADD" and r["stdin"]["name"] == "b")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [c for c in env.calls() if c[0] == "DEL"] == [("DEL", "b", "eth1")]
    assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]


def test_attach_and_detach_are_operations_for_observers(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    seen: list[Any] = []
    m = env.manager(observers=[seen.append])
    m.setup("c1", NS, networks=["a"])
    m.attach("c1", "b")
    m.detach("c1", "b")
    ops = [(e.operation, e.phase) for e in seen if e.kind == "operation"]
    assert ("attach", "end") in ops and ("detach", "end") in ops


# -- detach -------------------------------------------------------------------------------


def test_detach_dels_one_network_with_what_it_cached_the_others_stay(env: Env) -> None:
    a = env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager()
    m.setup("c1", NS, args=ARGS)
    a.write_text(json.dumps({"cniVersion": "1.0.0", "name": "a", "plugins": []}))  # broken now
    env.record.unlink()
    view = m.detach("c1", "a")
    assert held(view) == [("cni-loopback", "lo"), ("b", "eth1")]
    (run,) = env.runs()
    assert env.call_of(run) == ("DEL", "a", "eth0")
    assert run["env"]["CNI_NETNS"] == NS
    assert run["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
    assert run["stdin"]["type"] == "testplugin"  # the cached configuration
    assert env.cached() == ["b-c1-eth1", "cni-loopback-c1-lo"]


def test_detach_of_a_network_the_container_is_not_on_or_of_an_unknown_container(
    env: Env,
) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager()
    with pytest.raises(NotAttachedError, match="'c1'") as info:
        m.detach("c1", "a")
    assert info.value.code == 3
    m.setup("c1", NS, networks=["a"])
    with pytest.raises(NotAttachedError, match="'b'"):
        m.detach("c1", "b")
    assert [r["command"] for r in env.runs()] == ["ADD", "ADD"]


def test_detach_of_the_last_network_leaves_loopback_and_attach_works_again(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", NS)
    view = m.detach("c1", "a")
    assert held(view) == [("cni-loopback", "lo")]
    assert m.containers() == ("c1",)
    m.check("c1")
    assert held(m.attach("c1", "a")) == [("cni-loopback", "lo"), ("a", "eth0")]


def test_detach_failure_is_a_teardown_error_and_the_entry_stays(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("DEL", 11, "busy"))
    m = env.manager()
    m.setup("c1", NS)
    with pytest.raises(TeardownError, match="busy"):
        m.detach("c1", "a")
    assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]


def test_detach_of_an_attachment_in_progress(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", NS, networks=["a"])
    plant_record(env, "b", "c1", "eth1", conf("b"), netns=NS)
    env.record.unlink()
    view = m.detach("c1", "b")
    assert [env.call_of(r) for r in env.runs()] == [("DEL", "b", "eth1")]
    assert view.incomplete == () and records_of(env, "c1") == ["a-c1-eth0", "cni-loopback-c1-lo"]
