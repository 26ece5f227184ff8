"""``NetworkManager.sandbox`` and ``loopback="internal"`` with the reference plugins.

A runtime program runs inside the session's throwaway host namespace; each
sandbox creates its container namespace with ``libcni.netns`` (in the test's
temporary directory), brings ``lo`` up without the loopback plugin, attaches
a bridge network (with portmap) and a ptp network, and on exit tears them
down and removes the namespace. What the kernel shows inside is read while
the sandbox is open; what is left on the host (veths, leases, iptables
rules, cache entries, namespace files) after it closes.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Any

import pytest

from .conftest import E2E
from .netns import PLUGIN_DIR, REPO_ROOT, allocated, bridge, host_local

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]

PROGRAM = """
import json, os, subprocess, sys
from libcni import NetworkManager, SetupError

conf, cache, netns_dir, cid = sys.argv[1:5]
networks = sys.argv[5:]
m = NetworkManager(conf, [os.environ["CNI_PATH"]], cache_dir=cache, loopback="internal")
ports = {"portMappings": [{"hostPort": 18081, "containerPort": 80, "protocol": "tcp"}]}

def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

out = {}
try:
    with m.sandbox(cid, networks=networks, capability_args=ports, netns_dir=netns_dir) as view:
        out["netns"] = view.netns
        out["ips"] = [str(ip) for ip in view.ips]
        out["attachments"] = [[a.network, a.ifname] for a in view.attachments]
        out["inside"] = json.loads(run("nsenter", "--net=" + view.netns, "ip", "-j", "addr"))
        out["veths"] = len(json.loads(run("ip", "-j", "link", "show", "type", "veth")))
        out["nat"] = run("iptables-save", "-t", "nat")
except SetupError as e:
    out["error"] = str(e)
out["left"] = sorted(os.listdir(netns_dir)) if os.path.isdir(netns_dir) else []
print(json.dumps(out))
"""


class Sandboxes:
    def __init__(self, e2e: E2E) -> None:
        self.e2e = e2e
        self.conf = e2e.tmp_path / "net.d"
        self.conf.mkdir()
        self.netns_dir = e2e.tmp_path / "netns"
        self.br, self.ptp, self.bad = (f"{e2e.network}-{k}" for k in ("br", "ptp", "bad"))
        self.write(
            self.br,
            [
                bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        )
        self.write(
            self.ptp,
            [{"type": "ptp", "ipMasq": False, "ipam": host_local(e2e.subnet(), e2e.data_dir)}],
        )
        self.write(
            self.bad,
            [
                {"type": "ptp", "ipMasq": False, "ipam": host_local(e2e.subnet(), e2e.data_dir)},
                {"type": "tuning", "mac": "not-a-mac", "dataDir": str(e2e.tuning_dir)},
            ],
        )

    def write(self, name: str, plugins: list[dict[str, Any]]) -> None:
        conf = {"cniVersion": "1.0.0", "name": name, "plugins": plugins}
        (self.conf / f"{name}.conflist").write_text(json.dumps(conf))

    def run(self, cid: str, *networks: str) -> dict[str, Any]:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CNI_PATH=PLUGIN_DIR)
        proc = self.e2e.host.exec(
            [sys.executable, "-c", textwrap.dedent(PROGRAM), str(self.conf),
             str(self.e2e.cache_dir), str(self.netns_dir), cid, *networks],
            check=False,
            env=env,
            timeout=180,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def leases(self) -> set[str]:
        return set().union(
            *(allocated(self.e2e.data_dir, n) for n in (self.br, self.ptp, self.bad))
        )

    def host_veths(self) -> list[Any]:
        veths: list[Any] = json.loads(self.e2e.host.ip("-j", "link", "show", "type", "veth").stdout)
        return veths

    def cached(self) -> list[str]:
        d = self.e2e.cache_dir / "results"
        return sorted(os.listdir(d)) if d.is_dir() else []


def addresses(links: list[dict[str, Any]], ifname: str) -> tuple[list[str], list[str]]:
    """(flags, IPv4 addresses) of ``ifname`` in an ``ip -j addr`` listing."""
    for link in links:
        if link["ifname"] == ifname:
            ips = [
                f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"
            ]
            return link["flags"], ips
    return [], []


def test_sandbox_with_the_reference_plugins_leaves_nothing(e2e: E2E) -> None:
    s = Sandboxes(e2e)
    cid = e2e.container_id("sbx")
    out = s.run(cid, s.br, s.ptp)
    assert "error" not in out, out
    assert out["attachments"] == [[s.br, "eth0"], [s.ptp, "eth1"]]  # no cni-loopback
    assert os.path.dirname(out["netns"]) == str(s.netns_dir)
    flags, ips = addresses(out["inside"], "lo")
    assert "UP" in flags and ips == ["127.0.0.1/8"]
    for ifname, ip in zip(("eth0", "eth1"), out["ips"], strict=True):
        flags, ips = addresses(out["inside"], ifname)
        assert "UP" in flags and ips == [ip]
    assert out["veths"] == 2 and cid in out["nat"]
    # Closed: torn down while the namespace existed, then the namespace removed.
    assert out["left"] == []
    assert s.host_veths() == []
    assert s.leases() == set()
    assert cid not in e2e.iptables_save()
    assert s.cached() == []


def test_sandbox_whose_setup_fails_rolls_back_and_removes_its_namespace(e2e: E2E) -> None:
    s = Sandboxes(e2e)
    cid = e2e.container_id("sbxbad")
    out = s.run(cid, s.br, s.ptp, s.bad)
    assert "failed (rolled back)" in out["error"] and "not-a-mac" in out["error"], out
    assert "netns" not in out and out["left"] == []
    assert s.host_veths() == []
    assert s.leases() == set()
    assert cid not in e2e.iptables_save()
    assert s.cached() == []
