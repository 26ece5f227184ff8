"""One cache for Go's libcni and ours: each reads, and DELs from, what the other cached.

A runtime moving from the Go library to libcni (or running both: containerd
beside a Python agent, cnitool beside our CLI) keeps its cache directory. These
tests build ``tests/go/interop`` against Debian's Go libcni (``golang-go``,
``golang-github-appc-cni-dev``; ``scripts/test.sh`` installs them) and run it
on the same cache as libcni, with the same real test plugins:

- Go reads what libcni cached for a list whose plugins came from its drop-in
  directory, and a DEL from that cached configuration runs every plugin ADD
  ran, with the cached result as ``prevResult``;
- libcni reads, lists and DELs what Go cached;
- a cache holding libcni's write-ahead records (``records/``: a complete
  attachment's, and one of an ADD that never finished) is read, listed and
  DELeted by Go without error, and Go never sees a record;
- an attachment libcni added and Go DELeted (1.1.2's ``DelNetworkList``) or
  collected (1.3's ``GCNetworkList``, where it is built: its v1.3.0 source in
  ``benchmarks/build/cni-v1.3.0``) is not in progress for libcni: listed by
  nothing, DELeted by neither its GC nor a teardown.

Debian's Go libcni (1.1.x) knows spec versions up to 1.0.0, so the lists here
are at 1.0.0.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _require import unavailable
from golibcni import go13_scale, go_available, go_build
from harness import Env

import libcni
from libcni import RuntimeConf

RESULT = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:02:03", "sandbox": "/run/netns/c"}],
    "ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.1.2.1"]},
}
ARGS = (("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web"))
CAP_ARGS = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}


@pytest.fixture(scope="module")
def interop() -> str:
    """The Go program, built once per run (``unavailable`` without Go and its libcni)."""
    if not go_available():
        unavailable("needs Go and its libcni: apt-get install golang-go golang-github-appc-cni-dev")
    return go_build("interop")


def _go(interop: str, *args: str) -> Any:
    proc = subprocess.run([interop, *args], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _drop_in_network(env: Env) -> libcni.NetworkConfigList:
    """``dn.conflist`` with no plugins, and ``dn/10-a.conf`` and ``dn/20-b.conf`` beside it."""
    d = env.root / "net.d"
    (d / "dn").mkdir(parents=True)
    (d / "dn.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "dn"}))
    plugin_a = {**env.plugin("p1", ADD={"result": RESULT}), "capabilities": {"portMappings": True}}
    (d / "dn" / "10-a.conf").write_text(json.dumps(plugin_a))
    (d / "dn" / "20-b.conf").write_text(json.dumps(env.plugin("p2")))
    net = libcni.load_conf_list(d, "dn")
    assert [p.type for p in net.plugins] == ["p1", "p2"]
    return net


def _rt(env: Env) -> RuntimeConf:
    return RuntimeConf("ctr1", "/run/netns/c", "eth0", args=ARGS, capability_args=CAP_ARGS)


def test_go_reads_what_libcni_cached_for_a_drop_in_list(tmp_path: Path, interop: str) -> None:
    env = Env(tmp_path)
    net = _drop_in_network(env)
    env.cni.add_network_list(net, _rt(env))
    got = _go(interop, "cached", str(env.cache), "dn", "1.0.0", "ctr1", "eth0")
    assert got["plugins"] == ["p1", "p2"]  # the list as it ran, not the file's bytes
    assert json.loads(got["config"])["name"] == "dn"
    assert [tuple(a) for a in got["args"]] == list(ARGS)
    assert got["capabilityArgs"] == CAP_ARGS
    assert got["result"] == RESULT


def test_go_dels_from_libcnis_cache_with_every_plugin_add_ran(tmp_path: Path, interop: str) -> None:
    env = Env(tmp_path)
    net = _drop_in_network(env)
    env.cni.add_network_list(net, _rt(env))
    shutil.rmtree(env.root / "net.d")  # only the cache is left
    env.record.unlink()
    assert _go(interop, "del-cached", str(env.cache), str(env.plugins), "dn", "ctr1", "eth0") == {
        "deleted": 2
    }
    dels = [c for c in env.calls() if c["command"] == "DEL"]
    assert [c["stdin"]["type"] for c in dels] == ["p2", "p1"]
    assert all(c["stdin"]["prevResult"] == RESULT for c in dels)
    assert dels[1]["stdin"]["runtimeConfig"] == CAP_ARGS  # p1 declared the capability
    assert all(c["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web" for c in dels)
    assert env.cached() == []  # Go removed the entry libcni wrote


def test_libcni_reads_lists_and_dels_what_go_cached(tmp_path: Path, interop: str) -> None:
    env = Env(tmp_path)
    conflist = tmp_path / "gonet.conflist"
    obj = {
        "cniVersion": "1.0.0",
        "name": "gonet",
        "plugins": [
            {**env.plugin("p1", ADD={"result": RESULT}), "capabilities": {"portMappings": True}},
            env.plugin("p2"),
        ],
    }
    conflist.write_text(json.dumps(obj))
    added = _go(
        interop,
        "add",
        str(conflist),
        str(env.plugins),
        str(env.cache),
        "ctr1",
        "eth0",
        "/run/netns/c",
        "IgnoreUnknown=1;K8S_POD_NAME=web",
        json.dumps(CAP_ARGS),
    )
    assert added == RESULT
    net = libcni.conf_list_from_file(conflist)
    rt = RuntimeConf("ctr1", "", "eth0")

    cached_result = env.cni.get_network_list_cached_result(net, rt)
    assert cached_result is not None and cached_result.to_dict() == RESULT
    cached = env.cni.get_network_list_cached_config(net, rt)
    assert cached is not None
    config, crt = cached
    assert [p.type for p in libcni.conf_list_from_bytes(config).plugins] == ["p1", "p2"]
    assert tuple(crt.args) == ARGS and dict(crt.capability_args) == CAP_ARGS
    [attachment] = env.cni.get_cached_attachments("ctr1")
    assert (attachment.network, attachment.container_id, attachment.ifname) == (
        "gonet",
        "ctr1",
        "eth0",
    )
    # Go writes the netns into the entry from its v1.2 on; read as written either way.
    assert attachment.netns == json.loads(env.entry_path("gonet").read_bytes()).get("netns", "")

    env.record.unlink()
    env.cni.del_network_list(libcni.conf_list_from_bytes(config), crt)
    dels = [c for c in env.calls() if c["command"] == "DEL"]
    assert [c["stdin"]["type"] for c in dels] == ["p2", "p1"]
    assert all(c["stdin"]["prevResult"] == RESULT for c in dels)
    assert env.cached() == []


def test_go_reads_lists_and_dels_a_cache_that_holds_records(tmp_path: Path, interop: str) -> None:
    env = Env(tmp_path)
    obj = {
        "cniVersion": "1.0.0",
        "name": "recnet",
        "plugins": [env.plugin("p1", ADD={"result": RESULT}), env.plugin("p2")],
    }
    conflist = tmp_path / "recnet.conflist"
    conflist.write_text(json.dumps(obj))
    net = libcni.conf_list_from_file(conflist)
    env.cni.add_network_list(net, _rt(env))  # complete: entry and record
    failing = {**obj, "plugins": [obj["plugins"][0], env.plugin("p2", ADD={"error": {"code": 11}})]}
    with pytest.raises(libcni.PluginError):  # in progress: only a record
        env.cni.add_network_list(
            libcni.conf_list_from_bytes(json.dumps(failing)),
            RuntimeConf("ctr2", "/run/netns/d", "eth0"),
        )
    records = sorted(p.name for p in (env.cache / "records").rglob("*") if p.is_file())
    assert records == ["recnet-ctr1-eth0", "recnet-ctr2-eth0"]
    assert [(a.container_id, a.complete) for a in env.cni.get_cached_attachments()] == [
        ("ctr1", True),
        ("ctr2", False),
    ]
    # Go lists results/ only: the complete attachment, never a record.
    assert _go(interop, "list", str(env.cache)) == [
        {"kind": "cniCacheV1", "containerId": "ctr1", "ifName": "eth0", "networkName": "recnet"}
    ]
    got = _go(interop, "cached", str(env.cache), "recnet", "1.0.0", "ctr1", "eth0")
    assert got["result"] == RESULT and got["capabilityArgs"] == CAP_ARGS
    env.record.unlink()
    # Go DELs both without error: the complete one from its cache, the other from the file.
    plugins = str(env.plugins)
    assert _go(interop, "del-cached", str(env.cache), plugins, "recnet", "ctr1", "eth0") == {
        "deleted": 2
    }
    assert _go(interop, "del", str(conflist), plugins, str(env.cache), "ctr2", "eth0") == {
        "deleted": 2
    }
    dels = [c for c in env.calls() if c["command"] == "DEL"]
    assert [(c["env"]["CNI_CONTAINERID"], "prevResult" in c["stdin"]) for c in dels] == [
        ("ctr1", True),
        ("ctr1", True),
        ("ctr2", False),
        ("ctr2", False),
    ]
    assert env.cached() == []
    # Go never touched records/. The complete attachment's record, marked complete, is
    # dropped where found; the unfinished ADD (Go DELeted it from the file, never knowing
    # of it) stays in progress, and libcni's next GC DELs it once more (a DEL is idempotent).
    assert [(a.container_id, a.complete) for a in env.cni.get_cached_attachments()] == [
        ("ctr2", False),
    ]
    env.record.unlink()
    env.cni.gc_network_list(net)
    assert {c["env"]["CNI_CONTAINERID"] for c in env.calls() if c["command"] == "DEL"} == {"ctr2"}
    assert env.cni.get_cached_attachments() == []
    assert list((env.cache / "records").iterdir()) == []


# -- Go DELs or collects what libcni added: nothing in progress after (issue 28) ------------


@pytest.fixture(scope="module")
def go13() -> str:
    """Go libcni 1.3's GC driver, where it is built (it needs the v1.3.0 source)."""
    built = go13_scale()
    if built is None:
        pytest.skip("Go libcni 1.3 is not built (put its v1.3.0 source in benchmarks/build)")
    return built


def _added_by_libcni(env: Env, tmp_path: Path) -> tuple[Path, libcni.NetworkConfigList]:
    obj = {
        "cniVersion": "1.0.0",
        "name": "gonet",
        "plugins": [env.plugin("p1", ADD={"result": RESULT}), env.plugin("p2")],
    }
    conflist = tmp_path / "gonet.conflist"
    conflist.write_text(json.dumps(obj))
    net = libcni.conf_list_from_file(conflist)
    env.cni.add_network_list(net, _rt(env))
    assert (env.cache / "records" / "ctr1" / "gonet-ctr1-eth0").is_file()
    env.record.unlink()
    return conflist, net


def _nothing_left_for_libcni(env: Env, net: libcni.NetworkConfigList) -> None:
    """Go DELeted the attachment (both plugins, with the cached result): libcni lists
    nothing, and neither its GC nor a teardown DELs it again."""
    dels = [c for c in env.calls() if c["command"] == "DEL"]
    assert [c["stdin"]["type"] for c in dels] == ["p2", "p1"]
    assert all(c["stdin"]["prevResult"] == RESULT for c in dels)
    assert env.cached() == []
    env.record.unlink()
    assert env.cni.get_cached_attachments() == []
    assert env.cni.get_network_list_cached_config(net, RuntimeConf("ctr1", "", "eth0")) is None
    env.cni.gc_network_list(net)
    manager = libcni.NetworkManager(env.root / "none", [env.plugins], cache_dir=env.cache)
    manager.teardown("ctr1")
    assert env.calls() == []
    assert not (env.cache / "records" / "ctr1").exists()


def test_go_del_of_a_libcni_add_leaves_nothing_in_progress(tmp_path: Path, interop: str) -> None:
    env = Env(tmp_path)
    _, net = _added_by_libcni(env, tmp_path)
    plugins = str(env.plugins)
    assert _go(interop, "del-cached", str(env.cache), plugins, "gonet", "ctr1", "eth0") == {
        "deleted": 2
    }
    _nothing_left_for_libcni(env, net)


def test_go13_gc_of_a_libcni_add_leaves_nothing_in_progress(tmp_path: Path, go13: str) -> None:
    env = Env(tmp_path)
    conflist, net = _added_by_libcni(env, tmp_path)
    valid = tmp_path / "valid"
    valid.write_text("")  # no attachment is valid: Go DELs every cached one of the network
    proc = subprocess.run(
        [go13, "gc", str(env.plugins), str(env.cache), str(conflist), str(valid), "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    _nothing_left_for_libcni(env, net)
