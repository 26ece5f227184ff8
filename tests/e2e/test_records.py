"""What the cache knows, end to end: the reference plugins, throwaway namespaces (issue 18).

- ``NetworkManager.teardown(cid)`` without the netns (as the docs called it)
  removes the container's interface and the host's veth, not only the address:
  each DEL gets the netns cached at ADD.
- ``libcni del`` without ``CAP_ARGS`` (cnitool's documented add/del) removes
  portmap's DNAT rules: it uses the capability arguments cached at ADD.
- A setup whose runtime died after the bridge plugin ran (its ADD never
  cached) is found by the write-ahead record: one ``gc`` of the restarted
  runtime leaves no address, veth, rule, entry or record.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Any

import pytest

from libcni.cli import container_id_for_netns

from .conftest import E2E, HostRuntime
from .netns import PLUGIN_DIR, allocated, bridge

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]

PORTS = {"portMappings": [{"hostPort": 18089, "containerPort": 80, "protocol": "tcp"}]}


class World(HostRuntime):
    """One bridge network with portmap, its configuration directory and its bridge name."""

    def __init__(self, e2e: E2E) -> None:
        super().__init__(e2e)
        self.bridge = e2e.bridge_name()
        self.net = f"{e2e.network}-br"
        plugins = [
            bridge(self.bridge, e2e.subnet(), e2e.data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]
        self.write("10-br.conflist", self.net, plugins)

    def cli(self, *argv: str, **extra: str) -> Any:
        """``python -m libcni ARGV``, which must succeed."""
        proc = super().cli(*argv, **extra)
        assert proc.returncode == 0, proc.stderr
        return proc

    def veths(self) -> list[str]:
        """The host-side interfaces attached to the bridge."""
        out = self.e2e.host.ip("-o", "link", "show", "master", self.bridge, check=False).stdout
        return [
            line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line
        ]

    def leases(self) -> set[str]:
        return allocated(self.e2e.data_dir, self.net)

    def dnat_rules(self) -> list[str]:
        nat = self.e2e.iptables_save("nat")
        return [line for line in nat.splitlines() if "--dport 18089" in line]

    def cache_files(self) -> list[str]:
        out = []
        for sub in ("results", "records"):
            for dirpath, _, files in os.walk(self.e2e.cache_dir / sub):
                out += [os.path.join(dirpath, f) for f in files]
        return out


TEARDOWN_WITHOUT_NETNS = """
import sys
from libcni import NetworkManager
m = NetworkManager(sys.argv[1], [sys.argv[2]], cache_dir=sys.argv[3])
m.teardown(sys.argv[4])
"""


def test_teardown_without_the_netns_removes_the_interface_and_the_veth(e2e: E2E) -> None:
    w = World(e2e)
    ctr, cid = e2e.container(), e2e.container_id("nons")
    w.cli("up", cid, ctr.path, "-n", w.net, CAP_ARGS=json.dumps(PORTS))
    assert ctr.link("eth0") is not None and len(w.veths()) == 1 and len(w.leases()) == 1
    assert len(w.dnat_rules()) >= 1
    w.python(TEARDOWN_WITHOUT_NETNS, str(w.conf), PLUGIN_DIR, str(e2e.cache_dir), cid)
    # With an empty netns the bridge plugin frees the address and leaves the interfaces:
    # the next container would get the address this one still holds.
    assert ctr.link("eth0") is None
    assert w.veths() == []
    assert w.leases() == set()
    assert w.dnat_rules() == []
    assert w.cache_files() == []


def test_cli_del_without_cap_args_removes_portmaps_rules(e2e: E2E) -> None:
    w = World(e2e)
    ctr = e2e.container()
    cid = container_id_for_netns(ctr.path)
    w.cli("add", w.net, ctr.path, CAP_ARGS=json.dumps(PORTS))
    assert w.dnat_rules() and cid in e2e.iptables_save("nat")
    w.cli("del", w.net, ctr.path)  # as docs/cli.rst's example: no CAP_ARGS
    assert w.dnat_rules() == []
    assert cid not in e2e.iptables_save()
    assert ctr.link("eth0") is None and w.veths() == [] and w.leases() == set()
    assert w.cache_files() == []


KILLED = """
import os, signal, sys
import libcni
from libcni import NetworkManager
from libcni.invoke import RawExec

class DiesAfterBridge(RawExec):
    # The runtime dies (SIGKILL) right after the bridge plugin's ADD returned: the
    # address, the veth and the container's interface exist, and nothing is cached.
    def exec_plugin(self, path, stdin, env, timeout):
        out = super().exec_plugin(path, stdin, env, timeout)
        if env.get("CNI_COMMAND") == "ADD" and path.endswith("/bridge"):
            os.kill(os.getpid(), signal.SIGKILL)
        return out

conf, plugins, cache, cid, netns, caps = sys.argv[1:7]
m = NetworkManager(conf, [plugins], cache_dir=cache, exec=DiesAfterBridge())
m.setup(cid, netns, capability_args=__import__("json").loads(caps))
"""

GC = """
import sys
from libcni import NetworkManager
NetworkManager(sys.argv[1], [sys.argv[2]], cache_dir=sys.argv[3]).gc(sys.argv[4:])
"""


def test_a_runtime_killed_after_the_bridge_plugin_leaks_nothing_after_gc(e2e: E2E) -> None:
    w = World(e2e)
    ctr, cid = e2e.container(), e2e.container_id("killed")
    proc = e2e.host.exec(
        [
            sys.executable,
            "-c",
            textwrap.dedent(KILLED),
            str(w.conf),
            PLUGIN_DIR,
            str(e2e.cache_dir),
            cid,
            ctr.path,
            json.dumps(PORTS),
        ],
        check=False,
        env=w.env(),
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    assert ctr.link("eth0") is not None and len(w.veths()) == 1 and len(w.leases()) == 1
    assert not (e2e.cache_dir / "results" / f"{w.net}-{cid}-eth0").exists()
    w.python(GC, str(w.conf), PLUGIN_DIR, str(e2e.cache_dir), "some-live-container")
    assert ctr.link("eth0") is None
    assert w.veths() == []
    assert w.leases() == set()
    assert cid not in e2e.iptables_save()
    assert w.cache_files() == []
