"""Typed capability arguments with the reference plugins: a port mapping and a bandwidth
limit set through ``RuntimeConfig``, seen in iptables (portmap's DNAT rules) and tc (the
bandwidth plugin's tbf qdiscs and ingress qdisc), on a network defined in code.

The runtime (a short Python program using ``NetworkManager(networks=[...],
conf_dir=None)``) runs inside the session's throwaway host namespace; the
container has its own namespace; nothing touches the machine's own.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from typing import Any

import pytest

from .conftest import E2E
from .netns import PLUGIN_DIR, REPO_ROOT, allocated, bridge, start_tcp_server, tcp_exchange

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]

HOST_PORT = 18181
CONTAINER_PORT = 8080

RUNTIME = """
import json, sys
import libcni
from libcni import Bandwidth, NetworkManager, PortMapping, RuntimeConfig

conflist, cache_dir, cid, netns, action = sys.argv[1:6]
manager = NetworkManager(
    None,                       # no configuration directory: the network is defined here
    [sys.argv[6]],
    networks=[libcni.conf_list_from_bytes(conflist)],
    cache_dir=cache_dir,
    timeout=60,
)
if action == "up":
    caps = RuntimeConfig(
        port_mappings=[PortMapping(HOST_PORT, CONTAINER_PORT, "TCP")],
        bandwidth=Bandwidth(
            ingress_rate=1_000_000, ingress_burst=100_000,
            egress_rate=2_000_000, egress_burst=200_000,
        ),
    )
    view = manager.setup(cid, netns, capability_args=caps)
    print(json.dumps(view.to_dict()))
else:
    manager.teardown(cid, netns)
""".replace("HOST_PORT", str(HOST_PORT)).replace("CONTAINER_PORT", str(CONTAINER_PORT))


def run_runtime(e2e: E2E, conf: dict[str, Any], cid: str, netns: str, action: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = e2e.host.exec(
        [
            sys.executable,
            "-c",
            textwrap.dedent(RUNTIME),
            json.dumps(conf),
            str(e2e.cache_dir),
            cid,
            netns,
            action,
            PLUGIN_DIR,
        ],
        check=False,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def tc_qdiscs(e2e: E2E) -> list[dict[str, Any]]:
    out = e2e.host.exec(["tc", "-j", "qdisc", "show"]).stdout
    qdiscs: list[dict[str, Any]] = json.loads(out or "[]")
    return qdiscs


def test_port_mapping_and_bandwidth_from_a_runtime_config(e2e: E2E) -> None:
    subnet = e2e.subnet()
    conf = {
        "cniVersion": "1.0.0",
        "name": e2e.network,
        "plugins": [
            bridge(e2e.bridge_name(), subnet, e2e.data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        ],
    }
    ctr, cid = e2e.container(), e2e.container_id("rc")
    view = json.loads(run_runtime(e2e, conf, cid, ctr.path, "up"))
    ip = view["ips"][0].split("/")[0]
    veth = [name for name in view["hostInterfaces"] if name.startswith("veth")]
    assert len(veth) == 1, view["hostInterfaces"]  # the view names the host end

    # portmap: the DNAT rule of the mapping, in the host namespace's nat table.
    nat = e2e.iptables_save("nat")
    assert any(
        "-p tcp" in line and f"--dport {HOST_PORT}" in line
        and f"--to-destination {ip}:{CONTAINER_PORT}" in line
        for line in nat.splitlines()
    ), nat  # fmt: skip
    # ... and it works: host port -> container port.
    server = start_tcp_server(ctr, ip, CONTAINER_PORT)
    assert tcp_exchange(e2e.host, view["gateways"][0], HOST_PORT, "typed") == "pong:typed"
    server.communicate(timeout=10)

    # bandwidth: ingress (to the container) shaped by a tbf on the host end of the veth;
    # egress redirected by an ingress qdisc there to an ifb device shaped by its own tbf.
    qdiscs = tc_qdiscs(e2e)
    on_veth = {q["kind"]: q for q in qdiscs if q["dev"] == veth[0]}
    assert set(on_veth) >= {"tbf", "ingress"}, qdiscs
    assert on_veth["tbf"]["options"]["rate"] == 125_000, on_veth  # bytes/s: 1 Mbit/s
    ifb = [q for q in qdiscs if q["kind"] == "tbf" and q["dev"] != veth[0]]
    assert [q["options"]["rate"] for q in ifb] == [250_000], qdiscs  # 2 Mbit/s
    ifb_dev = ifb[0]["dev"]

    # What was cached is what the plugins got: the conventions' JSON.
    cached = json.loads(
        (e2e.cache_entry(e2e.network, cid)).read_text()
    )["capabilityArgs"]  # fmt: skip
    assert cached == {
        "portMappings": [
            {"hostPort": HOST_PORT, "containerPort": CONTAINER_PORT, "protocol": "tcp"}
        ],
        "bandwidth": {
            "ingressRate": 1000000,
            "ingressBurst": 100000,
            "egressRate": 2000000,
            "egressBurst": 200000,
        },
    }

    run_runtime(e2e, conf, cid, ctr.path, "down")
    nat = e2e.iptables_save("nat")
    assert f"--dport {HOST_PORT}" not in nat and f"{ip}:{CONTAINER_PORT}" not in nat, nat
    links = e2e.host.exec(["ip", "-o", "link", "show"]).stdout
    assert not re.search(rf"\b{re.escape(ifb_dev)}\b", links), links  # the ifb is gone
    assert ip not in allocated(e2e.data_dir, e2e.network)
