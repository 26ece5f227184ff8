"""The configurable test plugin behaves as its docstring says."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from libcni.errors import PluginError
from libcni.invoke import RawExec

ENV = {"PATH": "/usr/bin:/bin", "CNI_IFNAME": "eth1", "CNI_CONTAINERID": "ctr"}


@pytest.fixture
def call(testplugin_dir: str) -> Any:
    path = os.path.join(testplugin_dir, "testplugin")

    def call(command: str, stdin: Any, **env: str) -> Any:
        data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
        out = RawExec().exec_plugin(path, data, {**ENV, "CNI_COMMAND": command, **env}, 10)
        return json.loads(out) if out else None

    return call


def test_is_executable(testplugin_dir: str) -> None:
    path = os.path.join(testplugin_dir, "testplugin")
    assert os.access(path, os.X_OK)
    assert Path(path).read_text().startswith("#!/usr/bin/python3 -IS\n")


def test_default_add_and_prev_result(call: Any) -> None:
    assert call("ADD", {"cniVersion": "1.1.0"}) == {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth1"}],
        "ips": [{"address": "10.1.2.3/24", "interface": 0}],
    }
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.9.9.9/8"}]}
    assert call("ADD", {"cniVersion": "1.0.0", "prevResult": prev}) == prev
    for command in ("DEL", "CHECK", "GC", "STATUS"):
        assert call(command, {"cniVersion": "1.1.0", "prevResult": prev}) is None


def test_version(call: Any) -> None:
    reply = call("VERSION", {"cniVersion": "1.1.0"})
    assert reply["cniVersion"] == "1.1.0" and "0.1.0" in reply["supportedVersions"]
    assert call("VERSION", {}, TESTPLUGIN_VERSION_REPLY='{"cniVersion":"0.2.0"}') == {
        "cniVersion": "0.2.0"
    }
    with pytest.raises(PluginError) as info:
        call(
            "VERSION",
            {},
            TESTPLUGIN_VERSION_REPLY='{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}',
            TESTPLUGIN_VERSION_EXIT="1",
        )
    assert (info.value.code, info.value.msg) == (4, "unknown CNI_COMMAND: VERSION")


def test_exact_command_wins_over_star(call: Any) -> None:
    test = {"*": {"result": {"any": 1}}, "DEL": {"result": {"del": 1}}}
    assert call("ADD", {"test": test}) == {"any": 1}
    assert call("DEL", {"test": test}) == {"del": 1}
    assert call("VERSION", {"test": test})["cniVersion"] == "1.1.0"  # "*" is not VERSION


def test_passthrough(call: Any) -> None:
    prev = {"cniVersion": "1.0.0", "ips": []}
    test = {"*": {"passthrough": True}}
    assert call("CHECK", {"test": test, "prevResult": prev}) == prev
    assert call("DEL", {"test": test}) is None
    assert call("ADD", {"test": test, "cniVersion": "1.0.0"})["ips"][0]["address"] == "10.1.2.3/24"


def test_error_and_exit_code(call: Any) -> None:
    with pytest.raises(PluginError) as info:
        call("ADD", {"test": {"ADD": {"error": {"code": 7, "msg": "m", "details": "d"}}}})
    assert (info.value.code, info.value.exit_code) == (7, 1)
    with pytest.raises(PluginError) as info:
        call("DEL", {"test": {"DEL": {"exitCode": 9, "stderr": "e"}}})
    assert (info.value.exit_code, info.value.stderr) == (9, "e")


def test_records_calls(call: Any, tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    call("ADD", {"cniVersion": "1.0.0", "record": str(rec)}, CNI_ARGS="A=b", OTHER="x")
    call("VERSION", b"not json", TESTPLUGIN_RECORD=str(rec), TRACEPARENT=tp, TRACESTATE="k=v")
    first, second = (json.loads(line) for line in rec.read_text().splitlines())
    assert first["command"] == "ADD"
    assert first["env"] == {
        "CNI_COMMAND": "ADD",
        "CNI_IFNAME": "eth1",
        "CNI_CONTAINERID": "ctr",
        "CNI_ARGS": "A=b",
    }
    assert first["stdin"] == {"cniVersion": "1.0.0", "record": str(rec)}
    assert isinstance(first["pid"], int)
    assert (second["command"], second["stdin"]) == ("VERSION", "not json")
    assert first["trace"] == {}  # the trace context, when the environment has one
    assert second["trace"] == {"TRACEPARENT": tp, "TRACESTATE": "k=v"}
