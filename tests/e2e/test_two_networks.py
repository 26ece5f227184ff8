"""One container on two networks: ``loopback`` (lo) and ``ptp`` + ``host-local`` (net1).

Each network is attached and detached on its own; the other is left as it was.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import E2E
from .netns import Netns, allocated, host_local, start_tcp_server, tcp_exchange

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]


def lo_up(ctr: Netns) -> bool:
    link = ctr.link("lo")
    assert link is not None
    return "UP" in link["flags"]


def test_loopback_and_ptp_networks_attach_and_detach_independently(e2e: E2E) -> None:
    subnet = e2e.subnet()
    lo_net: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": f"{e2e.network}-lo",
        "plugins": [{"type": "loopback"}],
    }
    ptp_net: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": f"{e2e.network}-ptp",
        "plugins": [{"type": "ptp", "ipMasq": False, "ipam": host_local(subnet, e2e.data_dir)}],
    }
    ctr = e2e.container()
    cid = e2e.container_id("two")
    lo = {"container": ctr, "container_id": cid, "ifname": "lo"}
    net1 = {"container": ctr, "container_id": cid, "ifname": "net1"}
    ctr.ip("link", "set", "lo", "down")
    assert not lo_up(ctr)

    # loopback alone
    res = e2e.driver.ok("add", lo_net, **lo)["result"]
    assert res["cniVersion"] == "1.0.0"
    assert lo_up(ctr)
    assert ctr.link("net1") is None

    # ptp as a second network of the same container
    res = e2e.driver.ok("add", ptp_net, **net1)["result"]
    [ip] = [i["address"] for i in res["ips"]]
    assert ip.startswith(subnet.rsplit(".", 2)[0] + "."), res
    assert ctr.addresses("net1") == [ip]
    assert ip.split("/")[0] in allocated(e2e.data_dir, ptp_net["name"])
    assert lo_up(ctr)
    # ptp's host end answers from the host namespace side of the link.
    server = start_tcp_server(ctr, ip.split("/")[0], 9090)
    assert tcp_exchange(e2e.host, ip.split("/")[0], 9090, "via-ptp") == "pong:via-ptp"
    server.communicate(timeout=10)

    attachments = e2e.driver.ok("attachments", container_id=cid)["result"]
    assert sorted((a["network"], a["ifname"]) for a in attachments) == [
        (lo_net["name"], "lo"),
        (ptp_net["name"], "net1"),
    ]
    e2e.driver.ok("check", lo_net, **lo)
    e2e.driver.ok("check", ptp_net, **net1)

    # detach loopback: net1 stays
    e2e.driver.ok("del", lo_net, **lo)
    assert not lo_up(ctr)
    assert ctr.addresses("net1") == [ip]
    e2e.driver.ok("check", ptp_net, **net1)

    # attach loopback again, then detach ptp: lo stays up
    e2e.driver.ok("add", lo_net, **lo)
    assert lo_up(ctr)
    e2e.driver.ok("del", ptp_net, **net1)
    assert ctr.link("net1") is None
    assert allocated(e2e.data_dir, ptp_net["name"]) == set()
    assert lo_up(ctr)
    assert [a["network"] for a in e2e.driver.ok("attachments", container_id=cid)["result"]] == [
        lo_net["name"]
    ]

    e2e.driver.ok("del", lo_net, **lo)
    assert not lo_up(ctr)
    assert e2e.driver.ok("attachments", container_id=cid)["result"] == []
