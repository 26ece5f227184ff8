"""GC with the reference plugins: stale cached attachments are DELed, valid ones left alone.

The Debian reference plugins (1.1.x) support spec versions up to 1.0.0, not
1.1.0 (``/usr/lib/cni/bridge`` VERSION says so), so the list is at the highest
version they support: at 1.0.0 that exercises the stale-attachment DEL part of
GC, which does not depend on the plugins' GC support, and checks that the GC
command itself is not sent (a recording shim sees every call). With plugins
that support 1.1.0 the list is at 1.1.0 and the GC command is checked too.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import E2E
from .netns import Netns, allocated, bridge, install_shims, read_records

pytestmark = [pytest.mark.netns, pytest.mark.refplugins]


def highest_supported(e2e: E2E) -> str:
    """The highest of 1.1.0 and 1.0.0 that the reference plugins support."""
    for plugin in ("bridge", "host-local"):
        info = e2e.driver.ok("version", plugin=plugin)["result"]
        assert "1.0.0" in info["supportedVersions"], info
        if "1.1.0" not in info["supportedVersions"]:
            return "1.0.0"
    return "1.1.0"


def test_gc_deletes_stale_attachments_and_keeps_valid_ones(e2e: E2E) -> None:
    shim_dir, record = install_shims(e2e.tmp_path, ["bridge", "host-local", "portmap"])
    e2e.driver.path = [str(shim_dir), *e2e.driver.path]
    version = highest_supported(e2e)
    conf: dict[str, Any] = {
        "cniVersion": version,
        "name": e2e.network,
        "plugins": [
            bridge(e2e.bridge_name(), e2e.subnet(), e2e.data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    ports = {"stale": 18081, "valid": 18082}
    attached: dict[str, tuple[Netns, str, str]] = {}
    for label in ("stale", "valid"):
        ctr, cid = e2e.container(), e2e.container_id(label)
        args = [("IgnoreUnknown", "1"), ("E2E_LABEL", label)]
        caps = {
            "portMappings": [{"hostPort": ports[label], "containerPort": 80, "protocol": "tcp"}]
        }
        res = e2e.driver.ok(
            "add", conf, container=ctr, container_id=cid, args=args, capability_args=caps
        )["result"]
        attached[label] = (ctr, cid, res["ips"][0]["address"].split("/")[0])
    stale_ctr, stale_id, stale_ip = attached["stale"]
    valid_ctr, valid_id, valid_ip = attached["valid"]
    assert {stale_ip, valid_ip} <= allocated(e2e.data_dir, e2e.network)
    record.write_text("")

    e2e.driver.ok("gc", conf, valid_attachments=[(valid_id, "eth0")])

    # The stale attachment was DELed with its cached netns: gone everywhere.
    assert not e2e.cache_entry(e2e.network, stale_id).exists()
    assert stale_ip not in allocated(e2e.data_dir, e2e.network)
    assert stale_ctr.link("eth0") is None
    # The valid one is untouched.
    assert e2e.cache_entry(e2e.network, valid_id).is_file()
    assert valid_ip in allocated(e2e.data_dir, e2e.network)
    assert valid_ctr.addresses("eth0") == [f"{valid_ip}/24"]
    nat = e2e.iptables_save("nat")
    assert f"--dport {ports['stale']}" not in nat
    assert f"--dport {ports['valid']}" in nat
    [att] = e2e.driver.ok("attachments")["result"]
    assert (att["container_id"], att["network"], att["ifname"]) == (valid_id, e2e.network, "eth0")

    calls = [
        (r["type"], r["command"], r["env"].get("CNI_CONTAINERID")) for r in read_records(record)
    ]
    assert ("bridge", "DEL", stale_id) in calls, calls
    del_calls = [c for c in calls if c[1] == "DEL"]
    assert all(cid == stale_id for _, _, cid in del_calls), (
        f"GC DELed the valid attachment: {calls}"
    )
    gcs = [r for r in read_records(record) if r["command"] == "GC"]
    if version == "1.0.0":
        assert not gcs, f"GC command sent at 1.0.0: {calls}"
    else:
        [gc] = [r for r in gcs if r["type"] == "bridge"]
        assert gc["stdin"]["cni.dev/valid-attachments"] == [
            {"containerID": valid_id, "ifname": "eth0"}
        ]
    dels = [r for r in read_records(record) if r["type"] == "bridge" and r["command"] == "DEL"]
    assert dels[0]["stdin"]["prevResult"]["ips"][0]["address"].startswith(stale_ip + "/")
    # ... with the netns and CNI_ARGS cached at ADD.
    assert dels[0]["env"]["CNI_NETNS"] == stale_ctr.path
    assert dels[0]["env"]["CNI_ARGS"] == "IgnoreUnknown=1;E2E_LABEL=stale"
    # ... and the capability arguments cached at ADD.
    [pm_del] = [r for r in read_records(record) if r["type"] == "portmap" and r["command"] == "DEL"]
    assert pm_del["stdin"]["runtimeConfig"]["portMappings"][0]["hostPort"] == ports["stale"]

    # Without a list of valid attachments, every attachment of the network is stale.
    e2e.driver.ok("gc", conf)
    assert not e2e.cache_entry(e2e.network, valid_id).exists()
    assert allocated(e2e.data_dir, e2e.network) == set()
    assert valid_ctr.link("eth0") is None
    assert f"--dport {ports['valid']}" not in e2e.iptables_save("nat")
    assert e2e.driver.ok("attachments")["result"] == []
