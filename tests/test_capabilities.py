"""Typed capability arguments (libcni.capabilities): the values, their checks, what plugins get.

The checks are property-tested (every invalid port, IP, MAC or CIDR is refused
with a ValidationError naming the field and the value; every valid one
round-trips), and what a plugin receives is read back from the recording test
plugin (tests/plugins/testplugin), key by key as CNI's conventions name them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

import attrs
import harness
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import libcni
import libcni.capabilities
from libcni import (
    Bandwidth,
    DNSConfig,
    IPRange,
    NetworkRequest,
    PortMapping,
    RuntimeConf,
    RuntimeConfig,
    ValidationError,
    k8s_args,
)
from libcni.errors import CODE_INVALID_CONFIG

#: Every capability of CNI's conventions, with the RuntimeConfig field that sets it.
EVERY_CAPABILITY = (
    "portMappings",
    "bandwidth",
    "ipRanges",
    "dns",
    "ips",
    "mac",
    "infinibandGUID",
    "deviceID",
    "aliases",
    "cgroupPath",
    "io.kubernetes.cri.pod-annotations",
)


def full_config() -> RuntimeConfig:
    return RuntimeConfig(
        port_mappings=[
            PortMapping(8080, 80),
            PortMapping(5353, 53, "UDP", "192.0.2.7"),
            PortMapping(9000, 9000, "sctp", "2001:DB8::1"),
        ],
        bandwidth=Bandwidth(
            ingress_rate=1_000_000,
            ingress_burst=100_000,
            egress_rate=2_000_000,
            egress_burst=200_000,
        ),
        ip_ranges=[
            [IPRange("10.1.0.0/16", "10.1.1.10", "10.1.1.99", "10.1.0.1")],
            [IPRange("fd00::/64")],
        ],
        dns=DNSConfig(["10.96.0.10"], ["svc.cluster.local"], ["ndots:5"]),
        ips=["10.1.1.50/16", "fd00::50"],
        mac="C2-11-22-33-44-55",
        infiniband_guid="c2:11:22:33:44:55:66:77",
        device_id="0000:04:00.1",
        aliases=["web", "frontend"],
        cgroup_path="/kubepods/burstable/pod123",
        pod_annotations={"k8s.v1.cni.cncf.io/networks": "[]", "team": "blue"},
    )


#: What the plugins must receive for full_config(), written by hand from CNI's conventions.
FULL_JSON: dict[str, Any] = {
    "portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.7"},
        {"hostPort": 9000, "containerPort": 9000, "protocol": "sctp", "hostIP": "2001:db8::1"},
    ],
    "bandwidth": {
        "ingressRate": 1000000,
        "ingressBurst": 100000,
        "egressRate": 2000000,
        "egressBurst": 200000,
    },
    "ipRanges": [
        [
            {
                "subnet": "10.1.0.0/16",
                "rangeStart": "10.1.1.10",
                "rangeEnd": "10.1.1.99",
                "gateway": "10.1.0.1",
            }
        ],
        [{"subnet": "fd00::/64"}],
    ],
    "dns": {"servers": ["10.96.0.10"], "searches": ["svc.cluster.local"], "options": ["ndots:5"]},
    "ips": ["10.1.1.50/16", "fd00::50"],
    "mac": "c2:11:22:33:44:55",
    "infinibandGUID": "c2:11:22:33:44:55:66:77",
    "deviceID": "0000:04:00.1",
    "aliases": ["web", "frontend"],
    "cgroupPath": "/kubepods/burstable/pod123",
    "io.kubernetes.cri.pod-annotations": {"k8s.v1.cni.cncf.io/networks": "[]", "team": "blue"},
}


def refused(call: Any, field: str, value: Any) -> ValidationError:
    """``call()`` raises a ValidationError (code 7) whose text names ``field`` and ``value``."""
    with pytest.raises(ValidationError) as info:
        call()
    text = str(info.value)
    assert field in text, text
    assert repr(value)[:100] in text, text
    assert info.value.code == CODE_INVALID_CONFIG
    return info.value


# -- the values ------------------------------------------------------------------------


def test_capability_args_uses_the_conventions_keys_exactly() -> None:
    assert full_config().capability_args() == FULL_JSON
    assert set(FULL_JSON) == set(EVERY_CAPABILITY)


def test_unset_members_are_left_out() -> None:
    assert RuntimeConfig().capability_args() == {}
    assert RuntimeConfig(aliases=["a"]).capability_args() == {"aliases": ["a"]}
    # An empty annotation mapping is set (not None): it is passed.
    assert RuntimeConfig(pod_annotations={}).capability_args() == {
        "io.kubernetes.cri.pod-annotations": {}
    }
    assert DNSConfig().to_dict() == {}


def test_values_are_immutable_and_compare_by_value() -> None:
    rc = full_config()
    assert rc == full_config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        rc.mac = "x"  # type: ignore[misc]
    pm = PortMapping(80, 80)
    assert hash(pm) == hash(PortMapping(80, 80, "TCP"))
    assert isinstance(rc.port_mappings, tuple) and isinstance(rc.ip_ranges[0], tuple)


def test_every_name_is_importable_from_libcni_and_the_module() -> None:
    for name in libcni.capabilities.__all__:
        if name not in ("POD_ANNOTATIONS", "check_plain"):  # the module's own
            assert getattr(libcni, name) is getattr(libcni.capabilities, name)


def test_protocol_any_case_stored_lower() -> None:
    assert [PortMapping(1, 1, p).protocol for p in ("TCP", "Udp", "sctp")] == ["tcp", "udp", "sctp"]
    refused(lambda: PortMapping(1, 1, "icmp"), "PortMapping.protocol", "icmp")
    refused(lambda: PortMapping(1, 1, None), "PortMapping.protocol", None)  # type: ignore[arg-type]


def test_bandwidth_rate_and_burst_go_together() -> None:
    assert Bandwidth().to_dict() == dict.fromkeys(
        ("ingressRate", "ingressBurst", "egressRate", "egressBurst"), 0
    )
    e = refused(lambda: Bandwidth(ingress_rate=1000), "Bandwidth.ingress_rate", 1000)
    assert "ingress_burst" in str(e)
    e = refused(lambda: Bandwidth(egress_burst=5), "Bandwidth.egress_burst", 5)
    assert "egress_rate" in str(e)
    refused(lambda: Bandwidth(ingress_rate=-1, ingress_burst=1), "Bandwidth.ingress_rate", -1)
    refused(lambda: Bandwidth(egress_rate=2**64, egress_burst=1), "Bandwidth.egress_rate", 2**64)
    refused(lambda: Bandwidth(ingress_rate=1.5, ingress_burst=1), "Bandwidth.ingress_rate", 1.5)  # type: ignore[arg-type]


def test_ip_range_members_inside_the_subnet_in_order() -> None:
    refused(lambda: IPRange("10.1.0.1/16"), "IPRange.subnet", "10.1.0.1/16")  # host bits
    refused(lambda: IPRange("10.1.0.0/16", "10.2.0.1"), "IPRange.range_start", "10.2.0.1")
    refused(lambda: IPRange("10.1.0.0/16", range_end="fd00::1"), "IPRange.range_end", "fd00::1")
    refused(lambda: IPRange("10.1.0.0/16", gateway="10.1"), "IPRange.gateway", "10.1")
    refused(
        lambda: IPRange("10.1.0.0/16", "10.1.0.9", "10.1.0.8"), "IPRange.range_start", "10.1.0.9"
    )
    assert IPRange("FD00:0::/64").subnet == "fd00::/64"


def test_runtime_config_checks_its_members() -> None:
    refused(
        lambda: RuntimeConfig(port_mappings=[{"hostPort": 80}]),  # type: ignore[list-item]
        "RuntimeConfig.port_mappings[0]",
        {"hostPort": 80},
    )
    refused(
        lambda: RuntimeConfig(ip_ranges=[IPRange("10.0.0.0/8")]),  # type: ignore[list-item]
        "RuntimeConfig.ip_ranges[0]",
        IPRange("10.0.0.0/8"),
    )
    refused(lambda: RuntimeConfig(ip_ranges=[[]]), "RuntimeConfig.ip_ranges[0]", [])
    refused(lambda: RuntimeConfig(ips="10.0.0.1"), "RuntimeConfig.ips", "10.0.0.1")
    refused(lambda: RuntimeConfig(ips=["172.16"]), "RuntimeConfig.ips[0]", "172.16")
    refused(lambda: RuntimeConfig(mac="f0:a6"), "RuntimeConfig.mac", "f0:a6")
    refused(
        lambda: RuntimeConfig(infiniband_guid="c2:11:22:33:44:55"),
        "RuntimeConfig.infiniband_guid",
        "c2:11:22:33:44:55",
    )
    refused(lambda: RuntimeConfig(aliases=["ok", ""]), "RuntimeConfig.aliases[1]", "")
    refused(lambda: RuntimeConfig(device_id=""), "RuntimeConfig.device_id", "")
    refused(lambda: RuntimeConfig(cgroup_path=7), "RuntimeConfig.cgroup_path", 7)  # type: ignore[arg-type]
    refused(
        lambda: RuntimeConfig(pod_annotations={"a": 1}),  # type: ignore[dict-item]
        "RuntimeConfig.pod_annotations['a']",
        1,
    )
    refused(lambda: RuntimeConfig(bandwidth={}), "RuntimeConfig.bandwidth", {})  # type: ignore[arg-type]
    refused(lambda: RuntimeConfig(dns=["1.1.1.1"]), "RuntimeConfig.dns", ["1.1.1.1"])  # type: ignore[arg-type]
    refused(lambda: DNSConfig(servers=["dns.example"]), "DNSConfig.servers[0]", "dns.example")
    refused(lambda: DNSConfig(searches=["a b"]), "DNSConfig.searches[0]", "a b")


def test_k8s_args_order_and_checks() -> None:
    assert k8s_args("ns", "web-0", "abc", "uid-1") == (
        ("IgnoreUnknown", "1"),
        ("K8S_POD_NAMESPACE", "ns"),
        ("K8S_POD_NAME", "web-0"),
        ("K8S_POD_INFRA_CONTAINER_ID", "abc"),
        ("K8S_POD_UID", "uid-1"),
    )
    assert k8s_args("ns", "n", "c", ignore_unknown=False)[0] == ("K8S_POD_NAMESPACE", "ns")
    refused(lambda: k8s_args("ns", "a;b", "c"), "name", "a;b")
    refused(lambda: k8s_args("", "n", "c"), "namespace", "")
    refused(lambda: k8s_args("ns", "n", "c", uid="x=y"), "uid", "x=y")


# -- properties of the checks ------------------------------------------------------------

FIELDS_OF_PORTS = ("host_port", "container_port")


@given(st.integers(1, 65535), st.integers(1, 65535))
def test_every_valid_port_round_trips(host: int, container: int) -> None:
    pm = PortMapping(host, container)
    assert (pm.host_port, pm.container_port) == (host, container)
    assert pm.to_dict() == {"hostPort": host, "containerPort": container, "protocol": "tcp"}


@given(
    st.sampled_from(FIELDS_OF_PORTS),
    st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=65536),
        st.booleans(),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.none(),
    ),
)
def test_every_invalid_port_is_refused_naming_field_and_value(field: str, bad: Any) -> None:
    kwargs = {"host_port": 80, "container_port": 80, field: bad}
    refused(lambda: PortMapping(**kwargs), f"PortMapping.{field}", bad)


@given(st.ip_addresses())
def test_every_valid_ip_round_trips(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    text = str(address)
    for variant in {text, text.upper(), address.exploded}:
        pm = PortMapping(80, 80, host_ip=variant)
        assert ipaddress.ip_address(pm.host_ip) == address
        assert pm.host_ip == str(address)  # canonical text
        assert PortMapping(80, 80, host_ip=pm.host_ip) == pm
        assert DNSConfig(servers=[variant]).servers == (str(address),)
        assert RuntimeConfig(ips=[variant]).ips == (str(address),)


def _not_an_ip(text: str) -> bool:
    if "%" in text:
        return True
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return True
    return False


def _a_cidr(value: object) -> bool:
    """Whether ``value`` is ``ADDRESS/PREFIX`` as Go's ``net.ParseCIDR`` reads it: not an
    address, but what ``RuntimeConfig.ips`` takes besides addresses."""
    if not isinstance(value, str) or value.count("/") != 1:
        return False
    address, prefix = value.split("/")
    if _not_an_ip(address) or re.fullmatch(r"0|[1-9][0-9]{0,2}", prefix) is None:
        return False
    return int(prefix) <= ipaddress.ip_address(address).max_prefixlen


INVALID_IPS = st.one_of(
    st.text(max_size=40).filter(lambda t: t != "" and _not_an_ip(t)),
    st.sampled_from(
        ["172.16", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "fe80::1%eth0", " 10.0.0.1", "::g"]
    ),
    st.integers(),
    st.none(),
)


@given(INVALID_IPS)
@example("0.0.0.0/0")
def test_every_invalid_ip_is_refused_naming_field_and_value(bad: Any) -> None:
    refused(lambda: PortMapping(80, 80, host_ip=bad), "PortMapping.host_ip", bad)
    refused(lambda: DNSConfig(servers=[bad]), "DNSConfig.servers[0]", bad)
    if not _a_cidr(bad):  # a static IP may have its prefix length
        refused(lambda: RuntimeConfig(ips=[bad]), "RuntimeConfig.ips[0]", bad)
    if bad is not None:  # None: no gateway
        refused(lambda: IPRange("10.0.0.0/8", gateway=bad), "IPRange.gateway", bad)


@given(st.binary(min_size=6, max_size=6), st.sampled_from([":", "-", "."]), st.booleans())
def test_every_valid_mac_round_trips(octets: bytes, sep: str, upper: bool) -> None:
    octets = bytes([octets[0] & 0xFE | 0x02, *octets[1:]])  # unicast (locally administered)
    hexes = octets.hex()
    if sep == ".":
        text = ".".join(hexes[i : i + 4] for i in range(0, 12, 4))
    else:
        text = sep.join(hexes[i : i + 2] for i in range(0, 12, 2))
    text = text.upper() if upper else text
    rc = RuntimeConfig(mac=text)
    assert rc.mac == octets.hex(":")
    assert RuntimeConfig(mac=rc.mac) == rc
    assert rc.capability_args() == {"mac": octets.hex(":")}


@given(st.binary(min_size=8, max_size=8))
def test_every_valid_infiniband_guid_round_trips(octets: bytes) -> None:
    assert RuntimeConfig(infiniband_guid=octets.hex("-").upper()).infiniband_guid == octets.hex(":")


_MAC_FORM = re.compile(
    r"([0-9a-f]{2}([:-]))([0-9a-f]{2}\2){4,}[0-9a-f]{2}|[0-9a-f]{4}(\.[0-9a-f]{4})+"
)


def _not_a_mac(text: str) -> bool:
    match = _MAC_FORM.fullmatch(text.lower())
    if match is None:
        return True
    digits = re.sub("[^0-9a-f]", "", text.lower())
    return len(digits) // 2 not in (6, 8, 20)


@given(
    st.one_of(
        st.text(alphabet="0123456789abcdefABCDEF:-.g ", max_size=30).filter(_not_a_mac),
        st.sampled_from(["f0:a6", "f0:a6:00:00:00", "f0:a6:00:00:00:00:00", "aa:bb-cc:dd:ee:ff"]),
        st.integers(),
    )
)
def test_every_invalid_mac_is_refused_naming_field_and_value(bad: Any) -> None:
    refused(lambda: RuntimeConfig(mac=bad), "RuntimeConfig.mac", bad)


@given(st.ip_addresses(), st.data())
def test_every_valid_cidr_round_trips(address: Any, data: st.DataObject) -> None:
    prefix = data.draw(st.integers(0, address.max_prefixlen))
    net = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    rng = IPRange(str(net))
    assert rng.subnet == str(net) and IPRange(rng.subnet) == rng
    inside = data.draw(st.integers(int(net.network_address), int(net.broadcast_address)))
    member = str(type(net.network_address)(inside))
    assert IPRange(str(net), gateway=member).gateway == member
    # Static IPs keep their host bits.
    assert RuntimeConfig(ips=[f"{address}/{prefix}"]).ips == (f"{address}/{prefix}",)


@given(st.ip_addresses(), st.data())
def test_every_invalid_cidr_is_refused_naming_field_and_value(
    address: Any, data: st.DataObject
) -> None:
    bits = address.max_prefixlen
    bad = data.draw(
        st.one_of(
            st.just(str(address)),  # no prefix
            st.integers(bits + 1, 999).map(lambda p: f"{address}/{p}"),  # too long
            st.sampled_from([f"{address}/", f"{address}/-1", f"{address}/08", f"{address}/1/2"]),
            st.just(f"{address}/255.255.0.0"),  # a netmask is not a prefix length
            st.text(max_size=20).filter(lambda t: "/" not in t),
        )
    )
    refused(lambda: IPRange(bad), "IPRange.subnet", bad)
    if bad.count("/") == 1:
        refused(lambda: RuntimeConfig(ips=[bad]), "RuntimeConfig.ips[0]", bad)
    # Host bits set: refused as a subnet, kept as a static IP.
    net = ipaddress.ip_network(f"{address}/{bits - 1}", strict=False) if bits else None
    if net is not None and net.network_address != address:
        refused(lambda: IPRange(f"{address}/{bits - 1}"), "IPRange.subnet", f"{address}/{bits - 1}")


# -- where a RuntimeConfig is accepted, and what the plugins get --------------------------


manager_env = pytest.mark.env(cls=harness.ManagerEnv)


def every_capability_plugin(**extra: Any) -> dict[str, Any]:
    return {"type": "testplugin", "capabilities": dict.fromkeys(EVERY_CAPABILITY, True), **extra}


def runtime_configs(env: harness.ManagerEnv) -> list[tuple[str, str, Any]]:
    return [
        (r["command"], r["stdin"]["name"], r["stdin"].get("runtimeConfig"))
        for r in env.records()
        if r.get("command") in ("ADD", "DEL", "CHECK")
    ]


@manager_env
def test_runtime_conf_takes_a_runtime_config_and_the_plugin_gets_it_exactly(
    env: harness.ManagerEnv,
) -> None:
    net = env.conflist(every_capability_plugin(), {"type": "testplugin"}, name="caps")
    rt = RuntimeConf("c1", "/var/run/netns/c1", "eth0", capability_args=full_config())
    assert rt.capability_args == FULL_JSON  # stored as the mapping: cached, compared, pickled
    env.cni.add_network_list(net, rt)
    # The cache keeps the same JSON, for DEL and GC.
    [att] = env.cni.get_cached_attachments("c1")
    assert att.capability_args == FULL_JSON
    env.cni.del_network_list(net, rt)
    assert runtime_configs(env) == [
        ("ADD", "caps", FULL_JSON),
        ("ADD", "caps", None),  # the second plugin declares nothing
        ("DEL", "caps", None),
        ("DEL", "caps", FULL_JSON),
    ]
    # Byte for byte: the request the plugin read has the conventions' key names.
    raw = next(r for r in env.records() if r.get("command") == "ADD")["stdin"]
    assert json.loads(json.dumps(raw["runtimeConfig"])) == FULL_JSON
    assert list(raw["runtimeConfig"]) == list(FULL_JSON)


@manager_env
def test_only_the_declared_members_reach_each_plugin(env: harness.ManagerEnv) -> None:
    net = env.conflist(
        {"type": "testplugin", "capabilities": {"portMappings": True}},
        {"type": "testplugin", "capabilities": {"bandwidth": True, "mac": False}},
        name="split",
    )
    env.cni.add_network_list(net, RuntimeConf("c1", "/x", "eth0", capability_args=full_config()))
    rcs = [r["stdin"].get("runtimeConfig") for r in env.records() if r.get("command") == "ADD"]
    assert rcs == [
        {"portMappings": FULL_JSON["portMappings"]},
        {"bandwidth": FULL_JSON["bandwidth"]},
    ]


@manager_env
def test_setup_and_network_request_take_a_runtime_config(env: harness.ManagerEnv) -> None:
    env.write("10-a.conflist", "a", every_capability_plugin())
    env.write("20-b.conflist", "b", every_capability_plugin())
    m = env.manager()
    own = RuntimeConfig(port_mappings=[PortMapping(9090, 90)])
    m.setup(
        "c1",
        "/var/run/netns/c1",
        networks=["a", NetworkRequest("b", capability_args=own)],
        capability_args=full_config(),
        args={"K8S_POD_NAME": "web", "IgnoreUnknown": "1"},  # a mapping keeps its order
    )
    adds = [r for r in env.records() if r.get("command") == "ADD"]
    assert [(r["stdin"]["name"], r["stdin"].get("runtimeConfig")) for r in adds] == [
        ("cni-loopback", None),  # the loopback plugin declares nothing
        ("a", FULL_JSON),
        ("b", {"portMappings": [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]}),
    ]
    assert {r["env"]["CNI_ARGS"] for r in adds} == {"K8S_POD_NAME=web;IgnoreUnknown=1"}
    # What was cached is the mapping: teardown DELs with it.
    m.teardown("c1", "/var/run/netns/c1")
    dels = [r for r in env.records() if r.get("command") == "DEL"]
    assert [(r["stdin"]["name"], r["stdin"].get("runtimeConfig")) for r in dels] == [
        ("b", {"portMappings": [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]}),
        ("a", FULL_JSON),
        ("cni-loopback", None),
    ]


def test_network_request_stores_the_mapping() -> None:
    req = NetworkRequest("n", capability_args=RuntimeConfig(aliases=["x"]), args={"A": "1"})
    assert req.capability_args == {"aliases": ["x"]}
    assert req.args == (("A", "1"),)
    assert NetworkRequest("n").capability_args is None


def test_args_as_a_mapping_keep_their_order_and_strings_are_refused() -> None:
    rt = RuntimeConf("c", args={"b": "2", "a": "1"})
    assert rt.args == (("b", "2"), ("a", "1"))
    with pytest.raises(TypeError, match="pairs"):
        RuntimeConf("c", args="K=V")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RuntimeConfig"):
        RuntimeConf("c", capability_args=[("portMappings", [])])  # type: ignore[arg-type]


def test_runtime_config_round_trips_through_json() -> None:
    data = json.loads(json.dumps(full_config().capability_args()))
    assert data == FULL_JSON


# -- holes in the typed values (issue 31) ------------------------------------------------


def test_pod_annotations_cannot_change_after_validation() -> None:
    given = {"team": "blue"}
    rc = RuntimeConfig(pod_annotations=given)
    given["team"] = 1  # type: ignore[assignment]
    with pytest.raises(TypeError):
        rc.pod_annotations["team"] = 7  # type: ignore[index]
    assert rc.capability_args() == {"io.kubernetes.cri.pod-annotations": {"team": "blue"}}
    assert rc == RuntimeConfig(pod_annotations={"team": "blue"})


@pytest.mark.parametrize(
    "zoned",
    [
        ipaddress.ip_address("fe80::1%eth0"),
        ipaddress.IPv6Interface("fe80::1%eth0/64"),
        ipaddress.IPv6Network("fe80::%eth0/64"),
    ],
)
def test_an_ip_with_a_zone_is_refused_as_an_ipaddress_object_too(zoned: Any) -> None:
    if "/" not in str(zoned):  # an address
        refused(lambda: PortMapping(80, 80, host_ip=zoned), "PortMapping.host_ip", zoned)
        refused(lambda: DNSConfig(servers=[zoned]), "DNSConfig.servers[0]", zoned)
        refused(lambda: IPRange("fe80::/64", gateway=zoned), "IPRange.gateway", zoned)
    else:
        refused(lambda: IPRange(zoned), "IPRange.subnet", str(zoned))
    refused(lambda: RuntimeConfig(ips=[zoned]), "RuntimeConfig.ips[0]", str(zoned))
    # Without the zone, the same objects are taken, as their text.
    plain: Any = ipaddress.ip_interface(str(zoned).replace("%eth0", ""))
    assert RuntimeConfig(ips=[plain]).ips == (str(plain),)


@pytest.mark.parametrize(
    "mac", ["01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff", "33-33-00-00-00-01", "00:00:00:00:00:00"]
)
def test_a_mac_must_be_unicast(mac: str) -> None:
    # tuning (and the kernel) refuse to set a multicast or all-zero address.
    refused(lambda: RuntimeConfig(mac=mac), "RuntimeConfig.mac", mac)
    assert RuntimeConfig(mac="02:00:5e:00:00:01").mac == "02:00:5e:00:00:01"


# -- the same rules for plain mappings (issue 28, behaviour.md §11.2) --------------------

#: Plain values of the well-known capabilities no plugin can parse, with what the error names.
BAD_PLAIN: list[tuple[dict[str, Any], str]] = [
    ({"portMappings": [{"hostPort": "80", "containerPort": 80}]}, "portMappings[0]"),
    ({"portMappings": [{"hostPort": 80, "containerPort": 80, "protocol": "icmp"}]}, "protocol"),
    ({"portMappings": {"hostPort": 80}}, "portMappings"),
    ({"portMappings": [{"hostPort": 80, "containerPort": 80, "hostIP": "fe80::1%lo"}]}, "host_ip"),
    ({"bandwidth": {"ingressRate": 1000}}, "Bandwidth.ingress_rate"),
    ({"bandwidth": {"egressRate": -1, "egressBurst": 1}}, "bandwidth"),
    ({"ipRanges": [[{"subnet": "10.1.0.1/16"}]]}, "ipRanges[0][0]"),
    ({"ipRanges": [{"subnet": "10.1.0.0/16"}]}, "ipRanges[0]"),  # a range, not a range set
    ({"ipRanges": [[]]}, "ipRanges[0]"),
    ({"dns": {"servers": ["dns.example"]}}, "DNSConfig.servers[0]"),
    ({"dns": ["10.0.0.10"]}, "dns"),
    ({"ips": ["10.0.0.1/33"]}, "ips[0]"),
    ({"ips": "10.0.0.1"}, "ips"),
    ({"mac": "01:00:5e:00:00:01"}, "mac"),
    ({"mac": "f0:a6"}, "mac"),
]


@pytest.mark.parametrize(("caps", "named"), BAD_PLAIN)
def test_plain_well_known_capabilities_are_checked_like_their_typed_forms(
    caps: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(named)) as info:
        libcni.capabilities.check_plain(caps)
    assert info.value.code == CODE_INVALID_CONFIG
    assert str(info.value).startswith(f"capability argument {next(iter(caps))}")


def test_plain_values_of_every_typed_form_pass() -> None:
    libcni.capabilities.check_plain(FULL_JSON)
    libcni.capabilities.check_plain(full_config().capability_args())
    # Members the conventions do not name, null, and other capabilities: the plugins'.
    libcni.capabilities.check_plain(
        {
            "portMappings": [{"hostPort": 80, "containerPort": 80, "hostIP": None, "x": 1}],
            "bandwidth": None,
            "custom": {"hostPort": "80"},
        }
    )


@manager_env
@pytest.mark.parametrize("where", ["setup", "request"])
def test_setup_refuses_a_plain_capability_no_plugin_can_parse_before_anything_runs(
    env: harness.ManagerEnv, where: str
) -> None:
    env.write("10-a.conflist", "a", every_capability_plugin())
    env.write("20-b.conflist", "b", every_capability_plugin())
    bad = {"portMappings": [{"hostPort": "80", "containerPort": 80, "protocol": "tcp"}]}
    m = env.manager()
    with pytest.raises(ValidationError, match=r"portMappings\[0\].*'80'"):
        if where == "setup":
            m.setup("c1", "/var/run/netns/c1", capability_args=bad)
        else:
            m.setup(
                "c1", "/var/run/netns/c1", networks=["a", NetworkRequest("b", capability_args=bad)]
            )
    assert env.runs() == []  # nothing ran: no ADD to fail, no DEL to fail alike
    assert env.cni.get_cached_attachments("c1") == []  # nor recorded
