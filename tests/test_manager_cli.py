"""``libcni up|down|show|ready`` (the NetworkManager on the command line), as a real subprocess."""

from __future__ import annotations

import json
import subprocess

import pytest
from harness import run_cli
from test_manager import Env, fail

from libcni.cache import RECORD_V1, CacheEntry, ResultCache

pytestmark = pytest.mark.env(cls=Env)


def run(e: Env, *argv: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    wired = {
        "NETCONFPATH": str(e.conf),
        "CNI_PATH": f"/nonexistent:{e.bin}",
        "CNI_CACHE_DIR": str(e.cache),
        "TESTPLUGIN_RECORD": str(e.record),
    }
    return run_cli(*argv, **{**wired, **extra_env})


def test_up_show_down(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "capabilities": {"mac": True}})
    env.write("20-b.conflist", "b")
    up = run(
        env,
        "up",
        "c1",
        "/var/run/netns/x",
        "--network",
        "b=net7",
        "-n",
        "a",
        "--parallel",
        CNI_ARGS="K=V",
        CAP_ARGS='{"mac": "0a:58:0a:01:02:03"}',
    )
    assert up.returncode == 0, up.stderr
    view = json.loads(up.stdout)
    assert [(a["network"], a["ifname"]) for a in view["attachments"]] == [
        ("cni-loopback", "lo"),
        ("b", "net7"),
        ("a", "eth0"),
    ]
    assert view["ips"] == ["10.1.2.3/24", "10.1.2.3/24"]
    runs = env.runs()
    assert all(r["env"]["CNI_ARGS"] == "K=V" for r in runs)
    assert all(r["env"]["CNI_NETNS"] == "/var/run/netns/x" for r in runs)
    assert [r["stdin"].get("runtimeConfig") for r in runs if r["stdin"]["name"] == "a"] == [
        {"mac": "0a:58:0a:01:02:03"}
    ]
    show = run(env, "show", "c1")
    assert show.returncode == 0, show.stderr
    shown = json.loads(show.stdout)
    assert {a["ifname"] for a in shown["attachments"]} == {"lo", "net7", "eth0"}
    down = run(env, "down", "c1")
    assert down.returncode == 0, down.stderr
    assert down.stdout == "detached c1 from b (net7), a (eth0), cni-loopback (lo)\n"
    assert env.cached() == []
    # Without NETNS every DEL had the netns cached at ADD.
    dels = [r for r in env.runs() if r["command"] == "DEL"]
    assert len(dels) == 3 and all(r["env"]["CNI_NETNS"] == "/var/run/netns/x" for r in dels)
    gone = run(env, "show", "c1")
    assert (gone.returncode, gone.stdout) == (1, "")
    assert gone.stderr == "libcni: nothing is cached for container 'c1'\n"
    nothing = run(env, "down", "c1")
    assert (nothing.returncode, nothing.stdout) == (
        0,
        "nothing to detach: no cached attachment of c1\n",
    )
    # A setup whose runtime died: its network in progress is detached too, and named so.
    ResultCache(env.cache).wal.write(
        CacheEntry(
            "c2",
            "a",
            "eth0",
            b'{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "testplugin"}]}',
            "/var/run/netns/y",
            kind=RECORD_V1,
        )
    )
    shown = run(env, "show", "c2")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["incomplete"] == [{"network": "a", "ifname": "eth0"}]
    down = run(env, "down", "c2")
    assert (down.returncode, down.stdout) == (0, "detached c2 from a (eth0, in progress)\n")
    assert env.runs()[-1]["env"]["CNI_NETNS"] == "/var/run/netns/y"


def test_up_with_default_network_and_failure_on_one_line(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("ADD", 11, "no\naddresses"))
    up = run(env, "up", "c1", "ns")
    assert up.returncode == 1
    assert up.stdout == ""
    lines = up.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("libcni: setup of container 'c1' failed")
    assert "no addresses" in lines[0]
    assert env.cached() == []


def test_ready_and_not_ready(env: Env) -> None:
    not_ready = run(env, "ready")
    assert not_ready.returncode == 1
    assert not_ready.stderr.startswith("libcni: no network configuration found in ")
    assert len(not_ready.stderr.splitlines()) == 1
    env.write("10-a.conflist", "a")
    ready = run(env, "ready")
    assert (ready.returncode, ready.stdout) == (0, "ready\n")


def test_bad_network_option_is_refused(env: Env) -> None:
    env.write("10-a.conflist", "a")
    res = run(env, "up", "c1", "ns", "--network", "a=")
    assert res.returncode == 1 and "NAME=IFNAME" in res.stderr
    assert env.runs() == []
