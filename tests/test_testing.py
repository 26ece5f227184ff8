"""``libcni.testing``: MockExec and PluginCall with the blocking and the async API.

MockExec exists to replace plugin processes, so these tests use no binary:
what they check is that everything around the plugins (order, prevResult,
the cache, the errors) is the real library's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

import libcni
from libcni import (
    AsyncCNIConfig,
    CNIConfig,
    ConfigError,
    GCArgs,
    GCError,
    PluginError,
    RuntimeConf,
    conf_list_from_bytes,
    create_result,
)
from libcni.testing import MockExec, PluginCall

RESULT = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}


def net(version: str = "1.0.0", name: str = "mynet") -> libcni.NetworkConfigList:
    return conf_list_from_bytes(
        json.dumps(
            {
                "cniVersion": version,
                "name": name,
                "plugins": [
                    {"type": "bridge", "bridge": "cni0"},
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            }
        )
    )


RT = RuntimeConf(
    "ctr1",
    "/var/run/netns/ctr1",
    "eth0",
    args=[("K", "V")],
    capability_args={"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
)


def test_sync_add_check_del_with_the_real_cache(tmp_path: Path) -> None:
    seen: list[PluginCall] = []

    def plugin(call: PluginCall) -> Any:
        seen.append(call)
        return RESULT if call.command == "ADD" and call.plugin == "bridge" else None

    mock = MockExec(plugin)
    cni = CNIConfig(["/opt/cni/bin"], cache_dir=tmp_path, exec=mock)
    result = cni.add_network_list(net(), RT)
    assert result.to_dict() == RESULT  # portmap passed bridge's result on (None)
    cni.check_network_list(net(), RT)
    assert cni.get_network_list_cached_result(net(), RT) is not None
    cni.del_network_list(net(), RT)
    assert mock.calls == seen
    assert [(c.plugin, c.command) for c in mock.calls] == [
        ("bridge", "ADD"),
        ("portmap", "ADD"),
        ("bridge", "CHECK"),
        ("portmap", "CHECK"),
        ("portmap", "DEL"),
        ("bridge", "DEL"),
    ]
    add2 = mock.calls[1]
    assert add2.stdin["prevResult"] == RESULT
    assert add2.stdin["runtimeConfig"] == {"portMappings": RT.capability_args["portMappings"]}
    assert add2.stdin["name"] == "mynet" and add2.stdin["cniVersion"] == "1.0.0"
    assert add2.path == "/opt/cni/bin/portmap"
    assert (add2.container_id, add2.netns, add2.ifname) == ("ctr1", "/var/run/netns/ctr1", "eth0")
    assert add2.env["CNI_ARGS"] == "K=V" and add2.env["CNI_COMMAND"] == "ADD"
    assert all(k.startswith("CNI_") for k in add2.env)
    assert mock.calls[5].stdin["prevResult"] == RESULT  # DEL got the cached result
    assert cni.get_cached_attachments() == []


@pytest.mark.parametrize(
    "reply",
    [create_result("1.0.0", RESULT), RESULT, json.dumps(RESULT).encode()],
    ids=["Result", "dict", "bytes"],
)
def test_add_replies_of_each_kind(tmp_path: Path, reply: Any) -> None:
    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=MockExec(lambda c: reply))
    assert cni.add_network_list(net(), RT).to_dict() == RESULT


def test_without_handler_every_plugin_succeeds(tmp_path: Path) -> None:
    mock = MockExec()
    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=mock)
    assert cni.add_network_list(net(), RT).to_dict() == {"cniVersion": "1.0.0"}
    assert cni.validate_network_list(net()) == ["portMappings"]
    cni.gc_network_list(net("1.1.0"), GCArgs())
    cni.get_status_network_list(net("1.1.0"))
    assert [c.command for c in mock.calls] == [
        "ADD",
        "ADD",
        "VERSION",
        "VERSION",
        "DEL",
        "DEL",
        "GC",
        "GC",
        "STATUS",
        "STATUS",
    ]  # fmt: skip (GC deleted the stale cached attachment first)


def test_handler_error_gets_a_real_plugin_errors_context(tmp_path: Path) -> None:
    def plugin(call: PluginCall) -> Any:
        if call.plugin == "portmap":
            raise PluginError("port 80 is taken", "hostPort", code=7)
        return RESULT

    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=MockExec(plugin))
    with pytest.raises(PluginError) as info:
        cni.add_network_list(net(), RT)
    e = info.value
    assert (e.plugin, e.command, e.network, e.container_id) == ("portmap", "ADD", "mynet", "ctr1")
    assert (e.exit_code, e.signal, e.code) == (1, None, 7)
    assert str(e) == 'plugin type="portmap" failed (add): port 80 is taken; hostPort'
    # A failed ADD caches no result; its record says it must still be DELeted.
    assert [a.complete for a in cni.get_cached_attachments()] == [False]
    assert cni.get_network_list_cached_result(net(), RT) is None


def test_gc_errors_of_a_mock_name_their_plugins(tmp_path: Path) -> None:
    def plugin(call: PluginCall) -> Any:
        if call.command == "GC":
            raise PluginError("missing containerID")
        return None

    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=MockExec(plugin))
    with pytest.raises(GCError) as info:
        cni.gc_network_list(net("1.1.0"))
    assert 'plugin type="bridge" failed (gc): missing containerID' in str(info.value)
    assert 'plugin type="portmap" failed (gc): missing containerID' in str(info.value)


def test_async_api_with_a_coroutine_handler(tmp_path: Path) -> None:
    async def plugin(call: PluginCall) -> Any:
        await asyncio.sleep(0)
        if call.command == "ADD" and call.plugin == "bridge":
            return RESULT
        if call.command == "CHECK":
            raise PluginError("not attached")
        return None

    mock = MockExec(plugin)

    async def main() -> None:
        cni = AsyncCNIConfig(["/opt/cni/bin"], cache_dir=tmp_path, exec=mock)
        assert (await cni.add_network_list(net(), RT)).to_dict() == RESULT
        with pytest.raises(PluginError) as info:
            await cni.check_network_list(net(), RT)
        assert (info.value.plugin, info.value.command) == ("bridge", "CHECK")
        await cni.del_network_list(net(), RT)
        assert await cni.get_cached_attachments() == []

    asyncio.run(main())
    assert [c.command for c in mock.calls] == ["ADD", "ADD", "CHECK", "DEL", "DEL"]


def test_async_api_with_a_plain_handler(tmp_path: Path) -> None:
    mock = MockExec(lambda call: RESULT if call.command == "ADD" else None)

    async def main() -> None:
        cni = AsyncCNIConfig(["/bin"], cache_dir=tmp_path, exec=mock)
        await cni.add_network_list(net(), RT)

    asyncio.run(main())
    assert len(mock.calls) == 2


def test_sync_api_refuses_a_coroutine_handler(tmp_path: Path) -> None:
    async def plugin(call: PluginCall) -> Any:
        return None

    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=MockExec(plugin))
    with pytest.raises(TypeError, match="AsyncCNIConfig only"):
        cni.del_network_list(net(), RT)


def test_find_in_path_finds_every_type_and_refuses_what_the_real_one_refuses() -> None:
    mock = MockExec()
    assert (
        mock.find_in_path("anything", ["/usr/lib/cni", "/opt/cni/bin"]) == "/usr/lib/cni/anything"
    )
    assert mock.find_in_path("x", "/opt/cni/bin") == "/opt/cni/bin/x"
    for bad in ("", "../sh", ".", "a/b"):
        with pytest.raises(ConfigError):
            mock.find_in_path(bad, ["/opt/cni/bin"])
    with pytest.raises(ConfigError):
        mock.find_in_path("x", [])


def test_wrong_reply_type_is_a_type_error(tmp_path: Path) -> None:
    # A reply of a type the annotation forbids: the run-time check is the point.
    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=MockExec(lambda c: 42))  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="expected a Result, a dict, bytes or None"):
        cni.add_network_list(net(), RT)


def test_plugin_runs_are_logged_as_for_real_plugins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="libcni")
    cni = CNIConfig(["/bin"], cache_dir=tmp_path, exec=MockExec())
    cni.add_network_list(net(), RT)
    runs = [r for r in caplog.records if hasattr(r, "duration")]
    assert [(r.plugin, r.exit_code) for r in runs] == [("bridge", 0), ("portmap", 0)]  # type: ignore[attr-defined]


def _manager_handler(call: PluginCall) -> dict[str, Any] | None:
    if call.command == "ADD" and call.plugin == "bridge":
        return {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": call.ifname, "sandbox": call.netns}],
            "ips": [{"address": "10.0.0.5/24", "interface": 0}],
        }
    return None


def _manager_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10-a.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "bridge"}]})
    )
    return conf


def test_mock_exec_with_the_network_manager(tmp_path: Path) -> None:
    """The manager finds every plugin through the MockExec and runs them all through it."""
    mock = MockExec(_manager_handler)
    m = libcni.NetworkManager(
        _manager_conf(tmp_path), ["/nonexistent"], cache_dir=tmp_path / "cache", exec=mock
    )
    assert list(m.networks().networks) == ["a"]
    view = m.setup("c1", "/run/netns/c1")
    assert [str(ip) for ip in view.ips] == ["10.0.0.5/24"]
    assert list(view.interfaces) == ["eth0"]
    m.check("c1", "/run/netns/c1")
    m.teardown("c1")
    assert m.inspect("c1").attachments == ()
    assert [(c.plugin, c.command, c.ifname) for c in mock.calls] == [
        ("loopback", "ADD", "lo"),
        ("bridge", "ADD", "eth0"),
        ("loopback", "CHECK", "lo"),
        ("bridge", "CHECK", "eth0"),
        ("bridge", "DEL", "eth0"),
        ("loopback", "DEL", "lo"),
    ]


def test_mock_exec_with_the_async_network_manager(tmp_path: Path) -> None:
    mock = MockExec(_manager_handler)
    m = libcni.AsyncNetworkManager(
        _manager_conf(tmp_path), ["/nonexistent"], cache_dir=tmp_path / "cache", exec=mock
    )

    async def main() -> None:
        views = await asyncio.gather(*(m.setup(f"c{i}", f"/run/netns/c{i}") for i in range(4)))
        assert [str(v.ip(4)) for v in views] == ["10.0.0.5/24"] * 4
        await asyncio.gather(*(m.teardown(f"c{i}") for i in range(4)))

    asyncio.run(main())
    assert sorted(c.command for c in mock.calls) == ["ADD"] * 8 + ["DEL"] * 8
    assert not (tmp_path / "cache" / "results").exists() or not any(
        (tmp_path / "cache" / "results").iterdir()
    )
