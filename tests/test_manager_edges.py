"""Issue 28: a second setup of an attached container, arguments checked before any network,
``forget`` (the way out of a DEL that fails every time), and a DEL whose netns is no longer
a namespace (behaviour.md §11.2, §11.3), with the real test plugin.

The plugin records every run with its environment (``CNI_NETNS``); a network whose DEL
(or ADD and DEL) fails every time is a configuration telling it so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from harness import run_cli
from test_manager import Env

from libcni import (
    AlreadyAttachedError,
    CNIConfig,
    ConfigError,
    GCError,
    NetworkAttachment,
    NetworkRequest,
    RuntimeConf,
    SetupError,
    TeardownError,
    conf_list_from_bytes,
)

pytestmark = pytest.mark.env(cls=Env)

ARGS = (("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web"))
ONE_STRING: Any = [("K",)]  # not a pair
CAPS = {"mac": "0a:58:0a:01:02:03"}
STUCK_DEL = {"DEL": {"error": {"code": 5, "msg": "stuck"}}}
STUCK = {"type": "testplugin", "test": STUCK_DEL}


def netns_of_dels(env: Env) -> list[tuple[str, str]]:
    return [
        (r["stdin"]["name"], r["env"]["CNI_NETNS"]) for r in env.runs() if r["command"] == "DEL"
    ]


def leftovers(env: Env, cid: str) -> list[str]:
    """Every file of the cache that names the container (entries, records, lock files)."""
    return sorted(str(p.relative_to(env.cache)) for p in env.cache.rglob(f"*{cid}*"))


# -- §11.2 setup of an attached container ---------------------------------------------------


@pytest.mark.parametrize("loopback", [False, True])
def test_a_second_setup_of_an_attached_container_is_refused_before_anything_runs(
    env: Env, loopback: bool
) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager(loopback=loopback)
    m.setup("c1", "/run/netns/A", networks=["a"])
    ran = env.calls()
    for networks in (["b"], ["a"], [NetworkRequest("b", "eth5")], None):
        with pytest.raises(AlreadyAttachedError, match="'c1' is already attached") as info:
            m.setup("c1", "/run/netns/B", networks=networks)
        assert info.value.container_id == "c1"
    with pytest.raises(AlreadyAttachedError):
        asyncio.run(env.amanager(loopback=loopback).setup("c1", "/run/netns/B", networks=["b"]))
    assert env.calls() == ran  # nothing ran
    view = m.inspect("c1")
    assert view.netns == "/run/netns/A"
    assert [(a.network, a.ifname) for a in view.attachments] == [
        *([("cni-loopback", "lo")] if loopback else []),
        ("a", "eth0"),
    ]
    # Torn down, it is set up again anywhere.
    m.teardown("c1")
    assert m.setup("c1", "/run/netns/B", networks=["b"]).netns == "/run/netns/B"


# -- §11.2 arguments checked before any network ----------------------------------------------


@pytest.mark.parametrize(
    ("networks", "args", "why"),
    [
        (["a", NetworkRequest("b", args=[("K", "x;y")])], (), r"network 'b': .*CNI_ARGS pair 'K'"),
        (["a", NetworkRequest("b", args={"": "v"})], (), r"network 'b': .*empty key"),
        (["a", NetworkRequest("b", args=ONE_STRING)], (), r"network 'b': .*two strings"),
        (["a", "b"], [("K", "v=w")], r"network 'cni-loopback': .*CNI_ARGS pair 'K'"),
        (
            ["a", NetworkRequest("b", capability_args={"x": float("nan")})],
            (),
            r"network 'b': invalid capability arguments",
        ),
    ],
)
def test_every_requests_arguments_are_checked_before_the_first_network_runs(
    env: Env, networks: list[Any], args: Any, why: str
) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    for parallel in (False, True):
        with pytest.raises(ConfigError, match=why):  # not a SetupError: nothing to roll back
            env.manager().setup(
                "c1", "/run/netns/c1", networks=networks, args=args, parallel=parallel
            )
    with pytest.raises(ConfigError, match=why):
        asyncio.run(env.amanager().setup("c1", "/run/netns/c1", networks=networks, args=args))
    assert env.calls() == [] and env.cached() == []
    assert leftovers(env, "c1") == []


# -- §11.3 forget ------------------------------------------------------------------------------


def test_forget_drops_what_no_del_can_remove_and_runs_nothing(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-stuck.conflist", "stuck", STUCK)
    m = env.manager()
    m.setup("c1", "/run/netns/c1", networks=["a", "stuck"], args=ARGS, capability_args=CAPS)
    with pytest.raises(TeardownError, match="stuck"):
        m.teardown("c1", networks=["stuck"])
    with pytest.raises(GCError, match="stuck"):
        m.gc(["c9"])  # every later GC fails on it too
    m.setup("c2", "/run/netns/c2", networks=["a", "stuck"])
    ran = env.calls()
    caplog.set_level(logging.WARNING, "libcni")

    dropped = m.forget("c2", networks=["stuck"])
    assert dropped == (
        NetworkAttachment(
            "c2",
            "stuck",
            "eth1",
            dropped[0].config,
            "/run/netns/c2",
            (),
            {},
            True,
        ),
    )
    assert json.loads(dropped[0].config)["plugins"] == [STUCK]
    assert [(a.network, a.ifname) for a in m.inspect("c2").attachments] == [
        ("cni-loopback", "lo"),
        ("a", "eth0"),
    ]
    assert env.calls() == ran  # no plugin ran
    assert "forgot network 'stuck' (eth1) of container 'c2' without DEL" in caplog.text
    m.teardown("c2")  # the rest is torn down as usual
    assert leftovers(env, "c2") == []

    # Without networks: everything of the container (GC DELeted the rest of c1).
    dropped = asyncio.run(env.amanager().forget("c1"))
    assert [(a.network, a.ifname, a.netns, a.cni_args, a.capability_args) for a in dropped] == [
        ("stuck", "eth1", "/run/netns/c1", ARGS, CAPS),
    ]
    assert leftovers(env, "c1") == []
    m.gc([])  # no longer fails
    assert m.forget("c1") == () and m.forget("nobody") == ()


def test_forget_drops_an_attachment_in_progress(env: Env) -> None:
    dead = {
        "type": "testplugin",
        "test": {"ADD": {"error": {"code": 7, "msg": "no"}}, **STUCK_DEL},
    }
    env.write("10-dead.conflist", "dead", dead)
    m = env.manager(loopback=False)
    with pytest.raises(SetupError) as info:
        m.setup("c1", "/run/netns/c1", networks=["dead"])
    assert info.value.rollback_errors  # its record stays: every DEL fails
    assert m.inspect("c1").incomplete == (("dead", "eth0"),)
    [att] = m.forget("c1")
    assert (att.network, att.ifname, att.complete) == ("dead", "eth0", False)
    assert m.inspect("c1").incomplete == () and leftovers(env, "c1") == []
    m.gc([])


def test_libcni_forget_prints_what_to_clean_up_by_hand(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-stuck.conflist", "stuck", STUCK)
    env.manager().setup(
        "c1", "/run/netns/c1", networks=["a", "stuck"], args=ARGS, capability_args=CAPS
    )
    wired = {
        "NETCONFPATH": str(env.conf),
        "CNI_PATH": str(env.bin),
        "CNI_CACHE_DIR": str(env.cache),
        "TESTPLUGIN_RECORD": str(env.record),
    }
    out = run_cli("forget", "c1", "stuck", **wired)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "forgot c1 on network stuck (eth1), without DEL; what its plugins made stays:\n"
        "  netns: /run/netns/c1\n"
        "  args: IgnoreUnknown=1;K8S_POD_NAME=web\n"
        f"  capability args: {json.dumps(CAPS)}\n"
        "  plugins: testplugin\n"
    )
    assert "forgot network 'stuck'" in out.stderr  # the WARNING
    out = run_cli("forget", "nobody", **wired)
    assert (
        out.returncode == 0 and out.stdout == "nothing to forget: no cached attachment of nobody\n"
    )


# -- §11.3 a DEL whose netns is no longer a namespace ------------------------------------------


def test_a_del_whose_netns_is_no_longer_a_namespace_gets_an_empty_cni_netns(
    env: Env, tmp_path: Path
) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager(loopback=False)
    pins = {cid: tmp_path / cid for cid in ("down", "gc", "cni", "missing")}
    for cid, pin in pins.items():
        m.setup(cid, str(pin), networks=["a"])  # no such file yet: passed as given
    for cid in ("down", "gc", "cni"):
        pins[cid].write_text("")  # the pin left empty: its namespace went away
    env.record.unlink()
    m.teardown("down")
    m.gc(["missing", "cni"])
    net = conf_list_from_bytes((env.conf / "10-a.conflist").read_bytes())
    CNIConfig([env.bin], cache_dir=env.cache).del_network_list(
        net, RuntimeConf("cni", str(pins["cni"]), "eth0")
    )
    m.teardown("missing")  # a path that does not exist is passed as given
    assert netns_of_dels(env) == [("a", ""), ("a", ""), ("a", ""), ("a", str(pins["missing"]))]
    assert env.cached() == []
    os.unlink(pins["down"])
