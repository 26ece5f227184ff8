"""The network manager end to end: reference plugins, throwaway namespaces, the kernel's view.

The manager runs inside the session's throwaway host namespace: through the
``libcni up/down/show`` command line, or a short Python program for GC and
the async API. Each container gets loopback plus a bridge network (with
portmap, so that iptables rules exist) and a ptp network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import E2E, HostRuntime
from .netns import PLUGIN_DIR, Netns, allocated, bridge, host_local

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]


class World(HostRuntime):
    """A configuration directory with a bridge network, a ptp network and a failing one."""

    def __init__(self, e2e: E2E) -> None:
        super().__init__(e2e)
        self.br = f"{e2e.network}-br"
        self.ptp = f"{e2e.network}-ptp"
        self.bad = f"{e2e.network}-bad"
        self.write(
            "10-br.conflist",
            self.br,
            [
                bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        )
        self.write(
            "20-ptp.conflist",
            self.ptp,
            [{"type": "ptp", "ipMasq": False, "ipam": host_local(e2e.subnet(), e2e.data_dir)}],
        )
        # ptp allocates an address and makes an interface, then tuning fails.
        self.write(
            "30-bad.conflist",
            self.bad,
            [
                {"type": "ptp", "ipMasq": False, "ipam": host_local(e2e.subnet(), e2e.data_dir)},
                {"type": "tuning", "mac": "not-a-mac", "dataDir": str(e2e.tuning_dir)},
            ],
        )

    def leases(self) -> set[str]:
        out: set[str] = set()
        for net in (self.br, self.ptp, self.bad):
            out |= allocated(self.e2e.data_dir, net)
        return out

    def cached(self) -> list[str]:
        d = self.e2e.cache_dir / "results"
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


PORTS = '{"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]}'


def lo_up_with_127(ctr: Netns) -> bool:
    link = ctr.link("lo")
    return link is not None and "UP" in link["flags"] and "127.0.0.1/8" in ctr.addresses("lo")


def test_loopback_and_two_networks_as_the_kernel_sees_them(e2e: E2E) -> None:
    w = World(e2e)
    ctr, cid = e2e.container(), e2e.container_id("up")
    ctr.ip("link", "set", "lo", "down")
    up = w.cli("up", cid, ctr.path, "-n", w.br, "-n", w.ptp, CAP_ARGS=PORTS)
    assert up.returncode == 0, up.stderr
    view = json.loads(up.stdout)
    assert [(a["network"], a["ifname"]) for a in view["attachments"]] == [
        ("cni-loopback", "lo"),
        (w.br, "eth0"),
        (w.ptp, "eth1"),
    ]
    assert lo_up_with_127(ctr)
    for ifname in ("eth0", "eth1"):
        reported = view["interfaces"][ifname]["ips"]
        assert len(reported) == 1 and ctr.addresses(ifname) == reported
        assert view["interfaces"][ifname]["sandbox"] == ctr.path
    assert view["ips"] == view["interfaces"]["eth0"]["ips"] + view["interfaces"]["eth1"]["ips"]
    assert "127.0.0.1/8" not in view["ips"]
    assert {ip.split("/")[0] for ip in view["ips"]} == w.leases()
    assert cid in e2e.iptables_save("nat")
    shown = json.loads(w.cli("show", cid).stdout)
    assert shown["interfaces"] == view["interfaces"] and shown["ips"] == view["ips"]

    down = w.cli("down", cid, ctr.path)
    assert down.returncode == 0, down.stderr
    assert ctr.link("eth0") is None and ctr.link("eth1") is None
    assert w.leases() == set()
    assert cid not in e2e.iptables_save()
    assert w.cached() == []


def test_a_third_network_that_fails_leaves_nothing_behind(e2e: E2E) -> None:
    w = World(e2e)
    ctr, cid = e2e.container(), e2e.container_id("bad")
    up = w.cli("up", cid, ctr.path, "-n", w.br, "-n", w.ptp, "-n", w.bad, CAP_ARGS=PORTS)
    assert up.returncode == 1
    assert up.stderr.startswith(f"libcni: setup of container '{cid}' failed (rolled back)")
    assert len(up.stderr.strip().splitlines()) == 1, up.stderr
    for ifname in ("eth0", "eth1", "eth2"):
        assert ctr.link(ifname) is None, ifname
    assert w.leases() == set()
    assert cid not in e2e.iptables_save()
    assert w.cached() == []
    # Nothing is left that would make a new setup fail.
    up = w.cli("up", cid, ctr.path, "-n", w.br, "-n", w.ptp, CAP_ARGS=PORTS)
    assert up.returncode == 0, up.stderr
    assert w.cli("down", cid, ctr.path).returncode == 0
    assert w.leases() == set()
    assert ctr.link("eth0") is None


READINESS = """
import json, sys
from libcni import CNIError, NetworkManager
conf, plugins, cache, cid, ns, net = sys.argv[1:7]
m = NetworkManager(conf, [plugins], cache_dir=cache)
out = {}
for what, call in (("status", m.status), ("setup", lambda: m.setup(cid, ns, networks=[net]))):
    try:
        call()
    except CNIError as e:
        out[what] = [type(e).__name__, e.code, str(e)]
print(json.dumps(out))
"""


def test_a_network_whose_ipam_plugin_is_missing_is_not_ready_and_nothing_runs(e2e: E2E) -> None:
    # ptp would run, fail to find its IPAM plugin, and fail the rollback DEL alike.
    w = HostRuntime(e2e)
    ipam = host_local(e2e.subnet(), e2e.data_dir) | {"type": "no-such-ipam"}
    w.write("10-ptp.conflist", e2e.network, [{"type": "ptp", "ipMasq": False, "ipam": ipam}])
    ctr, cid = e2e.container(), e2e.container_id("ipam")
    argv = (str(w.conf), PLUGIN_DIR, str(e2e.cache_dir), cid, ctr.path, e2e.network)
    out = json.loads(w.python(READINESS, *argv).stdout)
    assert out["status"][:2] == ["NotReadyError", 50]
    assert out["setup"][:2] == ["NotReadyError", 50]
    for what in ("status", "setup"):
        assert 'failed to find plugin "no-such-ipam"' in out[what][2], out
    assert ctr.link("eth0") is None
    assert not e2e.cache_dir.exists() or not any(
        p.is_file() for d in ("results", "records") for p in (e2e.cache_dir / d).rglob("*")
    )


GC = """
import sys
from libcni import NetworkManager
m = NetworkManager(sys.argv[1], [sys.argv[2]], cache_dir=sys.argv[3])
m.gc(sys.argv[4:])
"""


def test_gc_of_a_stale_container_on_two_networks(e2e: E2E) -> None:
    w = World(e2e)
    live, live_id = e2e.container(), e2e.container_id("live")
    stale, stale_id = e2e.container(), e2e.container_id("stale")
    for ctr, cid in ((live, live_id), (stale, stale_id)):
        assert w.cli("up", cid, ctr.path, "-n", w.br, "-n", w.ptp).returncode == 0
    assert len(w.leases()) == 4
    # The runtime restarted and only knows the live container: collect the rest.
    w.python(GC, str(w.conf), PLUGIN_DIR, str(e2e.cache_dir), live_id)
    assert stale.link("eth0") is None and stale.link("eth1") is None
    assert not [n for n in w.cached() if stale_id in n]
    assert len([n for n in w.cached() if live_id in n]) == 3
    assert set(live.addresses("eth0") + live.addresses("eth1")) == {f"{ip}/24" for ip in w.leases()}
    assert len(w.leases()) == 2
    assert w.cli("down", live_id).returncode == 0
    assert w.leases() == set()


ASYNC = """
import asyncio, json, sys
from libcni import AsyncNetworkManager
conf, plugins, cache, nets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:6]
pairs = [a.split("=", 1) for a in sys.argv[6:]]

async def main():
    m = AsyncNetworkManager(conf, [plugins], cache_dir=cache)
    views = await asyncio.gather(
        *(m.setup(cid, ns, networks=nets, parallel=True) for cid, ns in pairs)
    )
    print(json.dumps([v.to_dict() for v in views]))

asyncio.run(main())
"""

ASYNC_DOWN = """
import asyncio, sys
from libcni import AsyncNetworkManager

async def main():
    m = AsyncNetworkManager(sys.argv[1], [sys.argv[2]], cache_dir=sys.argv[3])
    pairs = [a.split("=", 1) for a in sys.argv[4:]]
    await asyncio.gather(*(m.teardown(cid, ns) for cid, ns in pairs))

asyncio.run(main())
"""


def test_async_many_containers_at_once(e2e: E2E) -> None:
    w = World(e2e)
    ctrs = [(e2e.container(), e2e.container_id(f"a{i}")) for i in range(4)]
    proc = w.python(
        ASYNC,
        str(w.conf),
        PLUGIN_DIR,
        str(e2e.cache_dir),
        w.br,
        w.ptp,
        *(f"{cid}={ctr.path}" for ctr, cid in ctrs),
    )
    views = json.loads(proc.stdout)
    for (ctr, _), view in zip(ctrs, views, strict=True):
        assert lo_up_with_127(ctr)
        for ifname in ("eth0", "eth1"):
            assert ctr.addresses(ifname) == view["interfaces"][ifname]["ips"]
    assert len(w.leases()) == 8
    w.python(
        ASYNC_DOWN,
        str(w.conf),
        PLUGIN_DIR,
        str(e2e.cache_dir),
        *(f"{cid}={ctr.path}" for ctr, cid in ctrs),
    )
    assert w.leases() == set()
    assert w.cached() == []
    for ctr, _ in ctrs:
        assert ctr.link("eth0") is None


def test_paths_exist() -> None:
    assert Path(PLUGIN_DIR).is_dir()


ATTACH = """
import json, sys
from libcni import NetworkManager
m = NetworkManager(sys.argv[1], [sys.argv[2]], cache_dir=sys.argv[3])
cid, network, how = sys.argv[4:7]
view = m.attach(cid, network) if how == "attach" else m.detach(cid, network)
print(json.dumps(view.to_dict()))
"""


def test_attach_a_second_bridge_network_then_detach_it(e2e: E2E) -> None:
    w = World(e2e)
    second = f"{e2e.network}-br2"
    w.write("40-br2.conflist", second, [bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir)])
    ctr, cid = e2e.container(), e2e.container_id("hot")
    assert w.cli("up", cid, ctr.path, "-n", w.br).returncode == 0
    first_ip = ctr.addresses("eth0")

    args = (str(w.conf), PLUGIN_DIR, str(e2e.cache_dir), cid, second)
    view = json.loads(w.python(ATTACH, *args, "attach").stdout)  # the cached netns
    assert [(a["network"], a["ifname"]) for a in view["attachments"]] == [
        ("cni-loopback", "lo"),
        (w.br, "eth0"),
        (second, "eth1"),
    ]
    (added,) = view["interfaces"]["eth1"]["ips"]
    assert ctr.addresses("eth1") == [added]
    assert added.split("/")[0] in allocated(e2e.data_dir, second)
    assert w.cli("list").stdout.split() == [cid]

    view = json.loads(w.python(ATTACH, *args, "detach").stdout)
    assert [a["ifname"] for a in view["attachments"]] == ["lo", "eth0"]
    assert ctr.link("eth1") is None
    assert allocated(e2e.data_dir, second) == set()
    assert ctr.addresses("eth0") == first_ip and lo_up_with_127(ctr)  # the others stay
    assert w.cli("down", cid).returncode == 0
    assert w.leases() == set() and w.cached() == []
