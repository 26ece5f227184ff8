"""Misbehaving plugins give the documented error and leave no process behind (behaviour.md §6).

Each case runs a real plugin process (the test plugin, told how to misbehave)
through ``CNIConfig``, and checks: the exception class (``PluginError``,
``PluginTimeoutError`` or ``PluginNotFoundError``), that it names the plugin
(``.plugin`` and the message or ``describe()``), the command and the network,
and that every process the plugin recorded (itself and its children) is gone
and not left as an unreaped child of the runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from harness import process_gone, wait_gone

from libcni import (
    CacheError,
    CNIError,
    PluginError,
    PluginNotFoundError,
    PluginTimeoutError,
    RuntimeConf,
)
from libcni.aio import AsyncCNIConfig
from libcni.invoke import RawExec

from .conftest import Env

pytestmark = pytest.mark.env(cls=Env)

MiB = 1 << 20
TIMEOUT = 0.5


def _no_children_left(env: Env) -> None:
    pids = env.pids()
    assert pids, "the plugin did not record itself"
    assert wait_gone(pids) == [], f"plugin processes left behind: {pids}"
    for pid in pids:
        assert process_gone(pid)


def _names_plugin(e: PluginError, command: str = "ADD") -> None:
    assert e.plugin == "p1", repr(e)
    assert e.command == command, repr(e)
    assert e.network == "testnet", repr(e)
    assert e.container_id == "ctr1", repr(e)
    assert "p1" in e.describe(), e.describe()


# -- processes that do not end ------------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour",
    [
        pytest.param({"sleep": 60}, id="hangs"),
        pytest.param({"ignoreTerm": True, "sleep": 60}, id="ignores-sigterm"),
        pytest.param({"spawnChild": 60, "sleep": 60}, id="hangs-with-a-child"),
        pytest.param(
            {"ignoreTerm": True, "spawnChild": 60, "sleep": 60}, id="ignores-sigterm-with-a-child"
        ),
        pytest.param(
            {"stdoutBytes": 8 * MiB, "stderrBytes": 8 * MiB, "sleep": 60}, id="floods-then-hangs"
        ),
    ],
)
@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_plugin_that_does_not_finish_times_out_and_its_group_is_killed(
    env: Env, behaviour: dict[str, Any], command: str
) -> None:
    net = env.conflist(env.plugin("p1", **{command: behaviour}))
    op = env.cni.add_network_list if command == "ADD" else env.cni.del_network_list
    start = time.monotonic()
    with pytest.raises(PluginTimeoutError) as info:
        op(net, env.rt, timeout=TIMEOUT)
    elapsed = time.monotonic() - start
    # The timeout, plus the SIGTERM grace (0.3 s in the fixture), plus slack.
    assert elapsed < TIMEOUT + 0.3 + 2.0, elapsed
    _names_plugin(info.value, command)
    assert "p1" in str(info.value)
    assert isinstance(info.value, TimeoutError)
    _no_children_left(env)


def test_plugin_whose_child_outlives_it_returns_at_once_and_the_child_is_killed(
    env: Env,
) -> None:
    net = env.conflist(env.plugin("p1", ADD={"spawnChild": 60, "passthrough": True}))
    start = time.monotonic()
    result = env.cni.add_network_list(net, env.rt, timeout=30)
    assert time.monotonic() - start < 5, "waited for the child holding stdout open"
    assert result.to_dict()["ips"]
    children = [c["child"] for c in env.calls() if "child" in c]
    assert children
    _no_children_left(env)


def test_plugin_whose_child_outlives_a_failed_call_is_killed(env: Env) -> None:
    net = env.conflist(
        env.plugin("p1", ADD={"spawnChild": 60, "error": {"code": 11, "msg": "busy"}})
    )
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt, timeout=30)
    assert (info.value.code, info.value.msg) == (11, "busy")
    _names_plugin(info.value)
    _no_children_left(env)


def test_async_cancellation_and_timeout_kill_the_process_group(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"ignoreTerm": True, "spawnChild": 60, "sleep": 60}))
    acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache, exec=RawExec(grace=0.3))

    async def scenario() -> None:
        with pytest.raises(PluginTimeoutError):
            await acni.add_network_list(net, env.rt, timeout=TIMEOUT)
        task = asyncio.ensure_future(acni.add_network_list(net, env.rt))
        await env.await_call(lambda r: "child" in r, count=2)  # the second plugin's child runs
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert len([c for c in env.calls() if "child" in c]) == 2
    _no_children_left(env)


# -- processes that end badly -----------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_plugin_killed_by_a_signal(env: Env, sig: signal.Signals) -> None:
    net = env.conflist(env.plugin("p1", ADD={"spawnChild": 60, "killSelf": int(sig)}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    e = info.value
    assert not isinstance(e, PluginTimeoutError)
    assert e.signal == int(sig), repr(e)
    assert e.exit_code is None
    assert sig.name in str(e), str(e)
    assert "p1" in str(e)
    _names_plugin(e)
    _no_children_left(env)
    assert not env.entry_path().exists()


@pytest.mark.parametrize("exit_code", [0, 1])
def test_plugin_flooding_stdout_and_stderr(env: Env, exit_code: int) -> None:
    net = env.conflist(
        env.plugin(
            "p1", ADD={"stdoutBytes": 8 * MiB, "stderrBytes": 8 * MiB, "exitCode": exit_code}
        )
    )
    start = time.monotonic()
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt, timeout=60)
    assert time.monotonic() - start < 20
    e = info.value
    assert not isinstance(e, PluginTimeoutError)
    _names_plugin(e)
    assert "p1" in str(e)
    assert len(str(e)) < 64 * 1024, "the error quotes the whole output"
    assert len(e.stderr) <= 64 * 1024
    _no_children_left(env)


@pytest.mark.parametrize(
    "stdout",
    [
        pytest.param("this is not JSON", id="garbage"),
        pytest.param("\xff\xfe\x00binary", id="binary"),
        pytest.param('{"cniVersion": "1.0.0", "ips": [', id="truncated"),
        pytest.param("[]", id="array"),
        pytest.param('"x"', id="string"),
        pytest.param("42", id="number"),
        pytest.param("true", id="boolean"),
        pytest.param('{"cniVersion": 1}', id="version-not-a-string"),
        pytest.param('{"cniVersion": "9.9.9"}', id="unknown-version"),
        pytest.param('{"cniVersion": "1.0.0", "ips": "all"}', id="wrong-field-type"),
        pytest.param(
            '{"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1"}]}', id="address-not-cidr"
        ),
        pytest.param("[" * 100_000, id="deeply-nested"),
        pytest.param('{"cniVersion": "1.0.0", "x": NaN}', id="nan"),
    ],
)
def test_plugin_exiting_0_with_an_invalid_result(env: Env, stdout: str) -> None:
    net = env.conflist(env.plugin("p1", ADD={"stdout": stdout}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    e = info.value
    _names_plugin(e)
    assert "p1" in str(e)
    assert e.code in (1, 6), repr(e)
    assert not env.entry_path().exists(), "an invalid result was cached"
    _no_children_left(env)


def test_plugin_exiting_0_with_null_gives_an_empty_result(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"stdout": "null"}))
    result = env.cni.add_network_list(net, env.rt)
    assert result.to_dict() == {"cniVersion": "1.0.0"}
    env.cni.del_network_list(net, env.rt)
    _no_children_left(env)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param({"code": "7", "msg": "x"}, id="code-is-a-string"),
        pytest.param({"code": 7.5, "msg": "x"}, id="code-is-a-float"),
        pytest.param({"code": True, "msg": "x"}, id="code-is-a-bool"),
        pytest.param({"msg": "x"}, id="no-code"),
        pytest.param({"code": 7, "msg": 5}, id="msg-is-a-number"),
        pytest.param({"code": 7, "msg": ["x"]}, id="msg-is-a-list"),
        pytest.param({"code": 7}, id="no-msg"),
        pytest.param({"code": 7, "msg": "x", "details": {"a": 1}}, id="details-is-an-object"),
        pytest.param([], id="array"),
        pytest.param("x", id="string"),
        pytest.param(None, id="null"),
    ],
)
def test_plugin_failing_with_a_malformed_error_object(env: Env, error: Any) -> None:
    net = env.conflist(env.plugin("p1", ADD={"error": error}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    e = info.value
    _names_plugin(e)
    assert e.exit_code == 1
    assert e.code == 999, repr(e)
    assert "p1" in str(e)
    assert json.dumps(error)[:20] in str(e) or "no error message" in str(e), str(e)
    _no_children_left(env)


def test_plugin_failing_with_nothing_on_stdout_reports_its_stderr(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"stderr": "boom: cannot frob", "exitCode": 3}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    e = info.value
    _names_plugin(e)
    assert e.exit_code == 3
    assert "boom: cannot frob" in str(e)
    assert "p1" in str(e)
    _no_children_left(env)


# -- binaries that cannot run -------------------------------------------------------------


def _replace_p1(env: Env, kind: str) -> None:
    p1 = env.plugins / "p1"
    p1.unlink()
    if kind == "not-executable":
        p1.write_text("#!/bin/sh\nexit 0\n")
        p1.chmod(0o644)
    elif kind == "bad-interpreter":
        p1.write_text("#!/nonexistent/interpreter\n")
        p1.chmod(0o755)
    elif kind == "empty-file":
        p1.write_bytes(b"")
        p1.chmod(0o755)
    elif kind == "not-a-binary":
        p1.write_bytes(b"\x7fELF\x02\x01\x01garbage")
        p1.chmod(0o755)
    elif kind == "directory":
        p1.mkdir()
    elif kind == "dangling-symlink":
        p1.symlink_to(env.root / "nowhere")
    elif kind == "symlink-loop":
        p1.symlink_to(p1)
    else:  # pragma: no cover
        raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["not-executable", "bad-interpreter", "empty-file", "not-a-binary"]
)
@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_plugin_binary_that_cannot_be_started(env: Env, kind: str, command: str) -> None:
    net = env.conflist(env.plugin("p1"))
    _replace_p1(env, kind)
    op = env.cni.add_network_list if command == "ADD" else env.cni.del_network_list
    with pytest.raises(PluginError) as info:
        op(net, env.rt)
    e = info.value
    assert not isinstance(e, PluginTimeoutError)
    _names_plugin(e, command)
    assert str(env.plugins / "p1") in str(e), str(e)
    assert e.code == 5, repr(e)
    assert not env.entry_path().exists()


@pytest.mark.parametrize("kind", ["directory", "dangling-symlink", "symlink-loop"])
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "VERSION"])
def test_plugin_that_is_not_a_file_is_not_found(env: Env, kind: str, command: str) -> None:
    net = env.conflist(env.plugin("p1"))
    _replace_p1(env, kind)
    with pytest.raises(PluginNotFoundError) as info:
        if command == "ADD":
            env.cni.add_network_list(net, env.rt)
        elif command == "DEL":
            env.cni.del_network_list(net, env.rt)
        elif command == "CHECK":
            env.cni.check_network_list(net, env.rt)
        else:
            env.cni.get_version_info("p1")
    e = info.value
    assert e.plugin == "p1"
    assert "p1" in str(e) and str(env.plugins) in str(e), str(e)
    assert env.calls() == []


def test_timeout_in_del_keeps_the_cache_entry_for_a_retry(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, env.rt)
    before = env.entry_path().read_bytes()
    slow = env.conflist(env.plugin("p1", DEL={"sleep": 60}))
    with pytest.raises(PluginTimeoutError):
        env.cni.del_network_list(slow, env.rt, timeout=TIMEOUT)
    assert env.entry_path().read_bytes() == before
    env.cni.del_network_list(net, env.rt)
    assert not env.entry_path().exists()
    _no_children_left(env)


def test_many_failures_leak_no_file_descriptor(env: Env) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    net = env.conflist(env.plugin("p1", ADD={"spawnChild": 60, "killSelf": 9}))
    hang = env.conflist(env.plugin("p1", ADD={"sleep": 60}))
    env.cni.get_version_info("p2")  # warm up lazily opened descriptors...
    with pytest.raises(PluginError):  # ... the cache's directories, kept open, among them
        env.cni.add_network_list(net, env.rt)
    before = fds()
    for _ in range(5):
        with pytest.raises(PluginError):
            env.cni.add_network_list(net, env.rt)
        with pytest.raises(PluginTimeoutError):
            env.cni.add_network_list(hang, env.rt, timeout=0.2)
    assert fds() <= before
    _no_children_left(env)


def test_errors_are_cni_errors_not_os_errors(env: Env, tmp_path: Path) -> None:
    # The plugin directory itself is missing or is a file: not found, never OSError.
    for bad in (tmp_path / "missing", env.record):
        env.record.write_text("")
        cni = type(env.cni)([bad], cache_dir=env.cache)
        with pytest.raises(PluginNotFoundError):
            cni.add_network_list(env.conflist(env.plugin("p1")), env.rt)
    # An unusable cache directory (a file) is a CacheError, never an OSError.
    cache_file = tmp_path / "cachefile"
    cache_file.write_text("")
    cni = type(env.cni)([env.plugins], cache_dir=cache_file)
    with pytest.raises(CacheError):
        cni.add_network_list(env.conflist(env.plugin("p1")), env.rt)
    with pytest.raises(CNIError):
        cni.get_cached_attachments()


def test_plugin_that_does_not_read_a_large_request(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime must neither block on a full pipe nor die of SIGPIPE.
    pids_file = env.root / "deaf.pids"
    monkeypatch.setenv("DEAF_PIDS", str(pids_file))
    script = env.plugins / "deaf"
    script.write_text(
        "#!/bin/sh\n"
        'echo "$$" >> "$DEAF_PIDS"\n'
        'echo \'{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.3/24"}]}\'\n'
    )
    script.chmod(0o755)
    net = env.conflist({"type": "deaf", "capabilities": {"big": True}})
    rt = RuntimeConf("ctr1", "", "eth0", capability_args={"big": "x" * (4 * MiB)})
    result = env.cni.add_network_list(net, rt, timeout=30)
    assert result.to_dict()["ips"]
    pids = [int(line) for line in pids_file.read_text().split()]
    assert pids and wait_gone(pids) == []


def test_plugin_being_replaced_is_retried_until_it_can_run(env: Env) -> None:
    # "Text file busy" while the binary is being written: retried with a fresh process.
    net = env.conflist(env.plugin("p1"))
    fd = os.open(env.plugins / "p1", os.O_WRONLY)
    closer = threading.Timer(0.5, os.close, (fd,))
    closer.start()
    try:
        start = time.monotonic()
        result = env.cni.add_network_list(net, env.rt, timeout=30)
        assert time.monotonic() - start >= 0.4
    finally:
        closer.join()
    assert result.to_dict()["ips"]
    assert [c["command"] for c in env.calls()] == ["ADD"]


def test_plugin_busy_for_longer_than_the_timeout_times_out(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    fd = os.open(env.plugins / "p1", os.O_WRONLY)
    try:
        start = time.monotonic()
        with pytest.raises(PluginTimeoutError) as info:
            env.cni.add_network_list(net, env.rt, timeout=0.5)
        assert time.monotonic() - start < 3
    finally:
        os.close(fd)
    _names_plugin(info.value)
    assert env.calls() == []
