"""Every CNIConfig operation against real plugin processes (behaviour.md §4).

The plugins are copies of ``tests/plugins/testplugin`` under several type
names; each call appends what the plugin received to a record file.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import TESTPLUGIN, Env

import libcni
from libcni import (
    CacheError,
    CheckNotSupportedError,
    CNIConfig,
    ConfigError,
    GCArgs,
    GCAttachment,
    GCError,
    InvalidNetworkError,
    PluginError,
    PluginNotFoundError,
    PluginTimeoutError,
    RuntimeConf,
    ValidationError,
    VersionError,
)

RESULT = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:02:03", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.1.2.1"]},
}


# -- ADD -----------------------------------------------------------------------


def test_add_runs_plugins_in_order_chaining_prev_result(env: Env) -> None:
    r1 = dict(RESULT, ips=[{"address": "10.9.9.9/16", "interface": 0}])
    net = env.conflist(
        env.plugin("p1", ADD={"result": r1}),
        env.plugin("p2", ADD={"passthrough": True}),
        env.plugin("p3", ADD={"result": RESULT}),
    )
    result = env.cni.add_network_list(net, env.rt)

    calls = env.calls()
    assert [c["stdin"]["type"] for c in calls] == ["p1", "p2", "p3"]
    assert "prevResult" not in calls[0]["stdin"]
    assert calls[1]["stdin"]["prevResult"]["ips"] == r1["ips"]
    assert calls[2]["stdin"]["prevResult"]["ips"] == r1["ips"]  # p2 passed p1's through
    assert result.to_dict() == RESULT
    for call in calls:
        assert call["stdin"]["name"] == "testnet"
        assert call["stdin"]["cniVersion"] == "1.0.0"
        assert call["env"]["CNI_COMMAND"] == "ADD"
        assert call["env"]["CNI_CONTAINERID"] == "ctr1"
        assert call["env"]["CNI_NETNS"] == "/var/run/netns/ctr1"
        assert call["env"]["CNI_IFNAME"] == "eth0"
        assert call["env"]["CNI_PATH"] == str(env.plugins)


def test_add_caches_the_final_result_with_config_args_and_netns(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}), env.plugin("p2"))
    rt = RuntimeConf(
        "ctr1",
        "/var/run/netns/ctr1",
        "eth0",
        args=[("K8S_POD_NAME", "web")],
        capability_args={"portMappings": [{"hostPort": 80}]},
    )
    env.cni.add_network_list(net, rt)
    entry = json.loads(env.entry_path().read_bytes())
    assert entry["kind"] == "cniCacheV1"
    assert base64.b64decode(entry["config"]) == net.bytes
    assert entry["result"] == RESULT
    assert entry["cniArgs"] == [["K8S_POD_NAME", "web"]]
    assert entry["capabilityArgs"] == {"portMappings": [{"hostPort": 80}]}
    assert entry["netns"] == "/var/run/netns/ctr1"
    assert (entry["containerId"], entry["networkName"], entry["ifName"]) == (
        "ctr1",
        "testnet",
        "eth0",
    )


def test_add_runtime_config_and_cni_args_reach_the_plugin(env: Env) -> None:
    p1 = env.plugin("p1")
    p1["capabilities"] = {"portMappings": True, "mac": False}
    net = env.conflist(p1)
    rt = RuntimeConf(
        "ctr1",
        "",
        "eth0",
        args=[("A", "1"), ("B", "2")],
        capability_args={"portMappings": [{"hostPort": 8080}], "mac": "aa:bb:cc:dd:ee:ff"},
    )
    env.cni.add_network_list(net, rt)
    call = env.calls()[0]
    assert call["stdin"]["runtimeConfig"] == {"portMappings": [{"hostPort": 8080}]}
    assert call["env"]["CNI_ARGS"] == "A=1;B=2"
    assert "args" not in call["stdin"]


def test_add_failure_stops_the_chain_names_the_plugin_and_caches_nothing(env: Env) -> None:
    net = env.conflist(
        env.plugin("p1"),
        env.plugin(
            "p2", ADD={"error": {"code": 117, "msg": "no more addresses", "details": "range full"}}
        ),
        env.plugin("p3"),
    )
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    err = info.value
    assert (err.code, err.msg, err.details) == (117, "no more addresses", "range full")
    assert (err.plugin, err.command, err.network, err.container_id) == (
        "p2",
        "ADD",
        "testnet",
        "ctr1",
    )
    assert err.exit_code == 1
    assert [c["stdin"]["type"] for c in env.calls()] == ["p1", "p2"]
    assert not env.entry_path().exists()


def test_add_garbage_output_is_a_plugin_error_naming_the_plugin(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"stdout": "this is not json"}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    assert info.value.plugin == "p1"
    assert info.value.command == "ADD"
    assert not env.entry_path().exists()


def test_add_result_with_unknown_version_is_refused(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"result": dict(RESULT, cniVersion="7.0.0")}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    assert info.value.code == 1
    assert info.value.plugin == "p1"


def test_add_result_keeps_its_own_version_and_unknown_fields(env: Env) -> None:
    r = {
        "cniVersion": "0.4.0",
        "ips": [{"version": "4", "address": "10.0.0.2/24"}],
        "dns": {},
        "x-extra": 1,
    }
    net = env.conflist(env.plugin("p1", ADD={"result": r}), env.plugin("p2"))
    result = env.cni.add_network_list(net, env.rt)
    assert result.cni_version == "0.4.0"
    assert env.calls()[1]["stdin"]["prevResult"]["x-extra"] == 1
    assert result.to_dict()["x-extra"] == 1


@pytest.mark.parametrize(
    ("rt", "code"),
    [
        (RuntimeConf("", "", "eth0"), 3),
        (RuntimeConf("-bad", "", "eth0"), 4),
        (RuntimeConf("ctr1", "", ""), 4),
        (RuntimeConf("ctr1", "", "a" * 16), 4),
        (RuntimeConf("ctr1", "", "eth/0"), 4),
    ],
)
def test_add_validates_ids_before_anything_runs(env: Env, rt: RuntimeConf, code: int) -> None:
    net = env.conflist(env.plugin("p1"))
    with pytest.raises(ValidationError) as info:
        env.cni.add_network_list(net, rt)
    assert info.value.code == code
    assert env.calls() == []


def test_add_validates_ids_before_it_looks_for_the_plugins(env: Env) -> None:
    # The caller's bad input is named first, whichever plugin of the chain is missing.
    net = env.conflist(env.plugin("p1"), {"type": "no-such-plugin"})
    with pytest.raises(ValidationError):
        env.cni.add_network_list(net, RuntimeConf("c/1", "", "eth0"))
    with pytest.raises(libcni.PluginNotFoundError):
        env.cni.add_network_list(net, env.rt)
    assert env.calls() == []


def test_add_validates_the_network_name(env: Env) -> None:
    net = libcni.conf_list_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "bad name", "plugins": [env.plugin("p1")]})
    )
    with pytest.raises(ValidationError) as info:
        env.cni.add_network_list(net, env.rt)
    assert info.value.code == 7
    assert env.calls() == []


def test_add_with_a_missing_plugin_runs_nothing(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), env.plugin("nosuch"))
    with pytest.raises(PluginNotFoundError) as info:
        env.cni.add_network_list(net, env.rt)
    assert info.value.plugin == "nosuch"
    assert str(env.plugins) in info.value.paths
    assert env.calls() == []


@pytest.mark.parametrize("args", [[("a;b", "1")], [("k", "v=w")], [("", "v")]])
def test_add_refuses_unrepresentable_cni_args_before_running(
    env: Env, args: list[tuple[str, str]]
) -> None:
    net = env.conflist(env.plugin("p1"))
    with pytest.raises(ConfigError):
        env.cni.add_network_list(net, RuntimeConf("ctr1", "", "eth0", args=args))
    assert env.calls() == []


def test_plugin_names_that_leave_the_plugin_directories_are_refused(
    env: Env, tmp_path: Path
) -> None:
    outside = tmp_path / "evil"
    outside.symlink_to(TESTPLUGIN)
    for bad in ("../evil", str(outside), ".", ".."):
        net = env.conflist({"type": bad, "record": str(env.record)})
        with pytest.raises(ConfigError):
            env.cni.add_network_list(net, env.rt)
    assert env.calls() == []


# -- CHECK ---------------------------------------------------------------------


def test_check_sends_the_cached_result_to_every_plugin_in_order(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}), env.plugin("p2"))
    env.cni.add_network_list(net, env.rt)
    env.record.unlink()
    env.cni.check_network_list(net, env.rt)
    calls = env.calls()
    assert env.types_called() == [("p1", "CHECK"), ("p2", "CHECK")]
    assert all(c["stdin"]["prevResult"] == RESULT for c in calls)


def test_check_without_cached_result_sends_no_prev_result(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.check_network_list(net, env.rt)
    assert "prevResult" not in env.calls()[0]["stdin"]


def test_check_converts_the_cached_result_to_the_list_version(env: Env) -> None:
    r = {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}], "dns": {}}
    net = env.conflist(env.plugin("p1", ADD={"result": r}), version="1.0.0")
    env.cni.add_network_list(net, env.rt)
    env.cni.check_network_list(net, env.rt)
    prev = env.calls()[-1]["stdin"]["prevResult"]
    assert prev["cniVersion"] == "1.0.0"
    assert prev["ips"] == [{"address": "10.0.0.2/24"}]


@pytest.mark.parametrize("version", ["0.3.1", "0.3.0", "0.2.0", "0.1.0"])
def test_check_needs_version_0_4_0(env: Env, version: str) -> None:
    net = env.conflist(env.plugin("p1"), version=version, disableCheck=True)
    with pytest.raises(CheckNotSupportedError) as info:
        env.cni.check_network_list(net, env.rt)
    assert isinstance(info.value, VersionError)
    assert env.calls() == []


def test_check_with_unparsable_version_is_a_version_error(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.x")
    with pytest.raises(VersionError):
        env.cni.check_network_list(net, env.rt)


def test_disable_check_runs_nothing(env: Env) -> None:
    net = env.conflist(
        env.plugin("p1", CHECK={"error": {"code": 100, "msg": "x"}}), disableCheck=True
    )
    env.cni.check_network_list(net, env.rt)
    assert env.calls() == []


def test_check_failure_stops_and_raises(env: Env) -> None:
    net = env.conflist(
        env.plugin("p1", CHECK={"error": {"code": 100, "msg": "interface gone"}}), env.plugin("p2")
    )
    with pytest.raises(PluginError) as info:
        env.cni.check_network_list(net, env.rt)
    assert (info.value.msg, info.value.command, info.value.plugin) == (
        "interface gone",
        "CHECK",
        "p1",
    )
    assert env.types_called() == [("p1", "CHECK")]


def test_check_reports_a_corrupt_cache_entry(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, env.rt)
    env.entry_path().write_bytes(b"{not json")
    with pytest.raises(CacheError):
        env.cni.check_network_list(net, env.rt)


# -- DEL -----------------------------------------------------------------------


def test_del_runs_in_reverse_with_cached_result_then_forgets_it(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}), env.plugin("p2"), env.plugin("p3"))
    env.cni.add_network_list(net, env.rt)
    env.record.unlink()
    env.cni.del_network_list(net, env.rt)
    assert env.types_called() == [("p3", "DEL"), ("p2", "DEL"), ("p1", "DEL")]
    assert all(c["stdin"]["prevResult"] == RESULT for c in env.calls())
    assert all(c["env"]["CNI_COMMAND"] == "DEL" for c in env.calls())
    assert not env.entry_path().exists()


def test_second_del_succeeds_without_prev_result(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, env.rt)
    env.cni.del_network_list(net, env.rt)
    env.record.unlink()
    env.cni.del_network_list(net, env.rt)
    assert "prevResult" not in env.calls()[0]["stdin"]


@pytest.mark.parametrize("version", ["0.3.1", "0.2.0"])
def test_del_below_0_4_0_sends_no_prev_result(env: Env, version: str) -> None:
    r = {"cniVersion": version, "ips": [{"version": "4", "address": "10.0.0.2/24"}], "dns": {}}
    if version == "0.2.0":
        r = {"cniVersion": version, "ip4": {"ip": "10.0.0.2/24"}, "dns": {}}
    net = env.conflist(env.plugin("p1", ADD={"result": r}), version=version)
    env.cni.add_network_list(net, env.rt)
    assert env.entry_path().exists()
    env.cni.del_network_list(net, env.rt)
    assert "prevResult" not in env.calls()[-1]["stdin"]
    assert not env.entry_path().exists()


def test_del_failure_keeps_the_cache_entry_for_a_retry(env: Env) -> None:
    net = env.conflist(
        env.plugin("p1"), env.plugin("p2", DEL={"error": {"code": 11, "msg": "busy"}})
    )
    env.cni.add_network_list(net, env.rt)
    with pytest.raises(PluginError) as info:
        env.cni.del_network_list(net, env.rt)
    assert (info.value.plugin, info.value.command, info.value.code) == ("p2", "DEL", 11)
    assert env.entry_path().exists()
    assert env.types_called()[-1] == ("p2", "DEL")  # p1 never ran: the chain stopped


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{garbage",
        b"[1,2]",
        json.dumps({"kind": "cniCacheV1", "containerId": 5}).encode(),
        json.dumps(
            {
                "kind": "cniCacheV1",
                "containerId": "ctr1",
                "ifName": "eth0",
                "networkName": "testnet",
                "config": "",
                "result": {"cniVersion": "9.9.9"},
            }
        ).encode(),
    ],
    ids=["empty", "corrupt", "not-object", "wrong-types", "unknown-version"],
)
def test_del_with_a_bad_cache_entry_removes_it_and_goes_on(env: Env, content: bytes) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, env.rt)
    env.entry_path().write_bytes(content)
    env.cni.del_network_list(net, env.rt)
    assert "prevResult" not in env.calls()[-1]["stdin"]
    assert not env.entry_path().exists()


def test_del_does_not_validate_ids_and_works_without_netns(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.del_network_list(net, RuntimeConf("-odd id", "", "eth0"))
    assert env.calls()[0]["env"]["CNI_CONTAINERID"] == "-odd id"


@pytest.mark.parametrize(
    "rt",
    [
        RuntimeConf("../../etc", "", "eth0"),
        RuntimeConf("c", "", "../../x"),
        RuntimeConf("c\0", "", "eth0"),
    ],
)
def test_every_operation_refuses_ids_that_leave_the_cache(env: Env, rt: RuntimeConf) -> None:
    net = env.conflist(env.plugin("p1"))
    for op in (env.cni.del_network_list, env.cni.check_network_list, env.cni.add_network_list):
        with pytest.raises(ValidationError):
            op(net, rt)
    with pytest.raises(ValidationError):
        env.cni.get_network_list_cached_result(net, rt)
    assert env.calls() == []
    assert not (env.cache.parent / "etc").exists()


@pytest.mark.parametrize("rt", [RuntimeConf("ctr1", "", ""), RuntimeConf("", "", "eth0")])
def test_empty_names_are_refused_by_every_operation_without_hanging(
    env: Env, rt: RuntimeConf
) -> None:
    net = env.conflist(env.plugin("p1"))
    outcomes: dict[str, BaseException | None] = {}

    def run() -> None:
        for op in (env.cni.del_network_list, env.cni.check_network_list, env.cni.add_network_list):
            try:
                op(net, rt)
                outcomes[op.__name__] = None
            except BaseException as e:
                outcomes[op.__name__] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), f"an operation hung; finished: {sorted(outcomes)}"
    assert all(isinstance(e, ValidationError) for e in outcomes.values()), outcomes
    assert len(outcomes) == 3
    assert env.calls() == []


# -- single plugin variants --------------------------------------------------


def test_single_plugin_add_check_del(env: Env) -> None:
    conf = libcni.conf_from_bytes(
        json.dumps(dict(env.plugin("p1", ADD={"result": RESULT}), name="solo", cniVersion="1.0.0"))
    )
    result = env.cni.add_network(conf, env.rt)
    assert result.to_dict() == RESULT
    entry = json.loads(env.entry_path("solo").read_bytes())
    assert base64.b64decode(entry["config"]) == conf.bytes
    env.cni.check_network(conf, env.rt)
    env.cni.del_network(conf, env.rt)
    assert [c["command"] for c in env.calls()] == ["ADD", "CHECK", "DEL"]
    assert all(c["stdin"]["name"] == "solo" for c in env.calls())
    assert env.calls()[2]["stdin"]["prevResult"] == RESULT
    assert not env.entry_path("solo").exists()


# -- cached results and configurations ---------------------------------------


def test_cached_result_and_config_getters(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}))
    assert env.cni.get_network_list_cached_result(net, env.rt) is None
    assert env.cni.get_network_list_cached_config(net, env.rt) is None
    rt = RuntimeConf("ctr1", "/n", "eth0", args=[("K", "V")], capability_args={"mac": "x"})
    env.cni.add_network_list(net, rt)

    cached = env.cni.get_network_list_cached_result(net, RuntimeConf("ctr1", "", "eth0"))
    assert cached is not None and cached.to_dict() == RESULT
    got = env.cni.get_network_list_cached_config(net, RuntimeConf("ctr1", "", "eth0"))
    assert got is not None
    config, rt2 = got
    assert config == net.bytes
    assert rt2.args == (("K", "V"),)
    assert rt2.capability_args == {"mac": "x"}
    assert rt2.container_id == "ctr1"


def test_cached_result_is_converted_to_the_configuration_version(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}))
    env.cni.add_network_list(net, env.rt)
    older = env.conflist(env.plugin("p1"), version="0.3.1")
    cached = env.cni.get_network_list_cached_result(older, env.rt)
    assert cached is not None and cached.cni_version == "0.3.1"
    assert cached.to_dict()["ips"][0]["version"] == "4"


def test_cached_getters_need_every_name(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    with pytest.raises(CacheError) as info:
        env.cni.get_network_list_cached_result(net, RuntimeConf("ctr1", "", ""))
    assert "interface" in str(info.value)
    with pytest.raises(CacheError) as info:
        env.cni.get_network_list_cached_config(net, RuntimeConf("", "", "eth0"))
    assert "container" in str(info.value)


def test_get_cached_attachments(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, RuntimeConf("ctr1", "/ns/1", "eth0", args=[("A", "B")]))
    env.cni.add_network_list(net, RuntimeConf("ctr2", "/ns/2", "eth0"))
    env.cni.add_network_list(net, RuntimeConf("ctr1", "/ns/1", "net1"))
    all_ = env.cni.get_cached_attachments()
    assert [(a.container_id, a.ifname) for a in all_] == [
        ("ctr1", "eth0"),
        ("ctr1", "net1"),
        ("ctr2", "eth0"),
    ]
    one = env.cni.get_cached_attachments("ctr1")
    assert {a.ifname for a in one} == {"eth0", "net1"}
    assert (
        one[0].network == "testnet" and one[0].netns == "/ns/1" and one[0].cni_args == (("A", "B"),)
    )
    assert one[0].config == net.bytes


# -- GC ------------------------------------------------------------------------


def _add_two(env: Env, net: libcni.NetworkConfigList) -> None:
    env.cni.add_network_list(net, RuntimeConf("keep", "/ns/keep", "eth0"))
    env.cni.add_network_list(net, RuntimeConf("stale", "/ns/stale", "eth0", args=[("X", "1")]))
    env.record.unlink()


def test_gc_deletes_stale_attachments_and_sends_gc(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), env.plugin("p2"), version="1.1.0")
    _add_two(env, net)
    env.cni.gc_network_list(net, GCArgs([GCAttachment("keep", "eth0")]))
    calls = env.calls()
    dels = [c for c in calls if c["command"] == "DEL"]
    assert [(c["stdin"]["type"], c["env"]["CNI_CONTAINERID"]) for c in dels] == [
        ("p2", "stale"),
        ("p1", "stale"),
    ]
    assert dels[0]["env"]["CNI_NETNS"] == "/ns/stale" and dels[0]["env"]["CNI_ARGS"] == "X=1"
    gcs = [c for c in calls if c["command"] == "GC"]
    assert [c["stdin"]["type"] for c in gcs] == ["p1", "p2"]
    expected = [{"containerID": "keep", "ifname": "eth0"}]
    assert all(c["stdin"]["cni.dev/valid-attachments"] == expected for c in gcs)
    assert all(c["env"]["CNI_CONTAINERID"] == "" for c in gcs)
    assert env.entry_path(cid="keep").exists()
    assert not env.entry_path(cid="stale").exists()


def test_gc_without_valid_attachments_deletes_every_attachment_of_the_network(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    other = libcni.conf_list_from_bytes(
        json.dumps({"cniVersion": "1.1.0", "name": "othernet", "plugins": [env.plugin("p1")]})
    )
    _add_two(env, net)
    env.cni.add_network_list(other, RuntimeConf("keep", "", "eth0"))
    env.cni.gc_network_list(net)
    assert not env.entry_path(cid="keep").exists() and not env.entry_path(cid="stale").exists()
    assert env.entry_path("othernet", "keep").exists()


def test_gc_below_1_1_0_deletes_stale_but_sends_no_gc(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.0.0")
    _add_two(env, net)
    env.cni.gc_network_list(net, GCArgs([GCAttachment("keep", "eth0")]))
    assert [c["command"] for c in env.calls()] == ["DEL"]


def test_disable_gc_does_nothing(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0", disableGC=True)
    _add_two(env, net)
    env.cni.gc_network_list(net)
    assert env.calls() == []
    assert env.entry_path(cid="stale").exists()


def test_gc_removes_unreadable_entries_of_its_network(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    env.cni.add_network_list(net, RuntimeConf("keep", "", "eth0"))
    env.entry_path(cid="broken").write_bytes(b"")
    old = env.entry_path(cid="broken").stat().st_mtime - 600
    os.utime(env.entry_path(cid="broken"), (old, old))
    env.cni.gc_network_list(net, GCArgs([GCAttachment("keep", "eth0")]))
    assert not env.entry_path(cid="broken").exists()
    assert env.entry_path(cid="keep").exists()


def test_gc_never_deletes_the_attachment_named_inside_a_misnamed_file(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.0.0")
    env.cni.add_network_list(net, RuntimeConf("ghost", "", "eth0"))
    # The entry alone, as the Go library writes it (ghost's record would rightly make GC
    # DEL ghost, whose ADD it saw and no DEL followed).
    shutil.rmtree(env.cache / "records")
    misnamed = env.entry_path(cid="other")
    env.entry_path(cid="ghost").rename(misnamed)  # holds ghost's names under other's file name
    old = misnamed.stat().st_mtime - 600
    os.utime(misnamed, (old, old))
    env.record.unlink()
    env.cni.gc_network_list(net)
    assert env.calls() == []  # no DEL of "ghost" on behalf of a file that is not its own
    assert not misnamed.exists()  # removed, not DELed again at every GC


def test_gc_collects_every_error(env: Env) -> None:
    net = env.conflist(
        env.plugin(
            "p1",
            DEL={"error": {"code": 100, "msg": "del failed"}},
            GC={"error": {"code": 101, "msg": "gc failed"}},
        ),
        env.plugin("p2", GC={"error": {"code": 102, "msg": "gc2 failed"}}),
        version="1.1.0",
    )
    _add_two(env, net)
    with pytest.raises(GCError) as info:
        env.cni.gc_network_list(net)
    codes = sorted(e.code for e in info.value.errors)
    assert codes == [100, 100, 101, 102]  # two stale DELs, then both GCs: nothing stopped GC
    assert all(isinstance(e, PluginError) for e in info.value.errors)


def _gc_networks_cache(env: Env) -> tuple[libcni.NetworkConfigList, ...]:
    """Networks a (1.1.0) and b (1.0.0), and "gone" known only from the cache, each with a
    live and a dead container's attachment."""
    nets = tuple(
        env.conflist(env.plugin("p1"), name=name, version=version)
        for name, version in (("a", "1.1.0"), ("b", "1.0.0"), ("gone", "1.0.0"))
    )
    for net in nets:
        for cid in ("live", "dead"):
            env.cni.add_network_list(net, RuntimeConf(cid, f"/ns/{cid}", "eth0"))
    env.record.unlink()
    return nets


def test_gc_networks_collects_every_network_from_one_listing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, _ = _gc_networks_cache(env)
    from libcni.cache import _files

    reads: list[str] = []
    listed: list[str] = []
    real_read, real_listdir = _files._read_ident_at, os.listdir

    def read(dfd: int, name: str, path: str) -> object:
        got = real_read(dfd, name, path)
        reads.append(path)
        return got

    def listdir(path: Any = ".") -> Any:
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path)
        listed.append(os.path.basename(where))
        return real_listdir(path)

    monkeypatch.setattr(_files, "_read_ident_at", read)
    monkeypatch.setattr(os, "listdir", listdir)
    for run in range(2):  # the second run has nothing to collect: results/ does not change
        old = env.results_dir().stat().st_mtime - 600  # (else listed again under each lock)
        os.utime(env.results_dir(), (old, old))
        reads.clear()
        listed.clear()
        env.cni.gc_networks([a, b], valid_containers=["live"], cached_networks=True)
        # Each file read once, but a stale entry twice: GC's scan, then its DEL.
        twice = sorted(p.rsplit("/", 1)[1] for p in set(reads) if reads.count(p) > 1)
        assert len(reads) == len(set(reads)) + len(twice), reads
        assert twice == ([] if run else ["a-dead-eth0", "b-dead-eth0", "gone-dead-eth0"])
        # The live entries of a and b are settled by their names; one of gone is read for
        # its configuration.
        assert not [r for r in reads if r.endswith(("/a-live-eth0", "/b-live-eth0"))], reads
    monkeypatch.undo()
    assert listed.count("results") == 1, listed
    dels = sorted((c["stdin"]["name"], c["env"]["CNI_CONTAINERID"]) for c in env.calls()
                  if c["command"] == "DEL")  # fmt: skip
    assert dels == [("a", "dead"), ("b", "dead"), ("gone", "dead")]
    gcs = [c for c in env.calls() if c["command"] == "GC"]  # a alone is at 1.1.0
    assert [gc["stdin"]["name"] for gc in gcs] == ["a", "a"]
    assert gcs[0]["stdin"]["cni.dev/valid-attachments"] == [
        {"containerID": "live", "ifname": "eth0"}
    ]
    assert env.cached() == ["a-live-eth0", "b-live-eth0", "gone-live-eth0"]


def test_gc_networks_without_cached_networks_leaves_the_others(env: Env) -> None:
    a, b, _ = _gc_networks_cache(env)
    env.cni.gc_networks([a, b], GCArgs([GCAttachment("live", "eth0")]))
    assert env.cached() == ["a-live-eth0", "b-live-eth0", "gone-dead-eth0", "gone-live-eth0"]
    env.cni.gc_network_list(a)  # gc_networks([a]): no valid attachment, the live one goes
    assert env.cached() == ["b-live-eth0", "gone-dead-eth0", "gone-live-eth0"]


def test_async_gc_networks_is_one_gc_operation_per_network_for_observers(env: Env) -> None:
    import asyncio

    a, b, _ = _gc_networks_cache(env)
    events: list[libcni.Event] = []
    cni = env.aio(observers=[events.append])
    asyncio.run(cni.gc_networks([a, b], valid_containers=["live"]))
    ops = [(e.operation, e.network) for e in events if e.kind == "operation" and e.phase == "start"]
    assert ops == [("GC", "a"), ("GC", "b")]
    runs = [(e.operation, e.network) for e in events if e.kind == "plugin" and e.phase == "end"]
    assert runs == [("DEL", "a"), ("GC", "a"), ("DEL", "b")]
    assert env.cached() == ["a-live-eth0", "b-live-eth0", "gone-dead-eth0", "gone-live-eth0"]


def test_gc_networks_refuses_a_list_alone_and_a_network_given_twice(env: Env) -> None:
    a = env.conflist(name="a")
    with pytest.raises(TypeError, match="sequence of NetworkConfigList"):
        env.cni.gc_networks(a)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="given twice"):
        env.cni.gc_networks([a, a])
    with pytest.raises(TypeError, match="gc_networks"):
        env.cni.gc_networks([libcni.conf_from_bytes(b'{"name": "p", "type": "p1"}')])  # type: ignore[list-item]


# -- STATUS --------------------------------------------------------------------


def test_status_runs_every_plugin_in_order(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), env.plugin("p2"), version="1.1.0")
    env.cni.get_status_network_list(net)
    assert env.types_called() == [("p1", "STATUS"), ("p2", "STATUS")]
    assert "prevResult" not in env.calls()[0]["stdin"]


@pytest.mark.parametrize("code", [50, 51])
def test_status_error_codes_are_preserved(env: Env, code: int) -> None:
    net = env.conflist(
        env.plugin("p1", STATUS={"error": {"code": code, "msg": "not ready"}}),
        env.plugin("p2"),
        version="1.1.0",
    )
    with pytest.raises(PluginError) as info:
        env.cni.get_status_network_list(net)
    assert info.value.code == code
    assert env.types_called() == [("p1", "STATUS")]


def test_status_below_1_1_0_runs_nothing(env: Env) -> None:
    net = env.conflist(
        env.plugin("p1", STATUS={"error": {"code": 50, "msg": "x"}}), version="1.0.0"
    )
    env.cni.get_status_network_list(net)
    assert env.calls() == []


# -- VERSION and validation --------------------------------------------------


def test_get_version_info(env: Env) -> None:
    info = env.cni.get_version_info("p1")
    assert info.cni_version == "1.1.0"
    assert "0.4.0" in info.supported_versions


@pytest.mark.parametrize(
    ("reply", "exit_code", "expected"),
    [
        ('{"code": 4, "msg": "unknown CNI_COMMAND: VERSION"}', 1, ["0.1.0"]),
        ('{"cniVersion": "0.2.0"}', 0, ["0.1.0", "0.2.0"]),
        ('{"cniVersion": "0.3.1", "supportedVersions": ["0.3.1"]}', 0, ["0.3.1"]),
    ],
)
def test_version_legacy_rules(
    env: Env, monkeypatch: pytest.MonkeyPatch, reply: str, exit_code: int, expected: list[str]
) -> None:
    monkeypatch.setenv("TESTPLUGIN_VERSION_REPLY", reply)
    monkeypatch.setenv("TESTPLUGIN_VERSION_EXIT", str(exit_code))
    assert env.cni.get_version_info("p1").supported_versions == expected


@pytest.mark.parametrize(
    "reply", ['{"cniVersion": "0.3.1"}', "[]", "garbage", '{"supportedVersions": ["1.0.0"]}']
)
def test_malformed_version_reply_is_a_version_error(
    env: Env, monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    monkeypatch.setenv("TESTPLUGIN_VERSION_REPLY", reply)
    with pytest.raises(VersionError):
        env.cni.get_version_info("p1")


def test_validate_returns_enabled_capabilities(env: Env) -> None:
    p1 = env.plugin("p1")
    p1["capabilities"] = {"portMappings": True, "mac": False}
    p2 = env.plugin("p2")
    p2["capabilities"] = {"bandwidth": True}
    assert env.cni.validate_network_list(env.conflist(p1, p2)) == ["bandwidth", "portMappings"]


def test_validate_finds_missing_plugins_and_unsupported_versions(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PluginNotFoundError):
        env.cni.validate_network_list(env.conflist(env.plugin("p1"), env.plugin("nosuch")))
    monkeypatch.setenv(
        "TESTPLUGIN_VERSION_REPLY", '{"cniVersion":"0.3.1","supportedVersions":["0.3.1"]}'
    )
    with pytest.raises(VersionError) as info:
        env.cni.validate_network(
            libcni.conf_from_bytes(json.dumps({"type": "p2", "cniVersion": "1.0.0"}))
        )
    assert "p2" in str(info.value) and "1.0.0" in str(info.value)
    with pytest.raises(InvalidNetworkError) as cinfo:
        env.cni.validate_network_list(env.conflist(env.plugin("p3"), env.plugin("nosuch")))
    assert isinstance(cinfo.value, ConfigError)
    assert "nosuch" in str(cinfo.value) and "p3" in str(cinfo.value)  # both problems reported
    assert [type(e) for e in cinfo.value.errors] == [VersionError, PluginNotFoundError]


def test_validate_checks_the_ipam_plugin_binary_and_versions(env: Env) -> None:
    p1 = env.plugin("p1")
    p1["ipam"] = {"type": "nosuch-ipam"}
    with pytest.raises(PluginNotFoundError) as info:
        env.cni.validate_network_list(env.conflist(p1))
    assert info.value.plugin == "nosuch-ipam"
    with pytest.raises(PluginNotFoundError, match="nosuch-ipam"):
        env.cni.validate_network(libcni.conf_from_bytes(json.dumps({"cniVersion": "1.0.0", **p1})))
    # A real binary that answers VERSION with 0.3.1 only.
    old = env.plugins / "old-ipam"
    old.write_text('#!/bin/sh\necho \'{"cniVersion":"0.3.1","supportedVersions":["0.3.1"]}\'\n')
    old.chmod(0o755)
    p1["ipam"] = {"type": "old-ipam"}
    with pytest.raises(VersionError) as vinfo:
        env.cni.validate_network_list(env.conflist(p1))
    assert 'plugin old-ipam does not support config version "1.0.0"' in str(vinfo.value)
    assert env.cni.validate_network_list(env.conflist(p1, version="0.3.1")) == []
    p1["ipam"] = {"type": "p2"}
    assert env.cni.validate_network_list(env.conflist(p1)) == []


def test_validate_probes_each_binary_once(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTPLUGIN_RECORD", str(env.record))
    net = env.conflist({"type": "p1"}, {"type": "p1"}, {"type": "p2"})
    env.cni.validate_network_list(net)
    env.cni.validate_network_list(net)
    versions = [c for c in env.calls() if c.get("command") == "VERSION"]
    assert len(versions) == 2  # p1 and p2, once each
    mtime = (env.plugins / "p1").stat().st_mtime_ns + 10**9
    os.utime(env.plugins / "p1", ns=(mtime, mtime))
    env.cni.validate_network_list(net)
    assert len([c for c in env.calls() if c.get("command") == "VERSION"]) == 3  # p1 changed


# -- timeouts ------------------------------------------------------------------


def test_operation_timeout_kills_the_plugin(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"sleep": 30}))
    with pytest.raises(PluginTimeoutError) as info:
        env.cni.add_network_list(net, env.rt, timeout=0.5)
    assert isinstance(info.value, TimeoutError)
    assert info.value.plugin == "p1" and info.value.command == "ADD"
    assert info.value.network == "testnet" and info.value.container_id == "ctr1"
    assert "0.5s timeout" in info.value.msg  # the operation's limit, not the time left
    assert not env.entry_path().exists()


def test_default_timeout_from_cniconfig_and_per_call_override(env: Env) -> None:
    cni = CNIConfig([env.plugins], cache_dir=env.cache, timeout=0.5)
    net = env.conflist(env.plugin("p1", ADD={"sleep": 1.5, "passthrough": True}))
    with pytest.raises(PluginTimeoutError):
        cni.add_network_list(net, env.rt)
    assert cni.add_network_list(net, env.rt, timeout=10) is not None


def test_timeout_is_a_deadline_for_the_whole_chain(env: Env) -> None:
    net = env.conflist(
        *(env.plugin(p, ADD={"sleep": 0.4, "passthrough": True}) for p in ("p1", "p2", "p3"))
    )
    with pytest.raises(PluginTimeoutError) as info:
        env.cni.add_network_list(net, env.rt, timeout=1.0)
    assert "1s timeout" in info.value.msg
    assert info.value.network == "testnet" and info.value.container_id == "ctr1"


# -- cache directory selection -------------------------------------------------


def test_runtime_conf_cache_dir_is_used_when_cniconfig_has_none(env: Env, tmp_path: Path) -> None:
    cni = CNIConfig([env.plugins])
    rt = RuntimeConf("ctr1", "", "eth0", cache_dir=tmp_path / "rtcache")
    cni.add_network_list(env.conflist(env.plugin("p1")), rt)
    assert (tmp_path / "rtcache" / "results" / "testnet-ctr1-eth0").exists()
    env.cni.add_network_list(
        env.conflist(env.plugin("p1")), RuntimeConf("ctr9", "", "eth0", cache_dir=tmp_path / "x")
    )
    assert env.entry_path(cid="ctr9").exists()  # the CNIConfig's directory wins


# -- concurrency ---------------------------------------------------------------


def _parallel(n: int, fn: Callable[[int], object]) -> None:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            fn(i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_threads_adding_different_containers_lose_no_entry(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), env.plugin("p2"))
    _parallel(8, lambda i: env.cni.add_network_list(net, RuntimeConf(f"c{i}", "", "eth0")))
    assert sorted(a.container_id for a in env.cni.get_cached_attachments()) == [
        f"c{i}" for i in range(8)
    ]
    _parallel(8, lambda i: env.cni.del_network_list(net, RuntimeConf(f"c{i}", "", "eth0")))
    assert env.cni.get_cached_attachments() == []


def test_processes_adding_different_containers_lose_no_entry(env: Env, tmp_path: Path) -> None:
    import subprocess
    import sys

    conf = json.dumps({"cniVersion": "1.0.0", "name": "testnet", "plugins": [env.plugin("p1")]})
    script = (
        "import sys, libcni\n"
        f"cni = libcni.CNIConfig([{str(env.plugins)!r}], cache_dir={str(env.cache)!r})\n"
        f"net = libcni.conf_list_from_bytes({conf!r})\n"
        "for i in range(3):\n"
        "    cni.add_network_list(net, libcni.RuntimeConf(f'p{sys.argv[1]}-{i}', '', 'eth0'))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)]) for n in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    ids = sorted(a.container_id for a in env.cni.get_cached_attachments())
    assert ids == sorted(f"p{n}-{i}" for n in range(4) for i in range(3))


def test_the_operation_generators_are_not_public() -> None:
    # cni.gc(net, None, None) used to return an unstarted generator, silently.
    public = {
        "add_network", "add_network_list", "cache", "check_network", "check_network_list",
        "del_network", "del_network_list", "gc_network_list", "gc_networks",
        "get_cached_attachments",
        "get_network_cached_config", "get_network_cached_result",
        "get_network_list_cached_config", "get_network_list_cached_result",
        "get_status_network_list", "get_version_info", "validate_network",
        "validate_network_list",
    }  # fmt: skip
    for cls in (CNIConfig, libcni.AsyncCNIConfig):
        assert {n for n in dir(cls) if not n.startswith("_")} == public, cls


def test_dir_of_libcni_lists_its_own_names_only() -> None:
    # Issue 31: no Any, TYPE_CHECKING or annotations (names of its imports).
    import types

    own = {n for n in dir(libcni) if not n.startswith("_")}
    assert own >= set(libcni.__all__)
    extra = {
        n for n in own - set(libcni.__all__) if not isinstance(getattr(libcni, n), types.ModuleType)
    }
    assert extra == set()
    assert not hasattr(libcni, "annotations") and not hasattr(libcni, "TYPE_CHECKING")
