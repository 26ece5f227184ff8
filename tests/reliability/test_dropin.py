"""The configuration cached at ADD is the list as it ran (behaviour.md §2.3, §7).

A network whose plugins come from its drop-in directory
(``<conf dir>/<network>/*.conf``) is ADDed from a real configuration
directory; a runtime then DELs, CHECKs and GCs it with the configuration
cached at ADD, as runtimes do once the files changed: every plugin that ADD
ran runs again. A cached configuration without plugins (written by an older
libcni or the Go library) is refused, never a DEL that runs nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

import libcni
from libcni import ConfigError, GCError
from libcni.aio import AsyncCNIConfig

from .conftest import Env

pytestmark = pytest.mark.env(cls=Env)


def _conf_dir(env: Env, *, inline: bool = False) -> Path:
    """``dn.conflist`` (no plugins, or one inline) and ``dn/10-a.conf``, ``dn/20-b.conf``."""
    d = env.root / "net.d"
    (d / "dn").mkdir(parents=True)
    lst: dict[str, Any] = {"cniVersion": "1.1.0", "name": "dn"}
    if inline:
        lst["plugins"] = [env.plugin("p3")]
    (d / "dn.conflist").write_text(json.dumps(lst))
    (d / "dn" / "10-a.conf").write_text(json.dumps(env.plugin("p1")))
    (d / "dn" / "20-b.conf").write_text(json.dumps({**env.plugin("p2"), "cniVersion": "1.1.0"}))
    return d


def _types(env: Env, command: str) -> list[str]:
    return [c["stdin"]["type"] for c in env.calls() if c["command"] == command]


def _cached_list(
    env: Env, net: libcni.NetworkConfigList, cid: str = "ctr1"
) -> tuple[libcni.NetworkConfigList, libcni.RuntimeConf]:
    rt = attrs.evolve(env.rt, container_id=cid)
    cached = env.cni.get_network_list_cached_config(net, rt)
    assert cached is not None
    return libcni.conf_list_from_bytes(cached[0]), cached[1]


@pytest.mark.parametrize("inline", [False, True], ids=["drop-in-only", "inline-and-drop-in"])
def test_del_and_check_from_the_cached_config_run_every_plugin_add_ran(
    env: Env, inline: bool
) -> None:
    d = _conf_dir(env, inline=inline)
    net = libcni.load_conf_list(d, "dn")
    expected = ["p3", "p1", "p2"] if inline else ["p1", "p2"]
    assert [p.type for p in net.plugins] == expected
    assert net.bytes == (d / "dn.conflist").read_bytes()  # the file's bytes, unchanged
    env.cni.add_network_list(net, env.rt)
    assert _types(env, "ADD") == expected

    shutil.rmtree(d)  # the files are gone: only the cache is left
    cached, rt = _cached_list(env, net)
    assert [p.type for p in cached.plugins] == expected
    env.cni.check_network_list(cached, rt)
    assert _types(env, "CHECK") == expected
    env.cni.del_network_list(cached, rt)
    assert _types(env, "DEL") == expected[::-1]
    assert not env.entry_path("dn").exists()


def test_cached_config_is_a_conflist_go_can_read(env: Env) -> None:
    net = libcni.load_conf_list(_conf_dir(env), "dn")
    env.cni.add_network_list(net, env.rt)
    entry = json.loads(env.entry_path("dn").read_bytes())
    assert entry["kind"] == "cniCacheV1"
    config = json.loads(base64.b64decode(entry["config"], validate=True))
    # What Go's ConfListFromBytes needs: name, cniVersion, the plugins inline.
    assert config["name"] == "dn" and config["cniVersion"] == "1.1.0"
    assert [p["type"] for p in config["plugins"]] == ["p1", "p2"]
    assert config["plugins"][1]["record"] == str(env.record)


def test_a_list_with_every_plugin_inline_caches_its_own_bytes(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), env.plugin("p2"))
    assert net.effective_bytes is net.bytes
    env.cni.add_network_list(net, env.rt)
    cached, _ = _cached_list(env, net)
    assert cached.bytes == net.bytes


@pytest.mark.parametrize("source", ["file", "cache"])
def test_gc_of_a_stale_attachment_whose_plugins_came_from_a_drop_in_directory(
    env: Env, source: str
) -> None:
    d = _conf_dir(env)
    net = libcni.load_conf_list(d, "dn")
    env.cni.add_network_list(net, env.rt)
    env.cni.add_network_list(net, attrs.evolve(env.rt, container_id="live"))
    if source == "cache":  # GC with the configuration cached at ADD, the files gone
        net, _ = _cached_list(env, net)
        shutil.rmtree(d)
    env.record.unlink()
    env.cni.gc_network_list(net, libcni.GCArgs([libcni.GCAttachment("live", "eth0")]))
    dels = [c for c in env.calls() if c["command"] == "DEL"]
    assert [c["stdin"]["type"] for c in dels] == ["p2", "p1"]
    assert {c["env"]["CNI_CONTAINERID"] for c in dels} == {"ctr1"}
    assert _types(env, "GC") == ["p1", "p2"]
    assert not env.entry_path("dn").exists()
    assert env.entry_path("dn", cid="live").exists()


def _plant_pluginless_entry(env: Env) -> libcni.NetworkConfigList:
    """An entry as the Go library (or an older libcni) writes for a drop-in list: no plugins."""
    config = json.dumps({"cniVersion": "1.1.0", "name": "dn"}).encode()
    entry = {
        "kind": "cniCacheV1",
        "containerId": "ctr1",
        "config": base64.b64encode(config).decode(),
        "ifName": "eth0",
        "networkName": "dn",
        "result": {"cniVersion": "1.1.0", "ips": [{"address": "10.1.2.3/24"}]},
    }
    env.results_dir().mkdir(parents=True, exist_ok=True)
    env.results_dir().chmod(0o700)
    env.cache.chmod(0o700)
    env.entry_path("dn").write_text(json.dumps(entry))
    cached, _ = _cached_list(env, libcni.conf_list_from_bytes(config))
    assert cached.plugins == ()
    return cached


def test_a_cached_config_without_plugins_is_refused_never_a_del_that_runs_nothing(
    env: Env,
) -> None:
    cached = _plant_pluginless_entry(env)
    acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache)
    for op in (env.cni.del_network_list, env.cni.check_network_list):
        with pytest.raises(ConfigError, match="no plugins"):
            op(cached, env.rt)
    with pytest.raises(ConfigError, match="no plugins"):
        asyncio.run(acni.del_network_list(cached, env.rt))
    with pytest.raises((ConfigError, GCError)):
        env.cni.gc_network_list(cached)
    assert env.entry_path("dn").exists(), "the entry was forgotten without any plugin run"
    assert env.calls() == []
