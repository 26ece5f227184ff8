"""Results (behaviour.md section 5): decoding, serialisation, conversion, errors."""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import Any

import attrs
import pytest

from libcni.errors import CNIError, DecodeError, VersionError
from libcni.types import (
    DNS,
    Interface,
    Interface040,
    Interface100,
    IPConfig,
    IPConfig020,
    IPConfig040,
    IPConfig100,
    Result,
    Result020,
    Result040,
    Result100,
    Route,
    Route020,
    create_result,
    family_of,
    result_from_bytes,
    result_from_dict,
)

# --------------------------------------------------------------------------
# Examples of the specification texts (tests/data/spec)

# SPEC-v1.0.0-pre.md, section 5: the bridge plugin's result (no cniVersion).
SPEC_100_BRIDGE = {
    "ips": [{"address": "10.0.0.5/32", "interface": 2}],
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth3243", "mac": "55:44:33:22:11:11"},
        {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"},
    ],
    "dns": {"nameservers": ["10.1.0.1"]},
}
# SPEC-v1.0.0-pre.md, section 5: the tuning plugin's result (the mac changed).
SPEC_100_TUNING = {
    "ips": [{"address": "10.0.0.5/32", "interface": 2}],
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth3243", "mac": "55:44:33:22:11:11"},
        {"name": "eth0", "mac": "00:11:22:33:44:66", "sandbox": "/var/run/netns/blue"},
    ],
    "dns": {"nameservers": ["10.1.0.1"]},
}
# SPEC-v0.3.1.md, network configuration list runtime example: the bridge
# plugin's result as the tuning plugin's prevResult.
SPEC_031_PREV = {
    "ips": [{"version": "4", "address": "10.0.0.5/32", "interface": 0}],
    "dns": {"nameservers": ["10.1.0.1"]},
}
# The result layout of SPEC-v1.0.0-pre.md section 4, filled in.
SPEC_100_FULL = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}],
    "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}],
    "dns": {
        "nameservers": ["10.1.0.1"],
        "domain": "example.com",
        "search": ["example.com"],
        "options": ["ndots:2"],
    },
}
# The IPAM result layout of SPEC-v0.3.1.md, filled in.
SPEC_031_IPAM = {
    "cniVersion": "0.3.1",
    "ips": [
        {"version": "4", "address": "203.0.113.10/24", "gateway": "203.0.113.1"},
        {"version": "6", "address": "2001:db8::10/64", "gateway": "2001:db8::1"},
    ],
    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8::1"}],
    "dns": {"nameservers": ["203.0.113.53"], "domain": "example.org"},
}
LEGACY_020 = {
    "cniVersion": "0.2.0",
    "ip4": {
        "ip": "10.1.0.5/16",
        "gateway": "10.1.0.1",
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}],
    },
    "ip6": {"ip": "fd00::5/64", "routes": [{"dst": "::/0"}]},
    "dns": {"nameservers": ["10.1.0.1"]},
}


@pytest.mark.parametrize(
    ("example", "version"),
    [
        (SPEC_100_BRIDGE, "1.0.0"),
        (SPEC_100_TUNING, "1.0.0"),
        (SPEC_100_BRIDGE, "1.1.0"),
        (SPEC_031_PREV, "0.3.1"),
        (SPEC_100_FULL, ""),
        (SPEC_031_IPAM, ""),
        (LEGACY_020, ""),
    ],
)
def test_spec_examples_parse_and_round_trip(example: dict[str, Any], version: str) -> None:
    result = result_from_bytes(json.dumps(example).encode(), default_version=version)
    expected = dict(example)
    expected.setdefault("cniVersion", version)
    assert result.cni_version == expected["cniVersion"]
    assert result.to_dict() == expected
    assert result_from_bytes(result.to_json()) == result
    assert result_from_dict(example, version) == result


def test_spec_example_fields() -> None:
    result = result_from_dict(SPEC_100_BRIDGE, "1.0.0")
    assert isinstance(result, Result100)
    assert [i.name for i in result.interfaces] == ["cni0", "veth3243", "eth0"]
    assert result.interfaces[2].sandbox == "/var/run/netns/blue"
    assert result.ips[0].address == IPv4Interface("10.0.0.5/32")
    assert result.ips[0].interface == 2
    assert result.ips[0].gateway is None
    assert result.dns.nameservers == ("10.1.0.1",)
    assert result.routes == ()


# --------------------------------------------------------------------------
# Decoding: the JSON object and the version


def test_version_from_data_wins_over_default() -> None:
    result = result_from_bytes(b'{"cniVersion":"0.4.0"}', default_version="1.0.0")
    assert isinstance(result, Result040)
    assert result.cni_version == "0.4.0"


@pytest.mark.parametrize("doc", [b"{}", b'{"cniVersion":""}', b'{"cniVersion":null}', b"null"])
def test_missing_or_empty_version_takes_default(doc: bytes) -> None:
    result = result_from_bytes(doc, default_version="1.1.0")
    assert isinstance(result, Result100)
    assert result.cni_version == "1.1.0"


@pytest.mark.parametrize("doc", [b"{}", b'{"cniVersion":""}', b"null", b" null "])
def test_no_version_at_all_is_010(doc: bytes) -> None:
    result = result_from_bytes(doc)
    assert isinstance(result, Result020)
    assert result.cni_version == "0.1.0"
    assert result.to_dict() == {"cniVersion": "0.1.0", "dns": {}}


def test_null_counts_as_empty_object() -> None:
    assert result_from_bytes(b"null", "1.0.0") == Result100(cni_version="1.0.0")
    assert result_from_dict(None, "0.3.0") == Result040(cni_version="0.3.0")


@pytest.mark.parametrize("version", ["0.5.0", "2.0.0", "1.0", "1", "x", "1.0.0.0", "v1.0.0"])
def test_unknown_version_in_data_is_version_error(version: str) -> None:
    with pytest.raises(VersionError) as info:
        result_from_dict({"cniVersion": version})
    assert version in str(info.value)


def test_unknown_default_version_is_version_error() -> None:
    with pytest.raises(VersionError) as info:
        result_from_bytes(b"{}", default_version="9.9.9")
    assert "9.9.9" in str(info.value)


@pytest.mark.parametrize("value", [1, 1.0, True, [], {}])
def test_non_string_version_is_decode_error(value: Any) -> None:
    with pytest.raises(DecodeError) as info:
        result_from_dict({"cniVersion": value})
    assert "cniVersion" in str(info.value)
    assert info.value.code == 6


@pytest.mark.parametrize("doc", [b"[]", b'"1.0.0"', b"42", b"true", b"[{}]"])
def test_not_an_object_is_decode_error(doc: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        result_from_bytes(doc, "1.0.0")
    assert "object" in str(info.value)


@pytest.mark.parametrize(
    "doc",
    [
        b"",
        b"{",
        b"{'a': 1}",
        b'{"cniVersion":"1.0.0"} trailing',
        b"\xff\xfe\xfa",
        b'{"cniVersion":"1.0.0","x":NaN}',
        b'{"cniVersion":"1.0.0","x":Infinity}',
        b'{"cniVersion":"1.0.0","x":-Infinity}',
        b'{"cniVersion":"1.0.0","x":1e400}',
        b"[" * 100000 + b"]" * 100000,
        b'{"a":' * 100000 + b"1" + b"}" * 100000,
    ],
)
def test_not_json_is_decode_error(doc: bytes) -> None:
    with pytest.raises(DecodeError):
        result_from_bytes(doc, "1.0.0")


def test_str_and_bytearray_input() -> None:
    doc = json.dumps(SPEC_100_FULL)
    assert result_from_bytes(doc) == result_from_bytes(bytearray(doc.encode()))


def test_non_bytes_input_is_decode_error() -> None:
    with pytest.raises(DecodeError):
        result_from_bytes(123)  # type: ignore[arg-type]


@pytest.mark.parametrize("obj", [[], "x", 3, object()])
def test_result_from_dict_needs_a_mapping(obj: Any) -> None:
    with pytest.raises(DecodeError):
        result_from_dict(obj, "1.0.0")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"x": float("nan")}, "x: value has no JSON form"),
        ({"x": [float("inf")]}, "x: value has no JSON form"),
        ({"x": object()}, "x: value has no JSON form"),
        ({"x": {"y": {1, 2}}}, "x: value has no JSON form"),
    ],
)
def test_result_from_dict_refuses_values_without_json_form(
    extra: dict[str, Any], field: str
) -> None:
    with pytest.raises(DecodeError) as info:
        result_from_dict({"cniVersion": "1.0.0", **extra})
    assert field in str(info.value)
    with pytest.raises(DecodeError) as info:
        result_from_dict({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", **extra}]})
    assert f"ips[0].{field}" in str(info.value)
    with pytest.raises(DecodeError) as info:
        result_from_dict({"cniVersion": "1.0.0", "dns": {"nameservers": [], **extra}})
    assert f"dns.{field}" in str(info.value)


def test_result_from_dict_refuses_cycles() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(DecodeError) as info:
        result_from_dict({"cniVersion": "1.0.0", "x": cycle})
    assert "x: value has no JSON form" in str(info.value)


def test_result_is_not_forced_to_the_default_version() -> None:
    result = result_from_dict(SPEC_031_IPAM, "1.0.0")
    assert result.cni_version == "0.3.1"
    assert isinstance(result, Result040)


# --------------------------------------------------------------------------
# create_result


def test_create_result_parses_as_the_version() -> None:
    result = create_result("1.1.0", b'{"ips":[{"address":"fd00::2/64"}]}')
    assert isinstance(result, Result100)
    assert result.cni_version == "1.1.0"
    assert result.ips[0].address == IPv6Interface("fd00::2/64")
    assert create_result("1.1.0", '{"ips":[{"address":"fd00::2/64"}]}') == result
    assert create_result("1.1.0", {"ips": [{"address": "fd00::2/64"}]}) == result


def test_create_result_keeps_the_data_s_own_version() -> None:
    # behaviour.md §5, Go's behaviour: the data's cniVersion wins within the family.
    result = create_result("0.4.0", SPEC_031_IPAM)
    assert result.cni_version == "0.3.1"
    assert result.to_dict() == SPEC_031_IPAM
    result = create_result("0.3.0", {**SPEC_031_IPAM, "cniVersion": "0.4.0"})
    assert result.cni_version == "0.4.0"
    assert result.to_dict()["cniVersion"] == "0.4.0"
    assert create_result("1.0.0", b'{"cniVersion":"1.1.0"}').cni_version == "1.1.0"


def test_create_result_without_a_version_in_the_data_takes_the_given_one() -> None:
    data = {k: v for k, v in SPEC_031_IPAM.items() if k != "cniVersion"}
    assert create_result("0.4.0", data).cni_version == "0.4.0"
    assert create_result("0.4.0", {**data, "cniVersion": ""}).cni_version == "0.4.0"


def test_create_result_other_family_is_version_error() -> None:
    with pytest.raises(VersionError) as info:
        create_result("1.0.0", SPEC_031_IPAM)
    assert "0.3.1" in str(info.value)


def test_create_result_empty_version_is_010() -> None:
    result = create_result("", {"ip4": {"ip": "10.0.0.1/8"}})
    assert isinstance(result, Result020)
    assert result.cni_version == "0.1.0"


def test_create_result_unknown_version() -> None:
    with pytest.raises(VersionError) as info:
        create_result("0.9.0", b"{}")
    assert "0.9.0" in str(info.value)


def test_create_result_malformed() -> None:
    with pytest.raises(DecodeError):
        create_result("1.0.0", b"[1]")
    with pytest.raises(DecodeError):
        create_result("1.0.0", b"{")
    with pytest.raises(DecodeError):
        create_result("1.0.0", {"cniVersion": 7})


def test_family_of() -> None:
    assert family_of("1.1.0") is Result100
    assert family_of("0.3.0") is Result040
    assert family_of("") is Result020
    with pytest.raises(VersionError):
        family_of("0.0.1")


# --------------------------------------------------------------------------
# Field types and serialisation


def test_ip_fields_are_typed_and_keep_host_bits() -> None:
    result = result_from_dict(SPEC_100_FULL)
    assert isinstance(result, Result100)
    ip = result.ips[0]
    assert ip.address == IPv4Interface("10.1.0.5/16")
    assert str(ip.address.ip) == "10.1.0.5"
    assert str(ip.address.network) == "10.1.0.0/16"
    assert ip.gateway == IPv4Address("10.1.0.1")
    assert ip.interface == 0
    assert result.routes[0].dst == IPv4Interface("0.0.0.0/0")
    assert result.routes[0].gw == IPv4Address("10.1.0.1")
    assert isinstance(result.interfaces, tuple)
    assert isinstance(result.ips, tuple)
    assert isinstance(result.routes, tuple)
    assert result.dns.search == ("example.com",)


def test_ipv6_address_and_gateway() -> None:
    result = result_from_dict(
        {"cniVersion": "1.0.0", "ips": [{"address": "2001:DB8::5/64", "gateway": "2001:db8::1"}]}
    )
    assert isinstance(result, Result100)
    assert result.ips[0].address == IPv6Interface("2001:db8::5/64")
    assert result.ips[0].gateway == IPv6Address("2001:db8::1")
    assert result.to_dict()["ips"] == [{"address": "2001:db8::5/64", "gateway": "2001:db8::1"}]


def test_all_100_fields_round_trip() -> None:
    doc = {
        "cniVersion": "1.1.0",
        "interfaces": [
            {
                "name": "net1",
                "mac": "00:11:22:33:44:55",
                "mtu": 9000,
                "sandbox": "/var/run/netns/x",
                "socketPath": "/run/vhost.sock",
                "pciID": "0000:00:1f.6",
            }
        ],
        "ips": [{"address": "192.0.2.7/24", "gateway": "192.0.2.1", "interface": 0}],
        "routes": [
            {
                "dst": "198.51.100.0/24",
                "gw": "192.0.2.254",
                "mtu": 1400,
                "advmss": 1360,
                "priority": 10,
                "table": 100,
                "scope": 0,
            }
        ],
        "dns": {"nameservers": ["192.0.2.53"], "options": ["rotate"]},
    }
    result = result_from_dict(doc)
    assert isinstance(result, Result100)
    intf = result.interfaces[0]
    assert (intf.mtu, intf.socket_path, intf.pci_id) == (9000, "/run/vhost.sock", "0000:00:1f.6")
    route = result.routes[0]
    assert (route.mtu, route.advmss, route.priority, route.table, route.scope) == (
        1400,
        1360,
        10,
        100,
        0,
    )
    assert result.to_dict() == doc


def test_empty_lists_are_omitted() -> None:
    doc = {"cniVersion": "1.0.0", "interfaces": [], "ips": [], "routes": [], "dns": {}}
    assert result_from_dict(doc).to_dict() == {"cniVersion": "1.0.0"}
    doc04 = {**doc, "cniVersion": "0.4.0"}
    assert result_from_dict(doc04).to_dict() == {"cniVersion": "0.4.0", "dns": {}}
    legacy = {"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.1/8", "routes": []}}
    assert result_from_dict(legacy).to_dict() == {
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.0.0.1/8"},
        "dns": {},
    }


def test_nulls_count_as_absent() -> None:
    doc = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": None, "mtu": None}],
        "ips": [{"address": "10.0.0.1/8", "gateway": None, "interface": None}],
        "routes": None,
        "dns": None,
    }
    result = result_from_dict(doc)
    assert result.to_dict() == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0"}],
        "ips": [{"address": "10.0.0.1/8"}],
    }


def test_empty_gateway_is_none() -> None:
    result = result_from_dict(
        {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", "gateway": ""}]}
    )
    assert isinstance(result, Result100)
    assert result.ips[0].gateway is None


def test_interface_zero_is_kept() -> None:
    for version in ("1.0.0", "0.4.0"):
        ips = [{"address": "10.0.0.1/8", "interface": 0}]
        if version == "0.4.0":
            ips[0]["version"] = "4"
        out = result_from_dict({"cniVersion": version, "ips": ips}).to_dict()
        assert out["ips"][0]["interface"] == 0


def test_interface_name_is_always_written() -> None:
    result = Result100(interfaces=(Interface100(),))
    assert result.to_dict()["interfaces"] == [{"name": ""}]


def test_dns_presence_by_family() -> None:
    assert "dns" not in Result100().to_dict()
    assert Result040().to_dict()["dns"] == {}
    assert Result020().to_dict()["dns"] == {}
    dns = DNS(nameservers=("1.1.1.1",))
    assert Result100(dns=dns).to_dict()["dns"] == {"nameservers": ["1.1.1.1"]}


def test_dns_with_only_unknown_members_is_written() -> None:
    result = result_from_dict({"cniVersion": "1.0.0", "dns": {"x-ttl": 30}})
    assert result.to_dict() == {"cniVersion": "1.0.0", "dns": {"x-ttl": 30}}


def test_to_json_is_valid_json() -> None:
    result = result_from_dict(SPEC_100_FULL)
    assert json.loads(result.to_json()) == SPEC_100_FULL
    assert json.loads(result.to_json(indent=2)) == SPEC_100_FULL
    assert "\n" in result.to_json(indent=2)


def test_cni_version_always_written() -> None:
    assert result_from_dict({}, "1.0.0").to_dict()["cniVersion"] == "1.0.0"
    assert result_from_dict({}).to_dict()["cniVersion"] == "0.1.0"


# --------------------------------------------------------------------------
# Values


def test_results_are_frozen_and_hashable() -> None:
    result = result_from_dict({**SPEC_100_FULL, "x": {"y": [1]}})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.cni_version = "1.1.0"  # type: ignore[misc]
    assert hash(result) == hash(result_from_dict({**SPEC_100_FULL, "x": {"y": [1]}}))
    assert isinstance(result, Result)
    assert {result} == {result}


def test_result_is_abstract() -> None:
    with pytest.raises(TypeError):
        Result()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("cls", "version"),
    [(Result100, "0.4.0"), (Result040, "1.0.0"), (Result020, "0.3.0"), (Result100, "")],
)
def test_constructing_with_another_familys_version_fails(cls: Any, version: str) -> None:
    with pytest.raises(VersionError):
        cls(cni_version=version)


def test_aliases_and_defaults() -> None:
    assert Interface is Interface100
    assert IPConfig is IPConfig100
    assert Result100().cni_version == "1.1.0"
    assert Result040().cni_version == "0.4.0"
    assert Result020().cni_version == "0.2.0"
    assert IPConfig040(address=IPv6Interface("fd00::1/64")).version == "6"
    assert IPConfig040(address=IPv4Interface("10.0.0.1/8")).version == "4"


def test_building_a_result_by_hand() -> None:
    result = Result100(
        cni_version="1.0.0",
        interfaces=(Interface100(name="eth0", sandbox="/run/netns/a"),),
        ips=(IPConfig100(IPv4Interface("10.0.0.2/24"), IPv4Address("10.0.0.1"), 0),),
        routes=(Route(IPv4Interface("0.0.0.0/0"), IPv4Address("10.0.0.1")),),
    )
    assert result.to_dict() == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/a"}],
        "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
    }


def test_dns_public_behaviour_unchanged() -> None:
    dns = DNS.from_dict({"nameservers": ["1.1.1.1"], "other": 1})
    assert dns.extra == {}
    assert dns.to_dict() == {"nameservers": ["1.1.1.1"]}
    assert hash(dns) == hash(DNS(nameservers=("1.1.1.1",)))


# --------------------------------------------------------------------------
# Unknown fields at every level


def test_unknown_fields_kept_in_100() -> None:
    doc = {
        "cniVersion": "1.0.0",
        "top": {"a": [1, 2, None]},
        "interfaces": [{"name": "eth0", "metadata": {"k": "v"}}],
        "ips": [{"address": "10.0.0.2/24", "x-pool": "blue"}],
        "routes": [{"dst": "10.1.0.0/16", "x-route": True}],
        "dns": {"nameservers": ["10.0.0.1"], "x-dns": 1.5},
    }
    result = result_from_dict(doc)
    assert result.to_dict() == doc
    assert isinstance(result, Result100)
    assert result.extra == {"top": {"a": [1, 2, None]}}
    assert result.interfaces[0].extra == {"metadata": {"k": "v"}}
    assert result.ips[0].extra == {"x-pool": "blue"}
    assert result.routes[0].extra == {"x-route": True}
    assert result.dns.extra == {"x-dns": 1.5}


def test_unknown_fields_kept_in_040() -> None:
    doc = {
        "cniVersion": "0.3.1",
        "top": 1,
        "interfaces": [{"name": "eth0", "x": 2}],
        "ips": [{"version": "4", "address": "10.0.0.2/24", "x": 3}],
        "routes": [{"dst": "10.1.0.0/16", "x": 4}],
        "dns": {"x": 5},
    }
    assert result_from_dict(doc).to_dict() == doc


def test_unknown_fields_kept_in_020() -> None:
    doc = {
        "cniVersion": "0.2.0",
        "top": 1,
        "ip4": {"ip": "10.0.0.2/24", "x": 2, "routes": [{"dst": "10.1.0.0/16", "x": 3}]},
        "ip6": {"ip": "fd00::2/64", "x": 4},
        "dns": {"x": 5},
    }
    assert result_from_dict(doc).to_dict() == doc


def test_unknown_fields_survive_conversions() -> None:
    doc = {
        "cniVersion": "1.0.0",
        "top": 1,
        "interfaces": [{"name": "eth0", "x": 2}],
        "ips": [{"address": "10.0.0.2/24", "x": 3}],
        "routes": [{"dst": "10.1.0.0/16", "x": 4}],
        "dns": {"x": 5},
    }
    result = result_from_dict(doc)
    as04 = result.as_version("0.4.0").to_dict()
    assert as04["top"] == 1
    assert as04["interfaces"] == [{"name": "eth0", "x": 2}]
    assert as04["ips"] == [{"version": "4", "address": "10.0.0.2/24", "x": 3}]
    assert as04["routes"] == [{"dst": "10.1.0.0/16", "x": 4}]
    assert as04["dns"] == {"x": 5}
    legacy = result.as_version("0.2.0").to_dict()
    assert legacy == {
        "cniVersion": "0.2.0",
        "top": 1,
        "ip4": {"ip": "10.0.0.2/24", "x": 3, "routes": [{"dst": "10.1.0.0/16", "x": 4}]},
        "dns": {"x": 5},
    }
    back = result.as_version("0.2.0").as_version("1.0.0").to_dict()
    assert back == {
        "cniVersion": "1.0.0",
        "top": 1,
        "ips": [{"address": "10.0.0.2/24", "x": 3}],
        "routes": [{"dst": "10.1.0.0/16", "x": 4}],
        "dns": {"x": 5},
    }


def test_unknown_field_known_in_the_target_is_interpreted() -> None:
    r040 = result_from_dict(
        {
            "cniVersion": "0.4.0",
            "interfaces": [{"name": "eth0", "mtu": 1450, "x": 1}, {"name": "eth1", "mtu": "big"}],
        }
    )
    assert r040.to_dict()["interfaces"][0] == {"name": "eth0", "mtu": 1450, "x": 1}
    r100 = r040.as_version("1.0.0")
    assert isinstance(r100, Result100)
    assert r100.interfaces[0].mtu == 1450
    assert r100.interfaces[0].extra == {"x": 1}
    # Not valid where it is known: dropped, the rest converted.
    assert r100.interfaces[1] == Interface100(name="eth1")

    legacy = result_from_dict(
        {
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.0.0.2/8", "routes": [{"dst": "10.0.0.0/8", "mtu": 9000}]},
        }
    )
    r04 = legacy.as_version("0.4.0")
    assert isinstance(r04, Result040)
    assert r04.routes[0].mtu == 9000
    assert r04.routes[0].extra == {}


def test_stray_version_in_100_ip_gives_way_to_family() -> None:
    result = result_from_dict(
        {"cniVersion": "1.0.0", "ips": [{"address": "fd00::1/64", "version": "4"}]}
    )
    assert result.to_dict()["ips"] == [{"address": "fd00::1/64", "version": "4"}]
    assert result.as_version("0.4.0").to_dict()["ips"] == [
        {"version": "6", "address": "fd00::1/64"}
    ]


# --------------------------------------------------------------------------
# Malformed fields: DecodeError naming the field


MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    (
        "1.0.0",
        {"ips": [{"address": "10.0.0.1/8"}, {"address": "10.0.0.300/24"}]},
        "ips[1].address: invalid CIDR '10.0.0.300/24'",
    ),
    ("1.0.0", {"ips": [{"address": "10.0.0.1"}]}, "ips[0].address: invalid CIDR '10.0.0.1'"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/33"}]}, "ips[0].address: invalid CIDR"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/255.0.0.0"}]}, "ips[0].address: invalid CIDR"),
    ("1.0.0", {"ips": [{"address": "fd00::1/129"}]}, "ips[0].address: invalid CIDR"),
    ("1.0.0", {"ips": [{"address": 10}]}, "ips[0].address"),
    ("1.0.0", {"ips": [{}]}, "ips[0].address: missing"),
    (
        "1.0.0",
        {"ips": [{"address": "10.0.0.1/8", "gateway": "10.0.0"}]},
        "ips[0].gateway: invalid IP address '10.0.0'",
    ),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/8", "gateway": 5}]}, "ips[0].gateway"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/8", "interface": -1}]}, "ips[0].interface"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/8", "interface": "0"}]}, "ips[0].interface"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/8", "interface": True}]}, "ips[0].interface"),
    ("1.0.0", {"ips": [{"address": "10.0.0.1/8", "interface": 1.0}]}, "ips[0].interface"),
    ("1.0.0", {"ips": {"address": "10.0.0.1/8"}}, "ips: must be a list"),
    ("1.0.0", {"ips": "10.0.0.1/8"}, "ips: must be a list"),
    ("1.0.0", {"ips": 0}, "ips: must be a list"),
    ("1.0.0", {"ips": ["10.0.0.1/8"]}, "ips[0]: must be an object"),
    ("1.0.0", {"ips": [None]}, "ips[0]: must be an object"),
    ("1.0.0", {"interfaces": [{"name": 1}]}, "interfaces[0].name"),
    ("1.0.0", {"interfaces": [{"name": "a"}, {"mac": ["x"]}]}, "interfaces[1].mac"),
    ("1.0.0", {"interfaces": [{"mtu": "1500"}]}, "interfaces[0].mtu"),
    ("1.0.0", {"interfaces": [{"sandbox": 3}]}, "interfaces[0].sandbox"),
    ("1.0.0", {"interfaces": [{"socketPath": False}]}, "interfaces[0].socketPath"),
    ("1.0.0", {"interfaces": [{"pciID": {}}]}, "interfaces[0].pciID"),
    ("1.0.0", {"interfaces": "eth0"}, "interfaces: must be a list"),
    ("1.0.0", {"routes": [{"gw": "10.0.0.1"}]}, "routes[0].dst: missing"),
    ("1.0.0", {"routes": [{"dst": "default"}]}, "routes[0].dst: invalid CIDR 'default'"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "gw": "x"}]}, "routes[0].gw: invalid IP address"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "mtu": "x"}]}, "routes[0].mtu"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "advmss": 1.5}]}, "routes[0].advmss"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "priority": []}]}, "routes[0].priority"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "table": "main"}]}, "routes[0].table"),
    ("1.0.0", {"routes": [{"dst": "0.0.0.0/0", "scope": "link"}]}, "routes[0].scope"),
    ("1.0.0", {"dns": []}, "dns: must be an object"),
    ("1.0.0", {"dns": {"nameservers": "1.1.1.1"}}, "nameservers"),
    ("1.0.0", {"dns": {"domain": 1}}, "domain"),
    ("1.0.0", {"dns": {"search": [1]}}, "search"),
    ("1.0.0", {"dns": {"options": {}}}, "options"),
    ("0.4.0", {"ips": [{"version": "5", "address": "10.0.0.1/8"}]}, "ips[0].version"),
    ("0.4.0", {"ips": [{"version": 4, "address": "10.0.0.1/8"}]}, "ips[0].version"),
    (
        "0.4.0",
        {"ips": [{"version": "6", "address": "10.0.0.1/8"}]},
        "ips[0].version: '6' does not match address '10.0.0.1/8'",
    ),
    ("0.3.1", {"ips": [{"version": "4", "address": "fd00::1/64"}]}, "ips[0].version"),
    ("0.3.0", {"ips": [{"version": "4", "address": "10.0.0.1"}]}, "ips[0].address: invalid CIDR"),
    ("0.4.0", {"interfaces": [{"name": "a", "mac": 1}]}, "interfaces[0].mac"),
    ("0.4.0", {"routes": [{"dst": "10.0.0.0/8", "table": "x"}]}, "routes[0].table"),
    ("0.4.0", {"dns": "8.8.8.8"}, "dns: must be an object"),
    ("0.2.0", {"ip4": {"ip": "fd00::1/64"}}, "ip4.ip: 'fd00::1/64' is not an IPv4 address"),
    ("0.2.0", {"ip6": {"ip": "10.0.0.1/8"}}, "ip6.ip: '10.0.0.1/8' is not an IPv6 address"),
    ("0.2.0", {"ip4": {}}, "ip4.ip: missing"),
    ("0.2.0", {"ip4": "10.0.0.1/8"}, "ip4: must be an object"),
    ("0.2.0", {"ip4": {"ip": "10.0.0.1/8", "gateway": "10.0.0.256"}}, "ip4.gateway"),
    (
        "0.1.0",
        {"ip6": {"ip": "fd00::1/64", "routes": [{"dst": "::/0"}, {"dst": "::"}]}},
        "ip6.routes[1].dst: invalid CIDR '::'",
    ),
    (
        "0.1.0",
        {"ip4": {"ip": "10.0.0.1/8", "routes": [{"dst": "0.0.0.0/0", "gw": 1}]}},
        "ip4.routes[0].gw",
    ),
    ("0.1.0", {"ip4": {"ip": "10.0.0.1/8", "routes": {}}}, "ip4.routes: must be a list"),
    ("0.2.0", {"dns": {"nameservers": [None]}}, "nameservers"),
]


@pytest.mark.parametrize(("version", "doc", "message"), MALFORMED)
def test_malformed_field_is_decode_error_naming_it(
    version: str, doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(DecodeError) as info:
        result_from_bytes(json.dumps({"cniVersion": version, **doc}))
    assert message in str(info.value)
    assert info.value.code == 6
    assert isinstance(info.value, CNIError)


def test_missing_040_ip_version_is_taken_from_the_address() -> None:
    result = result_from_dict({"cniVersion": "0.4.0", "ips": [{"address": "fd00::1/64"}]})
    assert isinstance(result, Result040)
    assert result.ips[0].version == "6"


def test_ipv4_mapped_address_may_be_labelled_4() -> None:
    # The Go library calls an IPv4-mapped IPv6 address IPv4.
    result = result_from_dict(
        {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "::ffff:10.0.0.1/120"}]}
    )
    assert result.to_dict()["ips"][0]["version"] == "4"


# --------------------------------------------------------------------------
# Conversions


def test_same_version_returns_the_result() -> None:
    result = result_from_dict(SPEC_100_FULL)
    assert result.as_version("1.0.0") is result


@pytest.mark.parametrize(
    ("doc", "target"),
    [
        (SPEC_100_FULL, "1.1.0"),
        ({**SPEC_100_FULL, "cniVersion": "1.1.0"}, "1.0.0"),
        (SPEC_031_IPAM, "0.4.0"),
        (SPEC_031_IPAM, "0.3.0"),
        (LEGACY_020, "0.1.0"),
        ({**LEGACY_020, "cniVersion": "0.1.0"}, "0.2.0"),
    ],
)
def test_within_a_family_is_a_relabel(doc: dict[str, Any], target: str) -> None:
    result = result_from_dict(doc)
    converted = result.as_version(target)
    assert type(converted) is type(result)
    assert converted.cni_version == target
    assert converted.to_dict() == {**doc, "cniVersion": target}


def test_legacy_to_040() -> None:
    legacy = result_from_dict(
        {
            "cniVersion": "0.2.0",
            # ip6 first in the text: ip4 still comes first.
            "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]},
            "ip4": {
                "ip": "10.1.0.5/16",
                "gateway": "10.1.0.1",
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "10.2.0.0/16"}],
            },
            "dns": {"nameservers": ["10.1.0.1"]},
        }
    )
    for target in ("0.3.0", "0.3.1", "0.4.0"):
        converted = legacy.as_version(target)
        assert isinstance(converted, Result040)
        assert converted.to_dict() == {
            "cniVersion": target,
            "ips": [
                {"version": "4", "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                {"version": "6", "address": "fd00::5/64", "gateway": "fd00::1"},
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
                {"dst": "10.2.0.0/16"},
                {"dst": "::/0"},
            ],
            "dns": {"nameservers": ["10.1.0.1"]},
        }
        assert converted.interfaces == ()


def test_legacy_to_100_goes_via_040_without_ip_version() -> None:
    converted = result_from_dict(LEGACY_020).as_version("1.1.0")
    assert isinstance(converted, Result100)
    assert converted.to_dict() == {
        "cniVersion": "1.1.0",
        "ips": [
            {"address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"address": "fd00::5/64"},
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "::/0"}],
        "dns": {"nameservers": ["10.1.0.1"]},
    }


def test_legacy_with_no_ip_converts_up() -> None:
    converted = result_from_dict({"cniVersion": "0.1.0"}).as_version("1.0.0")
    assert converted.to_dict() == {"cniVersion": "1.0.0"}


def test_040_to_100_drops_ip_version() -> None:
    doc = {
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/n"}],
        "ips": [{"version": "4", "address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "mtu": 1400}],
        "dns": {},
    }
    converted = result_from_dict(doc).as_version("1.0.0")
    assert isinstance(converted, Result100)
    assert converted.to_dict() == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/n"}],
        "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "mtu": 1400}],
    }


def test_100_to_040_version_from_family_and_interfaces_narrowed() -> None:
    doc = {
        "cniVersion": "1.1.0",
        "interfaces": [
            {
                "name": "net1",
                "mac": "00:11:22:33:44:55",
                "mtu": 9000,
                "sandbox": "/n",
                "socketPath": "/s",
                "pciID": "0000:00:01.0",
            }
        ],
        "ips": [
            {"address": "fd00::2/64", "interface": 0},
            {"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0},
        ],
        "routes": [{"dst": "::/0", "gw": "fd00::1", "table": 5, "scope": 0}],
    }
    for target in ("0.3.0", "0.3.1", "0.4.0"):
        converted = result_from_dict(doc).as_version(target)
        assert isinstance(converted, Result040)
        assert converted.to_dict() == {
            "cniVersion": target,
            "interfaces": [{"name": "net1", "mac": "00:11:22:33:44:55", "sandbox": "/n"}],
            "ips": [
                {"version": "6", "address": "fd00::2/64", "interface": 0},
                {"version": "4", "address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0},
            ],
            "routes": [{"dst": "::/0", "gw": "fd00::1", "table": 5, "scope": 0}],
            "dns": {},
        }


TO_LEGACY_SOURCE: dict[str, Any] = {
    "interfaces": [{"name": "eth0", "sandbox": "/n"}],
    "ips": [
        {"address": "fd00::2/64", "gateway": "fd00::1", "interface": 0},
        {"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0},
        {"address": "10.0.1.2/24", "interface": 0},
        {"address": "fd01::2/64", "interface": 0},
    ],
    "routes": [
        {"dst": "0.0.0.0/0", "gw": "10.0.0.1", "mtu": 1400, "priority": 3},
        {"dst": "::/0", "gw": "fd00::1", "table": 7},
        {"dst": "192.168.0.0/16"},
    ],
    "dns": {"nameservers": ["10.0.0.1"]},
}
TO_LEGACY_EXPECTED = {
    "ip4": {
        "ip": "10.0.0.2/24",
        "gateway": "10.0.0.1",
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "192.168.0.0/16"}],
    },
    "ip6": {"ip": "fd00::2/64", "gateway": "fd00::1", "routes": [{"dst": "::/0", "gw": "fd00::1"}]},
    "dns": {"nameservers": ["10.0.0.1"]},
}


@pytest.mark.parametrize("source", ["1.0.0", "1.1.0", "0.4.0", "0.3.1", "0.3.0"])
@pytest.mark.parametrize("target", ["0.1.0", "0.2.0"])
def test_to_legacy(source: str, target: str) -> None:
    doc = {"cniVersion": source, **TO_LEGACY_SOURCE}
    if not source.startswith("1."):
        doc["ips"] = [{**ip, "version": "6" if ":" in ip["address"] else "4"} for ip in doc["ips"]]
    converted = result_from_dict(doc).as_version(target)
    assert isinstance(converted, Result020)
    assert converted.to_dict() == {"cniVersion": target, **TO_LEGACY_EXPECTED}


def test_to_legacy_routes_of_a_family_without_ip_are_dropped() -> None:
    doc = {
        "cniVersion": "1.0.0",
        "ips": [{"address": "fd00::2/64"}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
    }
    converted = result_from_dict(doc).as_version("0.2.0")
    assert isinstance(converted, Result020)
    assert converted.ip4 is None
    assert converted.to_dict() == {
        "cniVersion": "0.2.0",
        "ip6": {"ip": "fd00::2/64", "routes": [{"dst": "::/0"}]},
        "dns": {},
    }


@pytest.mark.parametrize("source", ["1.0.0", "1.1.0", "0.4.0", "0.3.0"])
@pytest.mark.parametrize("target", ["0.1.0", "0.2.0"])
def test_to_legacy_without_ip_is_version_error(source: str, target: str) -> None:
    result = result_from_dict(
        {"cniVersion": source, "interfaces": [{"name": "eth0"}], "routes": [{"dst": "0.0.0.0/0"}]}
    )
    with pytest.raises(VersionError) as info:
        result.as_version(target)
    assert "no valid IP addresses" in str(info.value)


def test_legacy_to_legacy_without_ip_is_fine() -> None:
    assert result_from_dict({"cniVersion": "0.1.0"}).as_version("0.2.0").cni_version == "0.2.0"


@pytest.mark.parametrize("target", ["0.5.0", "2.0.0", "1.0", "junk", "1.2.3"])
def test_unknown_target_version_is_version_error(target: str) -> None:
    for doc in (SPEC_100_FULL, SPEC_031_IPAM, LEGACY_020):
        with pytest.raises(VersionError) as info:
            result_from_dict(doc).as_version(target)
        assert target in str(info.value)


def test_empty_target_version_is_010() -> None:
    converted = result_from_dict(SPEC_100_FULL).as_version("")
    assert isinstance(converted, Result020)
    assert converted.cni_version == "0.1.0"


def test_conversion_result_types() -> None:
    r100 = result_from_dict(SPEC_100_FULL)
    r040 = r100.as_version("0.4.0")
    legacy = r100.as_version("0.2.0")
    assert isinstance(r040, Result040)
    assert isinstance(r040.interfaces[0], Interface040)
    assert isinstance(r040.ips[0], IPConfig040)
    assert isinstance(legacy, Result020)
    assert isinstance(legacy.ip4, IPConfig020)
    assert isinstance(legacy.ip4.routes[0], Route020)
    assert isinstance(legacy.as_version("1.0.0"), Result100)
