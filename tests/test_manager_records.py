"""The network manager and what the cache knows (behaviour.md §11.1-§11.4), real test plugin.

Teardown, inspect, check, setup and gc use the entries *and* the write-ahead
records of a container (attachments in progress: an ADD that failed, or whose
runtime died); teardown uses the cached netns, configuration and arguments, and
falls back to the current configuration for a network named with nothing
cached; single-plugin entries are lists of one; files without a valid network
name are skipped; a container torn down leaves no lock file.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from test_manager import Env, fail

import libcni
from libcni import (
    AlreadyAttachedError,
    AsyncNetworkManager,
    NetworkRequest,
    NotReadyError,
    PluginError,
    SetupError,
    TeardownError,
)
from libcni.cache import RECORD_V1, CacheEntry, ResultCache

ARGS = (("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web"))
CAPS = {"mac": "0a:58:0a:01:02:03"}


pytestmark = pytest.mark.env(cls=Env)


def conf(name: str, *plugins: dict[str, Any]) -> bytes:
    plist = list(plugins) or [{"type": "testplugin"}]
    return json.dumps({"cniVersion": "1.1.0", "name": name, "plugins": plist}).encode()


def plant_record(
    env: Env, network: str, cid: str, ifname: str, config: bytes, netns: str = "/run/netns/old"
) -> None:
    """The record a runtime killed during the ADD of this attachment left (nothing else)."""
    ResultCache(env.cache).wal.write(
        CacheEntry(cid, network, ifname, config, netns, ARGS, CAPS, kind=RECORD_V1)
    )


def records_of(env: Env, cid: str) -> list[str]:
    d = env.cache / "records" / cid
    return sorted(os.listdir(d)) if d.is_dir() else []


def container_locks(env: Env) -> list[str]:
    d = env.cache / "locks" / "containers"
    return sorted(os.listdir(d)) if d.is_dir() else []


def dels(env: Env) -> list[dict[str, Any]]:
    return [r for r in env.runs() if r["command"] == "DEL"]


# -- teardown -----------------------------------------------------------------------------


def test_teardown_without_netns_uses_the_netns_cached_for_each_attachment(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager()
    view = m.setup("c1", "/var/run/netns/c1")
    assert view.netns == "/var/run/netns/c1"
    env.record.unlink()
    m.teardown("c1")
    assert [(r["stdin"]["name"], r["env"]["CNI_NETNS"]) for r in env.runs()] == [
        ("b", "/var/run/netns/c1"),
        ("a", "/var/run/netns/c1"),
        ("cni-loopback", "/var/run/netns/c1"),
    ]
    assert env.cached() == [] and records_of(env, "c1") == []
    # A netns given wins over the cached one.
    m.setup("c2", "/var/run/netns/c2")
    env.record.unlink()
    m.teardown("c2", "/proc/42/ns/net")
    assert {r["env"]["CNI_NETNS"] for r in env.runs()} == {"/proc/42/ns/net"}


def test_teardown_dels_attachments_in_progress_with_what_they_recorded(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager(loopback=False)
    m.setup("c1", "/var/run/netns/c1")
    plant_record(env, "gone", "c1", "eth1", conf("gone", {"type": "testplugin", "gen": "rec"}))
    view = m.inspect("c1")
    assert [(a.network, a.ifname) for a in view.attachments] == [("a", "eth0")]
    assert view.incomplete == (("gone", "eth1"),)
    assert view.netns == "/var/run/netns/c1"
    assert view.to_dict()["incomplete"] == [{"network": "gone", "ifname": "eth1"}]
    assert [(a.network, a.complete) for a in m._cni.get_cached_attachments("c1")] == [
        ("a", True),
        ("gone", False),
    ]
    env.record.unlink()
    m.teardown("c1")
    runs = env.runs()
    assert [(r["stdin"]["name"], r["env"]["CNI_IFNAME"]) for r in runs] == [
        ("gone", "eth1"),
        ("a", "eth0"),
    ]
    gone = runs[0]
    assert gone["stdin"]["gen"] == "rec" and "prevResult" not in gone["stdin"]
    assert gone["env"]["CNI_NETNS"] == "/run/netns/old"  # its own cached netns
    assert gone["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
    assert "prevResult" in runs[1]["stdin"]
    assert records_of(env, "c1") == [] and env.cached() == []
    assert m.inspect("c1").incomplete == ()


def test_a_failed_setup_whose_rollback_failed_stays_in_progress(env: Env) -> None:
    # The ADD fails after the plugin may have made something, and the rollback's DEL fails
    # too: the record is all that is left; inspect shows it, teardown DELs it again.
    broken = {"type": "testplugin", "test": {"*": {"error": {"code": 11, "msg": "no"}}}}
    env.write("10-a.conflist", "a", broken)
    m = env.manager(loopback=False)
    with pytest.raises(SetupError) as info:
        m.setup("c1", "/var/run/netns/c1")
    assert len(info.value.rollback_errors) == 1
    assert env.cached() == [] and records_of(env, "c1") == ["a-c1-eth0"]
    assert m.inspect("c1").incomplete == (("a", "eth0"),)
    env.record.unlink()
    with pytest.raises(TeardownError):
        m.teardown("c1")
    [again] = env.runs()
    assert (again["command"], again["env"]["CNI_NETNS"]) == ("DEL", "/var/run/netns/c1")
    assert records_of(env, "c1") == ["a-c1-eth0"]  # a DEL that fails keeps it


def test_teardown_of_networks_with_nothing_cached_uses_the_current_configuration(
    env: Env,
) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "gen": "now"})
    env.write("20-b.conflist", "b")
    env.write("30-c.conflist", "c")
    m = env.manager()
    m.setup("c1", "/var/run/netns/c1", networks=["c"])  # c: eth0, cached
    env.record.unlink()
    m.teardown(
        "c1",
        "/var/run/netns/c1",
        networks=["a", NetworkRequest("b", "net9", args=[("B", "1")]), "c", "never"],
        args=ARGS,
        capability_args=CAPS,
    )
    runs = env.runs()
    # The interface names setup would give: net9 reserved, a eth0, (c eth1), never eth2;
    # c is cached (as eth0) and DELeted as cached; "never" is configured nowhere: nothing
    # to DEL. Last first: net9, then eth0 (c before a by network name, reversed).
    assert [(r["stdin"]["name"], r["env"]["CNI_IFNAME"]) for r in runs] == [
        ("b", "net9"),
        ("c", "eth0"),
        ("a", "eth0"),
    ]
    b, c, a = runs
    assert a["stdin"]["gen"] == "now" and "prevResult" not in a["stdin"]
    assert a["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
    assert b["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web;B=1"
    assert all(r["env"]["CNI_NETNS"] == "/var/run/netns/c1" for r in runs)
    assert "prevResult" in c["stdin"] and c["env"]["CNI_ARGS"] == ""
    assert env.cached() == ["cni-loopback-c1-lo"]


def test_teardown_requests_are_checked_before_anything_runs(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", "ns")
    env.record.unlink()
    with pytest.raises(libcni.ConfigError, match="requested twice"):
        m.teardown("c1", networks=[NetworkRequest("a", "x"), NetworkRequest("b", "x")])
    with pytest.raises(libcni.ConfigError, match="name or a NetworkRequest"):
        m.teardown("c1", networks=[42])  # type: ignore[list-item]
    assert env.runs() == []


def test_async_teardown_uses_the_cached_netns_and_records(env: Env) -> None:
    env.write("10-a.conflist", "a")
    plant_record(env, "a", "c9", "eth0", conf("a", {"type": "testplugin", "gen": "rec"}))

    async def main() -> None:
        m = AsyncNetworkManager(env.conf, [env.bin], cache_dir=env.cache, max_networks=0)
        await m.setup("c1", "/var/run/netns/c1")
        view = await m.inspect("c9")
        assert view.incomplete == (("a", "eth0"),) and view.netns == "/run/netns/old"
        env.record.unlink()
        await m.teardown("c1")
        await m.teardown("c9")

    asyncio.run(main())
    assert [(r["env"]["CNI_CONTAINERID"], r["env"]["CNI_NETNS"]) for r in env.runs()] == [
        ("c1", "/var/run/netns/c1"),
        ("c1", "/var/run/netns/c1"),
        ("c9", "/run/netns/old"),
    ]
    assert env.runs()[2]["stdin"]["gen"] == "rec"
    assert env.cached() == [] and records_of(env, "c9") == []


# -- setup after a setup that did not finish ----------------------------------------------


def test_setup_dels_a_dead_attempt_with_what_it_recorded_then_sets_up(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "gen": "now"})
    m = env.manager()
    plant_record(env, "a", "c1", "eth0", conf("a", {"type": "testplugin", "gen": "rec"}))
    plant_record(env, "cni-loopback", "c1", "lo", conf("cni-loopback", {"type": "loopback"}))
    view = m.setup("c1", "/var/run/netns/c1", args=[("K", "V")])
    runs = env.runs()
    assert [(r["command"], r["stdin"]["name"]) for r in runs] == [
        ("DEL", "a"),
        ("DEL", "cni-loopback"),
        ("ADD", "cni-loopback"),
        ("ADD", "a"),
    ]
    dead = runs[0]
    assert dead["stdin"]["gen"] == "rec" and "prevResult" not in dead["stdin"]
    assert dead["env"]["CNI_NETNS"] == "/run/netns/old"
    assert dead["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
    assert runs[3]["stdin"]["gen"] == "now" and runs[3]["env"]["CNI_ARGS"] == "K=V"
    assert [a.network for a in view.attachments] == ["cni-loopback", "a"]
    assert view.incomplete == ()
    # Now complete: a second setup is refused, as for any cached attachment.
    with pytest.raises(AlreadyAttachedError):
        m.setup("c1", "/var/run/netns/c1")


def test_setup_stops_when_the_del_of_a_dead_attempt_fails(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    plant_record(env, "a", "c1", "eth0", conf("a", fail("DEL", 11, "still busy")))
    with pytest.raises(SetupError) as info:
        m.setup("c1", "/var/run/netns/c1")
    assert isinstance(info.value.cause, PluginError)
    assert info.value.cause.msg == "still busy" and info.value.cause.command == "DEL"
    assert info.value.partial == () and info.value.rollback_errors == []
    assert [r["command"] for r in env.runs()] == ["DEL"]  # nothing else ran
    assert records_of(env, "c1") == ["a-c1-eth0"]  # the record stays


def test_async_setup_dels_a_dead_attempt_first(env: Env) -> None:
    env.write("10-a.conflist", "a")
    plant_record(env, "a", "c1", "eth0", conf("a"))

    async def main() -> None:
        m = AsyncNetworkManager(
            env.conf, [env.bin], cache_dir=env.cache, max_networks=0, loopback=False
        )
        await m.setup("c1", "/var/run/netns/c1")

    asyncio.run(main())
    assert [r["command"] for r in env.runs()] == ["DEL", "ADD"]


# -- gc -----------------------------------------------------------------------------------


def test_gc_collects_records_of_containers_not_valid_on_every_network(env: Env) -> None:
    env.write("10-a.conflist", "a", version="1.1.0")
    m = env.manager()
    m.setup("live", "/var/run/netns/live")
    # Dead setups: one on a configured network, one on a network known only from its record,
    # and one of the live container (kept, and valid for the plugins' GC).
    plant_record(env, "a", "dead", "eth0", conf("a", {"type": "testplugin", "gen": "rec"}))
    plant_record(env, "cni-loopback", "dead", "lo", conf("cni-loopback", {"type": "loopback"}))
    plant_record(env, "gone", "dead", "eth1", conf("gone", {"type": "testplugin", "g": "x"}))
    plant_record(env, "gone", "live", "eth1", conf("gone"))
    env.record.unlink()
    m.gc(["live"])
    collected = {(r["stdin"]["name"], r["env"]["CNI_CONTAINERID"]) for r in dels(env)}
    assert collected == {("a", "dead"), ("cni-loopback", "dead"), ("gone", "dead")}
    assert all(r["env"]["CNI_NETNS"] == "/run/netns/old" for r in dels(env))
    assert records_of(env, "dead") == []
    assert records_of(env, "live") == sorted(
        ["a-live-eth0", "cni-loopback-live-lo", "gone-live-eth1"]
    )
    gcs = {
        r["stdin"]["name"]: r["stdin"]["cni.dev/valid-attachments"]
        for r in env.runs()
        if r["command"] == "GC"
    }
    assert gcs["gone"] == [{"containerID": "live", "ifname": "eth1"}]
    assert gcs["a"] == [{"containerID": "live", "ifname": "eth0"}]
    assert container_locks(env) == []  # GC removes the lock files no one holds


def test_async_gc_collects_records_of_containers_not_valid(env: Env) -> None:
    env.write("10-a.conflist", "a")
    plant_record(env, "a", "dead", "eth0", conf("a", {"type": "testplugin", "gen": "rec"}))
    plant_record(env, "a", "live", "eth0", conf("a"))

    async def main() -> None:
        m = AsyncNetworkManager(env.conf, [env.bin], cache_dir=env.cache, max_networks=0)
        await m.gc(["live"])

    asyncio.run(main())
    [gone] = dels(env)  # a configured network: its current list, the recorded netns
    assert (gone["env"]["CNI_CONTAINERID"], gone["env"]["CNI_NETNS"]) == ("dead", "/run/netns/old")
    assert records_of(env, "dead") == [] and records_of(env, "live") == ["a-live-eth0"]


def test_gc_removes_the_record_a_runtime_killed_while_writing_it_left(env: Env) -> None:
    # Killed while writing the first record of a setup (loopback's): no plugin ran, and
    # the record is unusable; GC removes it, without any DEL.
    env.write("10-a.conflist", "a")
    d = env.cache / "records" / "victim"
    d.mkdir(parents=True)
    (d / "cni-loopback-victim-lo").write_bytes(b"")
    (d / "a-victim-eth0").write_bytes(b'{"kind":"libcniRecordV1","contai')
    env.manager().gc([])
    assert dels(env) == []
    assert os.listdir(env.cache / "records") == []


def test_single_plugin_entries_are_lists_of_one_everywhere(env: Env) -> None:
    # Written by CNIConfig.add_network (or Go's AddNetwork): the config is one plugin.
    single = libcni.conf_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "single", "type": "testplugin", "k": 1})
    )
    m = env.manager()
    cni = libcni.CNIConfig([env.bin], cache_dir=env.cache)
    for cid in ("c1", "c2"):
        cni.add_network(single, libcni.RuntimeConf(cid, f"/run/netns/{cid}", "eth0"))
    env.record.unlink()
    m.check("c1")
    m.teardown("c1")
    assert [(r["command"], r["stdin"]["name"], r["stdin"]["k"]) for r in env.runs()] == [
        ("CHECK", "single", 1),
        ("DEL", "single", 1),
    ]
    m.gc([])  # one such entry must not make gc fail
    assert env.cached() == []
    assert [r["env"]["CNI_CONTAINERID"] for r in dels(env)] == ["c1", "c2"]


# -- a runtime killed during setup ---------------------------------------------------------


RUNTIME = """
import sys
from libcni import NetworkManager
conf, bin, cache = sys.argv[1:4]
NetworkManager(conf, [bin], cache_dir=cache, max_networks=0).setup(
    "victim", "/var/run/netns/victim", capability_args={"mac": "0a:58:0a:01:02:03"})
"""


@pytest.mark.parametrize("slow", ["a", "b"])
def test_a_runtime_killed_during_setup_leaves_nothing_after_one_gc(env: Env, slow: str) -> None:
    for n in "ab":
        test = {"test": {"ADD": {"sleep": 30}}} if n == slow else {}
        env.write(f"10-{n}.conflist", n, {"type": "testplugin", **test})
    env.kill_runtime_during(
        RUNTIME,
        [str(env.conf), str(env.bin), str(env.cache)],
        lambda r: r.get("command") == "ADD" and r["stdin"].get("name") == slow,
    )
    env.record.unlink()
    env.manager().gc(["someone-else"])  # the restarted runtime, once
    collected = sorted((r["stdin"]["name"], r["env"]["CNI_IFNAME"]) for r in dels(env))
    expected = [("a", "eth0"), ("cni-loopback", "lo")] + ([("b", "eth1")] if slow == "b" else [])
    assert collected == sorted(expected)
    assert all(r["env"]["CNI_NETNS"] == "/var/run/netns/victim" for r in dels(env))
    assert env.cached() == [] and records_of(env, "victim") == []
    assert os.listdir(env.cache / "records") == []
    assert container_locks(env) == []


# -- configuration and lock files -------------------------------------------------------


def test_files_without_a_valid_network_name_are_skipped_with_the_reason(env: Env) -> None:
    (env.conf / "10-noname.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "", "plugins": [{"type": "testplugin"}]})
    )
    env.write("20-bad.conflist", "bad name!")
    (env.conf / "30-single.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "-dash", "type": "testplugin"})
    )
    m = env.manager()
    loaded = m.networks()
    assert loaded.networks == {} and loaded.defaults == ()
    skipped = {os.path.basename(p): why for p, why in loaded.skipped.items()}
    assert skipped == {
        "10-noname.conflist": "the network has no name",
        "20-bad.conflist": "network name 'bad name!' is not valid (it must match "
        "^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$)",
        "30-single.conf": "network name '-dash' is not valid (it must match "
        "^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$)",
    }
    with pytest.raises(NotReadyError) as info:
        m.status()
    assert "10-noname.conflist: the network has no name" in str(info.value)
    env.write("40-good.conflist", "good")
    assert m.networks().defaults == ("good",)
    m.status()


def test_a_container_torn_down_leaves_no_lock_file(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-bad.conflist", "bad", fail("ADD"))
    m = env.manager()
    m.setup("c1", "ns", networks=["a"])
    assert container_locks(env) == ["c1"]  # attached: kept
    m.check("c1", "ns")
    m.teardown("c1")
    assert container_locks(env) == []
    with pytest.raises(SetupError):
        m.setup("c2", "ns", networks=["a", "bad"])
    assert container_locks(env) == []  # rolled back: nothing left
    m.teardown("never-set-up")
    with pytest.raises(libcni.NotAttachedError):
        m.check("never-set-up", "ns")
    assert container_locks(env) == []
    plant_record(env, "bad", "c3", "eth0", conf("bad", fail("DEL")))
    with pytest.raises(TeardownError):  # a DEL that fails: the container keeps its lock
        m.teardown("c3")
    assert container_locks(env) == ["c3"]


# -- attachments another tool DELeted (issue 28) ------------------------------------------


@pytest.mark.parametrize("how", ["teardown", "inspect", "check", "gc", "setup", "async"])
def test_attachments_another_tool_deleted_are_not_in_progress_nor_deleted_again(
    env: Env, how: str
) -> None:
    # Go's DelNetworkList or GCNetworkList, or cnitool, DELeted the container's attachments
    # and removed their entries: libcni's records, marked complete, are dropped where found.
    env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", "/var/run/netns/c1")
    assert records_of(env, "c1") == ["a-c1-eth0", "cni-loopback-c1-lo"]
    for name in env.cached():
        (env.cache / "results" / name).unlink()
    env.record.unlink()
    if how == "teardown":
        m.teardown("c1")
    elif how == "inspect":
        view = m.inspect("c1")
        assert (view.attachments, view.incomplete) == ((), ())
        assert dels(env) == [] and records_of(env, "c1") == []
        return  # (its container's lock file goes at the next teardown or GC)
    elif how == "check":
        with pytest.raises(libcni.NotAttachedError):  # nothing left of it: an unknown container
            m.check("c1", "/var/run/netns/c1")
    elif how == "gc":
        m.gc([])
    elif how == "setup":
        m.setup("c1", "/var/run/netns/c1")  # set up anew: no dead attempt to DEL first
        assert {r["command"] for r in env.runs()} == {"ADD"}
        assert records_of(env, "c1") == ["a-c1-eth0", "cni-loopback-c1-lo"]
        return
    else:

        async def main() -> None:
            am = env.amanager()
            assert (await am.inspect("c1")).incomplete == ()
            await am.teardown("c1")

        asyncio.run(main())
    assert dels(env) == []
    assert records_of(env, "c1") == [] and container_locks(env) == []


def test_gc_counts_no_attachment_another_tool_deleted_as_valid(env: Env) -> None:
    env.write("10-a.conflist", "a", version="1.1.0")
    m = env.manager(loopback=False)
    m.setup("live", "/var/run/netns/live")
    m.setup("other", "/var/run/netns/other")
    (env.cache / "results" / "a-live-eth0").unlink()  # Go DELeted it
    env.record.unlink()
    m.gc(["live", "other"])
    assert dels(env) == []
    [gc] = [r for r in env.runs() if r["command"] == "GC"]
    assert gc["stdin"]["cni.dev/valid-attachments"] == [{"containerID": "other", "ifname": "eth0"}]
