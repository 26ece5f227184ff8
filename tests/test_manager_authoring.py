"""What a runtime author reaches for in the NetworkManager (issue 22).

Networks defined in code, the settings read back, binary-aware readiness,
capability checks before anything runs, the retry of "try again later", and
the complete merged view. Every plugin is the real test plugin
(tests/plugins/testplugin), which records each call.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import attrs
import harness
import pytest

import libcni
from libcni import (
    AsyncNetworkManager,
    ConfigError,
    ContainerNetworks,
    NetworkManager,
    NetworkRequest,
    NotReadyError,
    SetupError,
    ValidationError,
    conf_list_from_bytes,
)
from libcni.invoke import RawExec
from libcni.testing import MockExec

Env = harness.ManagerEnv
pytestmark = pytest.mark.env(cls=Env)


def code_net(name: str, *plugins: dict[str, Any]) -> libcni.NetworkConfigList:
    body = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": list(plugins) or [{"type": "testplugin"}],
    }
    return conf_list_from_bytes(json.dumps(body))


# -- the settings, read back ------------------------------------------------------------


def test_every_constructor_argument_reads_back_under_its_name(env: Env) -> None:
    given: dict[str, Any] = {
        "conf_dir": str(env.conf),
        "plugin_dirs": (str(env.plugins), "/elsewhere"),
        "cache_dir": str(env.cache),
        "default_networks": ("a", "b"),
        "max_networks": 3,
        "loopback": False,
        "interface_prefix": "net",
        "timeout": 12.5,
        "retry_attempts": 2,
        "exec": RawExec(),
        "observers": (print,),
    }
    for cls in (NetworkManager, AsyncNetworkManager):
        m = cls(**given)
        params = [p for p in inspect.signature(cls).parameters if p != "self"]
        # networks= is read back through networks() (with the files' ones), not as data.
        assert set(params) - {"networks"} == set(given), params
        for name, value in given.items():
            assert getattr(m, name) == value if name != "exec" else m.exec is value, name


def test_defaults_read_back(env: Env) -> None:
    m = NetworkManager(cache_dir=env.cache)
    assert m.conf_dir == "/etc/cni/net.d"
    assert m.plugin_dirs == ("/opt/cni/bin", "/usr/lib/cni")  # Debian's plugins are found
    assert (m.default_networks, m.max_networks, m.loopback) == (None, 1, True)
    assert (m.interface_prefix, m.timeout, m.retry_attempts) == ("eth", None, 0)
    assert isinstance(m.exec, RawExec)
    assert inspect.signature(NetworkManager).parameters["plugin_dirs"].default == (
        "/opt/cni/bin",
        "/usr/lib/cni",
    )


def test_bad_settings_are_refused_at_construction(env: Env) -> None:
    with pytest.raises(ValueError, match="retry_attempts"):
        env.manager(retry_attempts=-1)
    with pytest.raises(ValueError, match="max_networks"):
        env.manager(max_networks=-2)
    assert env.manager(default_networks="a").default_networks == ("a",)


# -- networks defined in code ------------------------------------------------------------


def test_networks_in_code_without_a_conf_dir_work_end_to_end(env: Env) -> None:
    net = code_net("incode", {"type": "testplugin", "marker": "code"})
    m = env.manager(conf_dir=None, networks=[net])
    assert m.conf_dir is None
    loaded = m.networks()
    assert list(loaded.networks) == ["incode"] and loaded.networks["incode"] is net
    assert loaded.defaults == ("incode",) and dict(loaded.skipped) == {}
    m.status()
    view = m.setup("c1", "/var/run/netns/c1")
    assert [(a.network, a.ifname) for a in view.attachments] == [
        ("cni-loopback", "lo"),
        ("incode", "eth0"),
    ]
    assert m.inspect("c1").ips == view.ips
    m.check("c1", "/var/run/netns/c1")
    m.teardown("c1", "/var/run/netns/c1")
    assert env.calls() == [
        ("ADD", "cni-loopback", "lo"),
        ("ADD", "incode", "eth0"),
        ("CHECK", "cni-loopback", "lo"),
        ("CHECK", "incode", "eth0"),
        ("DEL", "incode", "eth0"),
        ("DEL", "cni-loopback", "lo"),
    ]
    adds = [r for r in env.records() if r.get("command") == "ADD"]
    assert adds[1]["stdin"]["marker"] == "code"
    assert env.cached() == []


def test_a_file_naming_a_network_in_code_is_skipped_as_shadowed(env: Env) -> None:
    env.write("10-same.conflist", "same", {"type": "testplugin", "marker": "file"})
    env.write("20-other.conflist", "other")
    m = env.manager(networks=[code_net("same", {"type": "testplugin", "marker": "code"})])
    loaded = m.networks()
    assert list(loaded.networks) == ["same", "other"]  # code first, then the files
    assert loaded.defaults == ("same", "other")
    why = loaded.skipped[str(env.conf / "10-same.conflist")]
    assert "shadowed" in why and "networks[0]" in why
    m.setup("c1", "ns", networks=["same"])
    assert [r["stdin"].get("marker") for r in env.records() if r.get("command") == "ADD"] == [
        None,  # loopback
        "code",
    ]


def test_networks_in_code_are_checked_at_construction(env: Env) -> None:
    with pytest.raises(TypeError, match="conf_list_from_conf"):
        env.manager(networks=[libcni.conf_from_bytes('{"name": "x", "type": "testplugin"}')])
    with pytest.raises(ConfigError, match="twice"):
        env.manager(networks=[code_net("x"), code_net("x")])
    with pytest.raises(ValidationError, match="network name"):
        env.manager(networks=[code_net("bad name")])
    with pytest.raises(ConfigError, match="no plugins"):
        env.manager(networks=[conf_list_from_bytes('{"cniVersion": "1.0.0", "name": "empty"}')])


def test_without_any_network_the_manager_says_what_to_do(env: Env) -> None:
    with pytest.raises(NotReadyError, match=re.escape("networks=[...]")):
        env.manager(conf_dir=None).status()
    with pytest.raises(ConfigError, match="conf_dir=None"):
        env.manager(conf_dir=None).setup("c1", "ns", networks=["nowhere"])


# -- binary-aware readiness --------------------------------------------------------------


def test_a_configuration_that_arrives_before_its_binary_is_used_once_it_appears(env: Env) -> None:
    env.write("10-late.conflist", "late", {"type": "late"})
    m = env.manager()
    assert "late" in m.networks().skipped[str(env.conf / "10-late.conflist")]
    with pytest.raises(NotReadyError, match="late"):
        m.status()
    with pytest.raises(NotReadyError, match='failed to find plugin "late"'):
        m.setup("c1", "ns", networks=["late"])
    assert env.calls() == []
    env.install("late", link=True)  # the binary arrives; conf_dir is not touched
    m.status()
    view = m.setup("c1", "ns", networks=["late"])
    assert [a.network for a in view.attachments] == ["cni-loopback", "late"]


def test_a_network_in_code_waits_for_its_binary_too(env: Env) -> None:
    m = env.manager(conf_dir=None, networks=[code_net("late", {"type": "late"})])
    assert list(m.networks().skipped) == ["networks[0] (late)"]
    env.install("late", link=True)
    assert list(m.networks().networks) == ["late"]


def nothing_kept(env: Env) -> bool:
    """Whether the cache holds no entry and no record."""
    return env.cached() == [] and not list((env.cache / "records").glob("*/*"))


def test_setup_of_a_network_waiting_for_its_binary_is_not_ready_and_names_the_binary(
    env: Env,
) -> None:
    (env.conf / "10-broken.conflist").write_text("{")
    env.write("20-late.conflist", "late", {"type": "testplugin"}, {"type": "late-bin"})
    m = env.manager()
    with pytest.raises(NotReadyError) as info:
        m.setup("c1", "ns", networks=["late"])
    assert info.value.code == 50  # try again later
    assert 'failed to find plugin "late-bin"' in str(info.value) and "'late'" in str(info.value)
    assert "broken" not in str(info.value)  # an unrelated file is not the setup's business
    assert env.calls() == [] and nothing_kept(env)
    why = m.networks().skipped[str(env.conf / "20-late.conflist")]
    assert m.networks().not_ready == {"late": why}


def test_setup_of_a_name_not_configured_is_not_found(env: Env) -> None:
    (env.conf / "10-broken.conflist").write_text("{")
    env.write("20-late.conflist", "late", {"type": "late-bin"})
    m = env.manager()
    for networks in (["nowhere"], ["late", "nowhere"]):  # a bad request is not "later"
        with pytest.raises(libcni.NotFoundError) as info:
            m.setup("c1", "ns", networks=networks)
        assert (info.value.name, info.value.dir, info.value.code) == ("nowhere", str(env.conf), 7)
        assert "'nowhere'" in str(info.value)
        assert "broken" not in str(info.value) and "late" not in str(info.value)
    assert env.calls() == [] and nothing_kept(env)


def test_setup_of_a_network_whose_configuration_cannot_be_used_says_why(env: Env) -> None:
    (env.conf / "10-broken.conflist").write_text("{")
    env.write("20-d.conflist", "d")
    (env.conf / "d").mkdir()
    (env.conf / "d" / "50-bad.conf").write_text("{")  # a drop-in file that does not parse
    env.write("30-t.conflist", "t", {"type": "testplugin", "ipam": {"type": "../sh"}})
    m = env.manager()
    for name, why in (("d", "50-bad.conf"), ("t", "invalid plugin name; ../sh")):
        with pytest.raises(ConfigError) as info:
            m.setup("c1", "ns", networks=[name])
        assert type(info.value) is ConfigError and info.value.code == 7  # never ready later
        assert f"'{name}'" in str(info.value) and why in str(info.value)
        assert "10-broken" not in str(info.value)
    assert env.calls() == [] and nothing_kept(env)
    assert set(m.networks().invalid) == {"d", "t"} and m.networks().not_ready == {}


def test_a_missing_ipam_binary_makes_the_network_wait_for_it(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "ipam": {"type": "ipam-bin"}})
    env.write("20-b.conflist", "b")
    m = env.manager(default_networks=["a"])
    assert list(m.networks().networks) == ["b"]
    assert "ipam-bin" in m.networks().not_ready["a"]
    with pytest.raises(NotReadyError, match='failed to find plugin "ipam-bin"') as info:
        m.status()
    assert "'a'" in str(info.value)
    for networks in (None, ["a"]):  # the defaults, or named
        with pytest.raises(NotReadyError, match='failed to find plugin "ipam-bin"'):
            m.setup("c1", "ns", networks=networks)
    with pytest.raises(NotReadyError, match='failed to find plugin "ipam-bin"'):  # async alike
        asyncio.run(env.amanager(default_networks=["a"]).setup("c1", "ns"))
    assert env.calls() == [] and nothing_kept(env)  # nothing ran, no record, no entry
    with pytest.raises(NotReadyError, match="ipam-bin"):  # the only network of the defaults
        env.manager(
            max_networks=1,
            conf_dir=None,
            networks=[code_net("x", {"type": "testplugin", "ipam": {"type": "ipam-bin"}})],
        ).status()
    env.install("ipam-bin", link=True)
    m.status()
    assert [a.network for a in m.setup("c1", "ns").attachments] == ["cni-loopback", "a"]


def test_a_binary_appearing_behind_an_old_symlink_is_seen(env: Env, tmp_path: Path) -> None:
    """Nothing in conf_dir or the plugin directory changes (old timestamps): only the
    binary's own place tells, so the manager stats it at every check while it is missing."""
    target = tmp_path / "elsewhere" / "late"
    (env.plugins / "late").symlink_to(target)  # dangling: the package is not unpacked yet
    env.write("10-late.conflist", "late", {"type": "late"})
    past = time.time() - 60
    for p in (env.conf, *env.conf.iterdir(), env.plugins):
        os.utime(p, (past, past), follow_symlinks=True)
    m = env.manager()
    w = m._state.watcher

    def current() -> libcni.LoadedNetworks:
        loaded = w.current()
        assert w._state is not None
        w._state = attrs.evolve(w._state, checked_at=time.time_ns() + 3600 * 10**9)
        return loaded

    current()
    first = current()
    assert "late" not in first.networks
    assert current() is first  # nothing changed: no reload
    target.parent.mkdir()
    target.symlink_to(harness.TESTPLUGIN)
    assert "late" in current().networks


# -- capability arguments, checked before anything runs -----------------------------------


@pytest.mark.parametrize(
    "caps",
    [
        {"portMappings": [{"hostPort": float("nan")}]},
        {"portMappings": [{1: "not a string key"}]},
        {"portMappings": object()},
    ],
    ids=["nan", "int-key", "object"],
)
def test_capability_args_without_json_form_fail_before_anything_runs(
    env: Env, caps: dict[str, Any]
) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "capabilities": {"portMappings": True}})
    m = env.manager()
    with pytest.raises(ConfigError) as info:
        m.setup("c1", "ns", capability_args=caps)
    assert not isinstance(info.value, SetupError)
    assert "rollback" not in str(info.value) and "capability" in str(info.value)
    with pytest.raises(ConfigError):
        m.setup("c2", "ns", networks=[NetworkRequest("a", capability_args=caps)])
    assert env.calls() == [] and env.cached() == []


def test_a_capability_no_plugin_declares_is_logged_once_per_network_and_name(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "capabilities": {"portMappings": True}})
    env.write("20-b.conflist", "b", {"type": "testplugin", "capabilities": {"portMappings": True}})
    env.write("30-c.conflist", "c")  # declares nothing: portMappings is a's and b's
    m = env.manager()
    typo = {"portMapping": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
    with caplog.at_level(logging.WARNING, logger="libcni"):
        for cid in ("c1", "c2"):
            m.setup(cid, "ns", capability_args={**typo, "portMappings": []})
    warned = [r.getMessage() for r in caplog.records if "reaches no plugin" in r.getMessage()]
    # Once per network and name (not again for c2); never cni-loopback.
    assert sorted(warned) == [
        f"capability argument 'portMapping' reaches no plugin: no plugin of network '{n}' "
        "declares it (a misspelling?)"
        for n in ("a", "b", "c")
    ]
    assert env.calls().count(("ADD", "a", "eth0")) == 2  # the setups ran


def test_a_capability_one_network_of_the_setup_uses_is_not_logged(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Runtimes give every network the same arguments: a bridge network with portmap
    and a ptp network without get the port mappings both, and nothing is wrong."""
    env.write("10-a.conflist", "a", {"type": "testplugin", "capabilities": {"portMappings": True}})
    env.write("20-p.conflist", "p")
    m = env.manager()
    ports = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
    with caplog.at_level(logging.WARNING, logger="libcni"):
        m.setup("c1", "ns", capability_args=ports)
        # ... but alone, p's setup maps no port: said once.
        m.setup("c2", "ns", networks=["p"], capability_args=ports)
        m.setup("c3", "ns", networks=["p"], capability_args=ports)
    warned = [r.getMessage() for r in caplog.records if "reaches no plugin" in r.getMessage()]
    assert len(warned) == 1 and "'portMappings'" in warned[0] and "'p'" in warned[0], warned


# -- "try again later": the retry ---------------------------------------------------------


def flaky(env: Env, times: int, code: int = 11) -> dict[str, Any]:
    """A plugin whose ADD fails with ``code`` the first ``times`` times, then succeeds."""
    counter = env.root / f"counter-{times}-{code}"
    return {
        "type": "testplugin",
        "test": {
            "ADD": {
                "times": times,
                "counter": str(counter),
                "error": {"code": code, "msg": "busy, try again later"},
            }
        },
    }


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_add_failing_with_code_11_is_deleted_and_retried(env: Env, parallel: bool) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b", flaky(env, 2))
    view = env.manager(retry_attempts=2).setup("c1", "ns", parallel=parallel)
    assert [a.network for a in view.attachments] == ["cni-loopback", "a", "b"]
    assert [r for r in env.calls() if r[1] == "b"] == [
        ("ADD", "b", "eth1"),
        ("DEL", "b", "eth1"),
        ("ADD", "b", "eth1"),
        ("DEL", "b", "eth1"),
        ("ADD", "b", "eth1"),
    ]
    assert env.cached() == ["a-c1-eth0", "b-c1-eth1", "cni-loopback-c1-lo"]


def test_async_setup_retries_too(env: Env) -> None:
    env.write("10-b.conflist", "b", flaky(env, 1))

    async def main() -> ContainerNetworks:
        m = AsyncNetworkManager(env.conf, [env.plugins], cache_dir=env.cache, retry_attempts=1)
        return await m.setup("c1", "ns")

    view = asyncio.run(main())
    assert [a.network for a in view.attachments] == ["cni-loopback", "b"]
    assert [r[0] for r in env.calls() if r[1] == "b"] == ["ADD", "DEL", "ADD"]


def test_retries_run_out_and_the_setup_rolls_back(env: Env) -> None:
    env.write("10-b.conflist", "b", flaky(env, 3))
    with pytest.raises(SetupError) as info:
        env.manager(retry_attempts=2).setup("c1", "ns")
    assert info.value.cause.code == 11
    assert [r[0] for r in env.calls() if r[1] == "b"] == ["ADD", "DEL", "ADD", "DEL", "ADD", "DEL"]
    assert env.cached() == []


def test_no_retry_by_default_nor_for_other_codes(env: Env) -> None:
    env.write("10-b.conflist", "b", flaky(env, 1))
    with pytest.raises(SetupError):
        env.manager().setup("c1", "ns")
    env.write("10-b.conflist", "b", flaky(env, 1, code=7))
    with pytest.raises(SetupError) as info:
        env.manager(retry_attempts=5).setup("c2", "ns")
    assert info.value.cause.code == 7
    adds = [r for r in env.calls() if r[0] == "ADD" and r[1] == "b"]
    assert len(adds) == 2  # one per setup


def test_retries_stay_within_the_setup_timeout(env: Env) -> None:
    always = {"type": "testplugin", "test": {"ADD": {"error": {"code": 11, "msg": "busy"}}}}
    env.write("10-b.conflist", "b", always)
    with pytest.raises(SetupError) as info:
        env.manager(retry_attempts=50, loopback=False).setup("c1", "ns", timeout=3.0)
    # The failure is the plugin's "try again later", or the last ADD running out of the
    # time left (a slow machine) ...
    assert info.value.cause.code == 11
    # ... and the back-off (0.1 s, doubling: 3.1 s before a 6th attempt) leaves room
    # for a few attempts, not 51.
    adds = [r for r in env.calls() if r[0] == "ADD" and r[1] == "b"]
    assert 1 <= len(adds) <= 6


# -- the complete view -------------------------------------------------------------------


def rich_result(n: int) -> dict[str, Any]:
    """A bridge-like 1.0.0 result: a bridge, a host-side veth and the container's eth<n>."""
    return {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": f"br{n}", "mac": f"02:00:00:00:00:0{n}"},
            {"name": f"veth{n}", "mac": f"02:00:00:00:01:0{n}"},
            {
                "name": f"eth{n}",
                "mac": f"02:00:00:00:02:0{n}",
                "sandbox": "/var/run/netns/c1",
                "mtu": 1400 + n,
                "pciID": f"0000:0{n}:00.1",
                "socketPath": f"/run/vhost{n}.sock",
            },
        ],
        "ips": [
            {"address": f"10.0.{n}.5/24", "gateway": "10.0.0.1", "interface": 2},
            {"address": f"fd00::{n}5/64", "gateway": f"fd00::{n}", "interface": 2},
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": f"10.{n}.0.0/16"}],
        "dns": {"nameservers": [f"10.0.{n}.53"]},
    }


def test_the_view_has_host_interfaces_gateways_routes_and_interface_details(env: Env) -> None:
    for n in (0, 1):
        env.write(
            f"{n}0-n{n}.conflist",
            f"n{n}",
            {"type": "testplugin", "test": {"ADD": {"result": rich_result(n)}}},
        )
    m = env.manager()
    view = m.setup("c1", "/var/run/netns/c1")
    for v in (view, m.inspect("c1")):
        assert list(v.host_interfaces) == ["br0", "veth0", "br1", "veth1"]
        assert v.host_interfaces["veth1"].mac == "02:00:00:00:01:01"
        assert [str(g) for g in v.gateways] == ["10.0.0.1", "fd00::", "fd00::1"]  # no repeats
        assert [str(r.dst) for r in v.routes] == [
            "0.0.0.0/0",
            "10.0.0.0/16",
            "0.0.0.0/0",
            "10.1.0.0/16",
        ]
        eth1 = v.interfaces["eth1"]
        assert (eth1.mtu, eth1.pci_id, eth1.socket_path) == (
            1401,
            "0000:01:00.1",
            "/run/vhost1.sock",
        )
        assert [(str(c.address), str(c.gateway)) for c in eth1.ip_configs] == [
            ("10.0.1.5/24", "10.0.0.1"),
            ("fd00::15/64", "fd00::1"),
        ]
        assert eth1.ips == tuple(c.address for c in eth1.ip_configs)
        assert str(v.ip(6)) == "fd00::5/64" and str(v.ip()) == "10.0.0.5/24"
        assert [d.nameservers for d in v.dns] == [("10.0.0.53",), ("10.0.1.53",)]
        d = v.to_dict()
        assert list(d["hostInterfaces"]) == ["br0", "veth0", "br1", "veth1"]
        assert d["gateways"] == ["10.0.0.1", "fd00::", "fd00::1"]
        assert d["routes"][0] == {"dst": "0.0.0.0/0", "gw": "10.0.0.1"}
        assert d["interfaces"]["eth0"]["mtu"] == 1400 and d["interfaces"]["eth0"]["pciID"]


def test_loopback_adds_no_route_gateway_or_host_interface() -> None:
    lo = libcni.result_from_bytes(
        b'{"cniVersion":"1.0.0","interfaces":[{"name":"lo","sandbox":"/ns"}],'
        b'"ips":[{"address":"127.0.0.1/8","gateway":"127.0.0.1","interface":0}],'
        b'"routes":[{"dst":"127.0.0.0/8"}]}'
    )
    view = ContainerNetworks.merge("c", [libcni.AttachmentResult("cni-loopback", "lo", lo)])
    assert (view.ips, view.gateways, view.routes, dict(view.host_interfaces)) == ((), (), (), {})
    assert view.interfaces["lo"].ip_configs[0].gateway is not None


PUBLIC = (
    set(libcni.__all__)
    | set(libcni.types.__all__)
    | {"IPv4Interface", "IPv6Interface", "IPv4Address", "IPv6Address"}
    | {"Mapping", "Sequence", "Any", "str", "int", "bool", "bytes", "float", "None", "tuple"}
    | {"dict", "list"}
)


@pytest.mark.parametrize(
    "cls",
    [
        libcni.ContainerNetworks,
        libcni.ContainerInterface,
        libcni.AttachmentResult,
        libcni.NetworkRequest,
        libcni.LoadedNetworks,
    ],
)
def test_help_names_only_public_types(cls: type) -> None:
    """``help(ContainerNetworks)`` shows the annotations of its fields and methods (as
    written, strings): each name in them must be a public one (not the private ``IP``)."""
    import pydoc

    text = pydoc.plain(pydoc.render_doc(cls))
    annotations = [str(f.type) for f in attrs.fields(cls)]
    for member in vars(cls).values():
        annotations += [str(a) for a in getattr(member, "__annotations__", {}).values()]
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(annotations)))
    assert names and names <= PUBLIC, names - PUBLIC
    signature = text.split("\n", 4)[3]  # the class line's signature, as help() shows it
    assert cls.__name__ in signature and "IP," not in signature


def test_mock_exec_works_with_networks_in_code(tmp_path: Path) -> None:
    mock = MockExec(lambda call: None)
    m = NetworkManager(None, networks=[code_net("n")], cache_dir=tmp_path, exec=mock)
    m.setup("c1", "ns")
    assert [(c.plugin, c.command) for c in mock.calls] == [
        ("loopback", "ADD"),
        ("testplugin", "ADD"),
    ]


def test_the_back_off_never_waits_past_the_timeout(tmp_path: Path) -> None:
    """With instant plugins (MockExec: process start-up would blur the counts), the
    pauses 0.1, 0.2, 0.4 s (less up to 20%) fit in a 1 s setup, the next (0.8 s) does not:
    the setup gives up before it, with the plugin's error, and without a DEL of its own
    (the rollback's DEL is the one after the last ADD)."""

    def plugin(call: Any) -> None:
        if call.command == "ADD" and call.plugin == "busy":
            raise libcni.PluginError("pool exhausted, try again later", code=11)
        return None

    mock = MockExec(plugin)
    net = code_net("b", {"type": "busy"})
    m = NetworkManager(
        None, networks=[net], cache_dir=tmp_path, exec=mock, loopback=False, retry_attempts=50
    )
    with pytest.raises(SetupError) as info:
        m.setup("c1", "ns", timeout=1.0)
    assert info.value.cause.code == 11 and "pool exhausted" in info.value.cause.msg
    commands = [c.command for c in mock.calls]
    assert commands.count("ADD") == 4, commands
    assert commands == ["ADD", "DEL"] * 4, commands  # 3 retry DELs, then the rollback's
