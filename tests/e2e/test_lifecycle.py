"""What runtimes do around the basic operations: the cache getters, DEL after the
container's namespace is gone, and many containers attached at once (sync and async)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from .conftest import E2E
from .netns import allocated, bridge

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]


def network(e2e: E2E) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": e2e.network,
        "plugins": [
            bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
            {"type": "tuning", "capabilities": {"mac": True}, "dataDir": str(e2e.tuning_dir)},
            {"type": "firewall", "backend": "iptables"},
        ],
    }


def test_cached_result_and_config_are_what_add_produced(e2e: E2E) -> None:
    conf = network(e2e)
    ctr, cid = e2e.container(), e2e.container_id("cache")
    caps = {"mac": "0e:22:2e:00:00:43"}
    args = [("IgnoreUnknown", "1"), ("E2E", "yes")]
    rt = {"container": ctr, "container_id": cid}
    result = e2e.driver.ok("add", conf, **rt, capability_args=caps, args=args)["result"]

    assert e2e.driver.ok("cached", conf, **rt)["result"] == result
    cached = e2e.driver.ok("cached_config", conf, **rt)["result"]
    assert cached == {"config": conf, "args": [list(a) for a in args], "capability_args": caps}
    [att] = e2e.driver.ok("attachments", container_id=cid)["result"]
    assert att == {
        "container_id": cid,
        "network": e2e.network,
        "ifname": "eth0",
        "netns": ctr.path,
        "cni_args": [list(a) for a in args],
        "capability_args": caps,
        "complete": True,
    }

    e2e.driver.ok("del", conf, **rt, capability_args=caps, args=args)
    assert e2e.driver.ok("cached", conf, **rt)["result"] is None
    assert e2e.driver.ok("cached_config", conf, **rt)["result"] is None


def test_del_after_the_container_namespace_is_gone(e2e: E2E) -> None:
    conf = network(e2e)
    ctr, cid = e2e.container(), e2e.container_id("gone")
    result = e2e.driver.ok("add", conf, container=ctr, container_id=cid)["result"]
    ip = result["ips"][0]["address"].split("/")[0]
    assert ip in e2e.iptables_save("filter")
    netns_path = ctr.path
    ctr.delete()

    reply = e2e.driver.call("del", conf, container_id=cid)
    # DEL works without a netns (and with one that has vanished: below).
    assert reply["ok"], reply["error"]
    assert ip not in allocated(e2e.data_dir, e2e.network)
    assert ip not in e2e.iptables_save(), "firewall rules left: prevResult not sent?"
    assert not e2e.cache_entry(e2e.network, cid).exists()

    ctr2, cid2 = e2e.container(), e2e.container_id("gone2")
    result = e2e.driver.ok("add", conf, container=ctr2, container_id=cid2)["result"]
    ip2 = result["ips"][0]["address"].split("/")[0]
    ctr2.delete()
    assert ctr2.path != netns_path
    e2e.driver.ok("del", conf, container=ctr2, container_id=cid2)  # the path no longer exists
    assert ip2 not in allocated(e2e.data_dir, e2e.network)
    assert not e2e.cache_entry(e2e.network, cid2).exists()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_many_containers_attach_and_detach_at_once(e2e: E2E, api: str) -> None:
    conf = network(e2e)
    n = 4  # concurrent ADDs on one bridge and one host-local store; more adds only time
    ctrs = [(e2e.container(), e2e.container_id(f"p{i}")) for i in range(n)]

    def add(ctr_cid: Any) -> dict[str, Any]:
        ctr, cid = ctr_cid
        result: dict[str, Any] = e2e.driver.ok(
            "add", conf, container=ctr, container_id=cid, api=api
        )["result"]
        return result

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(add, ctrs))
    ips = [r["ips"][0]["address"] for r in results]
    assert len(set(ips)) == n, ips
    for (ctr, cid), ip in zip(ctrs, ips, strict=True):
        assert ctr.addresses("eth0") == [ip]
        assert e2e.cache_entry(e2e.network, cid).is_file()
    assert allocated(e2e.data_dir, e2e.network) == {ip.split("/")[0] for ip in ips}
    assert len(e2e.driver.ok("attachments", api=api)["result"]) == n

    def delete(ctr_cid: Any) -> None:
        ctr, cid = ctr_cid
        e2e.driver.ok("del", conf, container=ctr, container_id=cid, api=api)

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(delete, ctrs))
    assert allocated(e2e.data_dir, e2e.network) == set()
    assert e2e.driver.ok("attachments", api=api)["result"] == []
    for ctr, _ in ctrs:
        assert ctr.link("eth0") is None


def test_add_failing_midway_caches_nothing_and_del_cleans_up(e2e: E2E) -> None:
    conf = network(e2e)
    ctr, cid = e2e.container(), e2e.container_id("bad")
    rt = {"container": ctr, "container_id": cid, "capability_args": {"mac": "not-a-mac"}}
    err = e2e.driver.error("add", conf, **rt)
    assert err["class"] == "PluginError", err
    assert (err["plugin"], err["command"]) == ("tuning", "ADD"), err
    assert err["msg"], err
    assert not e2e.cache_entry(e2e.network, cid).exists()
    # Only the write-ahead record: in progress, with what the ADD was given.
    [att] = e2e.driver.ok("attachments")["result"]
    assert (att["container_id"], att["complete"], att["netns"]) == (cid, False, ctr.path)
    assert att["capability_args"] == {"mac": "not-a-mac"}
    # bridge ran before tuning failed: its address stays until the runtime DELs.
    [ip] = allocated(e2e.data_dir, e2e.network)
    assert ctr.addresses("eth0") == [f"{ip}/24"]

    e2e.driver.ok("del", conf, **rt)
    assert allocated(e2e.data_dir, e2e.network) == set()
    assert ctr.link("eth0") is None
    assert e2e.driver.ok("attachments")["result"] == []
