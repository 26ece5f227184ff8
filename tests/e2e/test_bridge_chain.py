"""A full chain of reference plugins (bridge + host-local, portmap, tuning, firewall) at 1.0.0."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from .conftest import E2E
from .netns import Netns, allocated, bridge, start_tcp_server, tcp_exchange

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]

HOST_PORT = 18080
CONTAINER_PORT = 8080


def chain(e2e: E2E, subnet: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": e2e.network,
        "plugins": [
            bridge(e2e.bridge_name(), subnet, e2e.data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "tuning", "capabilities": {"mac": True}, "dataDir": str(e2e.tuning_dir)},
            {"type": "firewall", "backend": "iptables"},
        ],
    }


def container_ip(result: dict[str, Any], ifname: str = "eth0") -> ipaddress.IPv4Interface:
    """The address the result gives the container's ``ifname`` (and check it points there)."""
    ifaces = result["interfaces"]
    ips = [ip for ip in result["ips"] if ifaces[ip["interface"]]["name"] == ifname]
    assert len(ips) == 1, result
    assert ifaces[ips[0]["interface"]].get("sandbox"), f"{ifname} is not in a sandbox: {result}"
    return ipaddress.IPv4Interface(ips[0]["address"])


def attach(
    e2e: E2E, conf: dict[str, Any], label: str, **kw: Any
) -> tuple[Netns, str, dict[str, Any]]:
    ctr = e2e.container()
    cid = e2e.container_id(label)
    result = e2e.driver.ok("add", conf, container=ctr, container_id=cid, **kw)["result"]
    return ctr, cid, result


def test_add_gives_each_container_an_address_and_they_can_talk(e2e: E2E) -> None:
    subnet = e2e.subnet()
    conf = chain(e2e, subnet)
    ctr1, _, res1 = attach(e2e, conf, "a")
    ctr2, _, res2 = attach(e2e, conf, "b")

    ip1, ip2 = container_ip(res1), container_ip(res2)
    for ip, ctr, res in ((ip1, ctr1, res1), (ip2, ctr2, res2)):
        assert res["cniVersion"] == "1.0.0"
        assert ip in ipaddress.IPv4Network(subnet) and ip.network == ipaddress.IPv4Network(subnet)
        assert ctr.addresses("eth0") == [str(ip)], f"ip -n {ctr.name} addr disagrees with {res}"
        assert str(ip.ip) in allocated(e2e.data_dir, e2e.network)
    assert ip1.ip != ip2.ip

    server = start_tcp_server(ctr1, str(ip1.ip), CONTAINER_PORT)
    assert tcp_exchange(ctr2, str(ip1.ip), CONTAINER_PORT, "hello") == "pong:hello"
    out, _ = server.communicate(timeout=10)
    assert f"served {ip2.ip}" in out  # no NAT between the two containers


def test_port_mappings_capability_creates_nat_rules_and_del_removes_them(e2e: E2E) -> None:
    conf = chain(e2e, e2e.subnet())
    mapping = {"hostPort": HOST_PORT, "containerPort": CONTAINER_PORT, "protocol": "tcp"}
    caps = {"portMappings": [mapping]}
    ctr, cid, res = attach(e2e, conf, "pm", capability_args=caps)
    rt = {"container": ctr, "container_id": cid, "capability_args": caps}
    ip = container_ip(res).ip

    nat = e2e.iptables_save("nat")
    assert ":CNI-HOSTPORT-DNAT" in nat
    dnat = [
        line
        for line in nat.splitlines()
        if f"--dport {HOST_PORT}" in line and f"--to-destination {ip}:{CONTAINER_PORT}" in line
    ]
    assert dnat, f"no DNAT rule for {HOST_PORT} -> {ip}:{CONTAINER_PORT} in:\n{nat}"

    # (No CHECK here: portmap 1.1.x's CHECK wants ip6tables chains that it never created
    # for IPv4-only mappings, containernetworking/plugins#819; a plugin bug.)
    # The mapping works: from the host namespace, host port -> container port.
    gateway = res["ips"][0]["gateway"]
    server = start_tcp_server(ctr, str(ip), CONTAINER_PORT)
    assert tcp_exchange(e2e.host, gateway, HOST_PORT, "mapped") == "pong:mapped"
    server.communicate(timeout=10)

    # The capability arguments are cached with the attachment, for DEL and GC.
    [att] = e2e.driver.ok("attachments", container_id=cid)["result"]
    assert att["capability_args"] == caps

    e2e.driver.ok("del", conf, **rt)
    nat = e2e.iptables_save("nat")
    assert f"--dport {HOST_PORT}" not in nat, nat
    assert f"{ip}:{CONTAINER_PORT}" not in nat, nat


def test_mac_capability_reaches_tuning(e2e: E2E) -> None:
    conf = chain(e2e, e2e.subnet())
    mac = "0e:22:2e:00:00:42"
    ctr, cid, res = attach(e2e, conf, "mac", capability_args={"mac": mac})
    link = ctr.link("eth0")
    assert link is not None and link["address"] == mac, link
    assert [i["mac"] for i in res["interfaces"] if i["name"] == "eth0" and i.get("sandbox")] == [
        mac
    ]
    e2e.driver.ok("check", conf, container=ctr, container_id=cid, capability_args={"mac": mac})


def test_check_then_interface_removed_behind_our_back_then_del_twice(e2e: E2E) -> None:
    conf = chain(e2e, e2e.subnet())
    ctr, cid, res = attach(e2e, conf, "chk")
    ip = str(container_ip(res).ip)
    attachment = {"container": ctr, "container_id": cid}

    e2e.driver.ok("check", conf, **attachment)
    assert e2e.cache_entry(e2e.network, cid).is_file()
    # firewall's per-container rules exist (and DEL must find them through prevResult).
    assert ip in e2e.iptables_save("filter")

    ctr.ip("link", "del", "eth0")
    err = e2e.driver.error("check", conf, **attachment)
    assert err["class"] == "PluginError", err
    assert err["plugin"] == "bridge" and err["command"] == "CHECK", err
    assert "eth0" in err["msg"], err  # bridge: "Interface name eth0 not found"

    assert ip in allocated(e2e.data_dir, e2e.network)
    e2e.driver.ok("del", conf, **attachment)
    assert ip not in allocated(e2e.data_dir, e2e.network), "DEL did not release the address"
    assert not e2e.cache_entry(e2e.network, cid).exists(), "DEL left the cache entry"
    assert ip not in e2e.iptables_save(), "firewall rules left after DEL (prevResult not sent?)"
    assert e2e.driver.ok("cached", conf, **attachment)["result"] is None

    e2e.driver.ok("del", conf, **attachment)  # a second DEL succeeds
