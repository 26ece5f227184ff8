"""The same reference plugins driven by lists at 0.3.1 and at 0.4.0.

Recording shims (named like the plugins, first in the path) log what every
plugin receives, then exec the real one: CHECK does not exist before 0.4.0,
and DEL sends the cached result as ``prevResult`` from 0.4.0 on only.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import E2E
from .netns import allocated, bridge, install_shims, read_records

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]

PLUGINS = ["bridge", "host-local", "tuning"]


def network(e2e: E2E, version: str) -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": f"{e2e.network}-{version.replace('.', '')}",
        "plugins": [
            bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
            {"type": "tuning", "dataDir": str(e2e.tuning_dir), "sysctl": {}},
        ],
    }


def test_check_and_del_follow_the_list_version(e2e: E2E) -> None:
    shim_dir, record = install_shims(e2e.tmp_path, PLUGINS)
    e2e.driver.path = [str(shim_dir), *e2e.driver.path]
    nets = {v: network(e2e, v) for v in ("0.3.1", "0.4.0")}
    ctrs = {v: e2e.container() for v in nets}
    rts = {
        v: {"container": ctrs[v], "container_id": e2e.container_id(v.replace(".", ""))}
        for v in nets
    }

    results = {}
    for v, net in nets.items():
        results[v] = e2e.driver.ok("add", net, **rts[v])["result"]
        assert results[v]["cniVersion"] == v
        ip = results[v]["ips"][0]["address"]
        assert ctrs[v].addresses("eth0") == [ip]
        assert ip.split("/")[0] in allocated(e2e.data_dir, net["name"])
    adds = read_records(record)
    assert {(r["type"], r["stdin"]["cniVersion"]) for r in adds if r["command"] == "ADD"} == {
        (p, v) for p in PLUGINS for v in nets
    }

    # CHECK at 0.3.1: refused before anything runs.
    record.write_text("")
    err = e2e.driver.error("check", nets["0.3.1"], **rts["0.3.1"])
    assert err["class"] == "CheckNotSupportedError", err
    assert "VersionError" in err["mro"], err
    assert read_records(record) == [], "CHECK at 0.3.1 ran a plugin"

    # CHECK at 0.4.0: every plugin checks the cached result, which matches the container.
    e2e.driver.ok("check", nets["0.4.0"], **rts["0.4.0"])
    checks = read_records(record)
    assert [r["type"] for r in checks if r["command"] == "CHECK" and r["type"] != "host-local"] == [
        "bridge",
        "tuning",
    ]
    for r in checks:
        assert r["stdin"]["prevResult"] == results["0.4.0"], r

    # STATUS below 1.1.0 runs nothing.
    record.write_text("")
    e2e.driver.ok("status", nets["0.4.0"])
    assert read_records(record) == []

    # DEL at 0.4.0: reverse order, the cached result as prevResult.
    e2e.driver.ok("del", nets["0.4.0"], **rts["0.4.0"])
    dels = [r for r in read_records(record) if r["type"] != "host-local"]
    assert [(r["type"], r["command"]) for r in dels] == [("tuning", "DEL"), ("bridge", "DEL")]
    for r in dels:
        assert r["stdin"]["prevResult"] == results["0.4.0"], r
    assert allocated(e2e.data_dir, nets["0.4.0"]["name"]) == set()
    assert ctrs["0.4.0"].link("eth0") is None

    # DEL at 0.3.1: no prevResult, and the address is released all the same.
    record.write_text("")
    e2e.driver.ok("del", nets["0.3.1"], **rts["0.3.1"])
    dels = [r for r in read_records(record) if r["type"] != "host-local"]
    assert [(r["type"], r["command"]) for r in dels] == [("tuning", "DEL"), ("bridge", "DEL")]
    for r in dels:
        assert r["stdin"]["cniVersion"] == "0.3.1"
        assert "prevResult" not in r["stdin"], r
    assert allocated(e2e.data_dir, nets["0.3.1"]["name"]) == set()
    assert ctrs["0.3.1"].link("eth0") is None
    assert e2e.driver.ok("attachments")["result"] == []


def test_validate_asks_the_real_plugins_which_versions_they_support(e2e: E2E) -> None:
    subnet = e2e.subnet()
    plugins = [
        bridge(e2e.bridge_name(), subnet, e2e.data_dir),
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "tuning", "capabilities": {"mac": True, "sysctl": False}},
        {"type": "firewall", "backend": "iptables"},
    ]
    net = {"cniVersion": "1.0.0", "name": e2e.network, "plugins": plugins}
    assert e2e.driver.ok("validate", net)["result"] == ["mac", "portMappings"]

    # The Debian firewall plugin supports 0.4.0 and 1.0.0 only; the others also 0.3.1.
    info = e2e.driver.ok("version", plugin="firewall")["result"]
    assert "1.0.0" in info["supportedVersions"], info
    if "0.3.1" in info["supportedVersions"]:
        pytest.skip(f"this firewall plugin supports 0.3.1: {info}")
    err = e2e.driver.error("validate", {**net, "cniVersion": "0.3.1"})
    assert "VersionError" in err["mro"], err
    assert "firewall" in err["msg"] and "0.3.1" in err["msg"], err
    for other in ("bridge", "portmap", "tuning"):
        assert other not in err["msg"], err
