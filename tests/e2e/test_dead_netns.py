"""A DEL whose network namespace went away (behaviour.md §11.3, issue 28 item 6), for real.

Containers are set up on a bridge network (host-local IPAM, portmap) in throwaway
namespaces; then each one's pin is made empty (its mount lost, as when it was made in a
private mount namespace that ended): the namespace is gone, the path is an empty file.
The reference plugins fail on such a path ("unknown FS magic"); libcni passes an empty
``CNI_NETNS`` instead, so teardown and GC clean up everything: leases, port mappings,
cache entries.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from .conftest import E2E, HostRuntime
from .netns import PLUGIN_DIR, allocated, bridge, run

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]

GC = """
import sys
from libcni import NetworkManager
m = NetworkManager(sys.argv[1], [sys.argv[2]], cache_dir=sys.argv[3])
m.gc(sys.argv[4:])
"""


def ports(port: int) -> str:
    return json.dumps(
        {"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]}
    )


def test_teardown_and_gc_of_containers_whose_pin_went_empty(e2e: E2E) -> None:
    w = HostRuntime(e2e)
    net = e2e.network
    w.write(
        "10-br.conflist",
        net,
        [
            bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    )
    down, down_id = e2e.container(), e2e.container_id("down")
    gone, gone_id = e2e.container(), e2e.container_id("gc")
    for ctr, cid, port in ((down, down_id, 18091), (gone, gone_id, 18092)):
        up = w.cli("up", cid, ctr.path, "-n", net, CAP_ARGS=ports(port))
        assert up.returncode == 0, up.stderr
    assert len(allocated(e2e.data_dir, net)) == 2
    nat = e2e.iptables_save("nat")
    assert down_id in nat and gone_id in nat
    for ctr in (down, gone):
        run(["umount", "-l", ctr.path])  # the pin left empty: the namespace is gone
        assert os.path.getsize(ctr.path) == 0

    result = w.cli("down", down_id)  # with the netns cached for it: the empty pin
    assert result.returncode == 0, result.stderr
    assert "CNI_NETNS is passed empty" in result.stderr
    w.python(GC, str(w.conf), PLUGIN_DIR, str(e2e.cache_dir))  # no container is valid

    assert allocated(e2e.data_dir, net) == set()
    nat = e2e.iptables_save("nat")
    assert down_id not in nat and gone_id not in nat
    results = e2e.cache_dir / "results"
    assert not results.exists() or os.listdir(results) == []


def test_forget_is_the_way_out_when_a_del_can_never_succeed(e2e: E2E) -> None:
    """Issue 28: an IPAM binary gone for good fails every DEL (teardown and GC for ever);
    ``libcni forget`` drops the attachment and prints what to clean up by hand."""
    plugins = e2e.tmp_path / "plugins"
    plugins.mkdir()
    for name in ("bridge", "host-local", "loopback", "portmap"):
        (plugins / name).symlink_to(os.path.join(PLUGIN_DIR, name))
    w = HostRuntime(e2e)
    net = e2e.network
    w.write(
        "10-br.conflist",
        net,
        [
            bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    )
    ctr, cid = e2e.container(), e2e.container_id("stuck")
    up = w.cli("up", cid, ctr.path, "-n", net, CAP_ARGS=ports(18093), CNI_PATH=str(plugins))
    assert up.returncode == 0, up.stderr
    [lease] = allocated(e2e.data_dir, net)
    (plugins / "host-local").unlink()  # gone for good

    down = w.cli("down", cid, CNI_PATH=str(plugins))
    assert down.returncode == 1 and "host-local" in down.stderr
    forget = w.cli("forget", cid, net, CNI_PATH=str(plugins))
    assert forget.returncode == 0, forget.stderr
    assert forget.stdout.splitlines() == [
        f"forgot {cid} on network {net} (eth0), without DEL; what its plugins made stays:",
        f"  netns: {ctr.path}",
        "  args: -",
        f"  capability args: {ports(18093)}",
        "  plugins: bridge (ipam host-local), portmap",
    ]
    gc = w.host_exec([sys.executable, "-c", GC, str(w.conf), str(plugins), str(e2e.cache_dir)], 120)
    assert gc.returncode == 0, gc.stderr  # no longer fails on it
    results = e2e.cache_dir / "results"
    assert not results.exists() or [n for n in os.listdir(results) if cid in n] == []
    # What the plugins made stays, for a person to remove: here the address lease (the
    # bridge plugin's failed DEL removed the interface before it ran its IPAM).
    assert allocated(e2e.data_dir, net) == {lease}
