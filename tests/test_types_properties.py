"""Property tests of the results: round trips, conversions, and hostile input."""

from __future__ import annotations

import contextlib
import functools
import json
from ipaddress import ip_interface
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libcni.errors import CNIError, DecodeError, VersionError
from libcni.types import (
    Result,
    Result020,
    Result040,
    Result100,
    create_result,
    result_from_bytes,
    result_from_dict,
)

# Every field name some result level knows: generated unknown fields avoid
# them, so that they stay unknown in every version.
KNOWN_NAMES = {
    "cniVersion", "interfaces", "ips", "routes", "dns", "ip4", "ip6",
    "name", "mac", "mtu", "sandbox", "socketPath", "pciID",
    "address", "gateway", "interface", "version", "ip",
    "dst", "gw", "advmss", "priority", "table", "scope",
    "nameservers", "domain", "search", "options",
}  # fmt: skip

V1 = ("1.0.0", "1.1.0")
V04 = ("0.3.0", "0.3.1", "0.4.0")
V02 = ("0.1.0", "0.2.0")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
unknown_keys = st.text(min_size=1, max_size=8).filter(lambda k: k not in KNOWN_NAMES)
extras = st.dictionaries(unknown_keys, json_values, max_size=2)
nonempty_text = st.text(min_size=1, max_size=12)
ints = st.integers(min_value=-(2**31), max_value=2**31)


@functools.cache  # one strategy object per argument: built and validated once
def cidr(version: int | None = None) -> st.SearchStrategy[str]:
    v4 = st.tuples(st.ip_addresses(v=4), st.integers(0, 32))
    v6 = st.tuples(st.ip_addresses(v=6), st.integers(0, 128))
    pairs = v4 if version == 4 else v6 if version == 6 else v4 | v6
    return pairs.map(lambda p: str(ip_interface(f"{p[0]}/{p[1]}")))


@functools.cache  # one strategy object per argument: built and validated once
def address(version: int | None = None) -> st.SearchStrategy[str]:
    if version is None:
        return st.ip_addresses().map(str)
    return st.ip_addresses(v=6 if version == 6 else 4).map(str)


def with_optional(draw: st.DrawFn, required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``required`` plus, each maybe, the ``optional`` fields, plus unknown ones.

    Drawn inside the composites below, from strategies built once (not a new
    strategy object per example: building and validating those cost more than
    the parsing under test)."""
    out = dict(draw(extras))
    out.update(required)
    for key, strategy in optional.items():
        if draw(st.booleans()):
            out[key] = draw(strategy)
    return out


@st.composite
def _dns_objects(draw: st.DrawFn) -> dict[str, Any]:
    return with_optional(
        draw,
        {},
        nameservers=st.lists(address(), min_size=1, max_size=3),
        domain=nonempty_text,
        search=st.lists(st.text(max_size=10), min_size=1, max_size=3),
        options=st.lists(st.text(max_size=10), min_size=1, max_size=3),
    )


@functools.cache  # one strategy object per argument: built and validated once
def dns_objects(allow_empty: bool) -> st.SearchStrategy[dict[str, Any]]:
    return _dns_objects() if allow_empty else _dns_objects().filter(bool)


@st.composite
def _route(draw: st.DrawFn, version: int | None) -> dict[str, Any]:
    dst = draw(cidr(version))
    return with_optional(
        draw,
        {"dst": dst},
        gw=address(ip_interface(dst).version),
        mtu=ints,
        advmss=ints,
        priority=ints,
        table=ints,
        scope=ints,
    )


@functools.cache
def routes(version: int | None = None) -> st.SearchStrategy[dict[str, Any]]:
    return _route(version)


@st.composite
def _ip(draw: st.DrawFn, with_version: bool) -> dict[str, Any]:
    addr = draw(cidr())
    family = ip_interface(addr).version
    required: dict[str, Any] = {"address": addr}
    if with_version:
        required["version"] = str(family)
    return with_optional(draw, required, gateway=address(family), interface=st.integers(0, 2**31))


@functools.cache
def ips(with_version: bool) -> st.SearchStrategy[dict[str, Any]]:
    return _ip(with_version)


@st.composite
def _interface_100(draw: st.DrawFn) -> dict[str, Any]:
    return with_optional(
        draw,
        {"name": draw(nonempty_text)},
        mac=nonempty_text,
        mtu=ints,
        sandbox=nonempty_text,
        socketPath=nonempty_text,
        pciID=nonempty_text,
    )


@st.composite
def _interface_040(draw: st.DrawFn) -> dict[str, Any]:
    return with_optional(
        draw, {"name": draw(nonempty_text)}, mac=nonempty_text, sandbox=nonempty_text
    )


interfaces_100 = _interface_100()
interfaces_040 = _interface_040()


@st.composite
def _result_100(draw: st.DrawFn) -> dict[str, Any]:
    return with_optional(
        draw,
        {"cniVersion": draw(st.sampled_from(V1))},
        interfaces=st.lists(interfaces_100, min_size=1, max_size=3),
        ips=st.lists(ips(False), min_size=1, max_size=4),
        routes=st.lists(routes(), min_size=1, max_size=4),
        dns=dns_objects(allow_empty=False),
    )


@functools.cache
def results_100() -> st.SearchStrategy[dict[str, Any]]:
    return _result_100()


@st.composite
def results_040(draw: st.DrawFn) -> dict[str, Any]:
    doc = with_optional(
        draw,
        {"cniVersion": draw(st.sampled_from(V04))},
        interfaces=st.lists(interfaces_040, min_size=1, max_size=3),
        ips=st.lists(ips(True), min_size=1, max_size=4),
        routes=st.lists(routes(), min_size=1, max_size=4),
    )
    doc["dns"] = draw(dns_objects(allow_empty=True))
    return doc


@st.composite
def _legacy_route(draw: st.DrawFn, version: int) -> dict[str, Any]:
    return with_optional(draw, {"dst": draw(cidr(version))}, gw=address(version))


@functools.cache
def legacy_route(version: int) -> st.SearchStrategy[dict[str, Any]]:
    return _legacy_route(version)


@st.composite
def _legacy_block(draw: st.DrawFn, version: int) -> dict[str, Any]:
    return with_optional(
        draw,
        {"ip": draw(cidr(version))},
        gateway=address(version),
        routes=st.lists(legacy_route(version), min_size=1, max_size=3),
    )


@functools.cache
def legacy_block(version: int) -> st.SearchStrategy[dict[str, Any]]:
    return _legacy_block(version)


@st.composite
def results_020(draw: st.DrawFn) -> dict[str, Any]:
    doc = with_optional(
        draw,
        {"cniVersion": draw(st.sampled_from(V02))},
        ip4=legacy_block(4),
        ip6=legacy_block(6),
    )
    doc["dns"] = draw(dns_objects(allow_empty=True))
    return doc


any_result = results_100() | results_040() | results_020()


# --------------------------------------------------------------------------
# Round trips


@given(results_100())
def test_100_round_trip(doc: dict[str, Any]) -> None:
    result = result_from_dict(doc)
    assert isinstance(result, Result100)
    assert result.to_dict() == doc


@given(results_040())
def test_040_round_trip(doc: dict[str, Any]) -> None:
    result = result_from_dict(doc)
    assert isinstance(result, Result040)
    assert result.to_dict() == doc


@given(results_020())
def test_020_round_trip(doc: dict[str, Any]) -> None:
    result = result_from_dict(doc)
    assert isinstance(result, Result020)
    assert result.to_dict() == doc


@given(any_result)
def test_json_text_round_trip(doc: dict[str, Any]) -> None:
    result = result_from_bytes(json.dumps(doc).encode())
    assert result.to_dict() == doc
    again = result_from_bytes(result.to_json())
    assert again == result
    assert hash(again) == hash(result)
    assert create_result(result.cni_version, result.to_json()) == result


# --------------------------------------------------------------------------
# Conversions there and back


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


def _family(addr: str) -> int:
    return ip_interface(addr).version


def _legacy_projection(doc: dict[str, Any]) -> dict[str, Any]:
    """What a 0.x/1.x result keeps through 0.1.0/0.2.0, as a 0.4.0 dict."""
    blocks = []
    for family in (4, 6):
        first = next((ip for ip in doc.get("ips", []) if _family(ip["address"]) == family), None)
        if first is not None:
            blocks.append((family, first))
    ips = [_without(ip, "interface", "version") for _, ip in blocks]
    families = {family for family, _ in blocks}
    out_routes = [
        _without(r, "mtu", "advmss", "priority", "table", "scope")
        for family in (4, 6)
        if family in families
        for r in doc.get("routes", [])
        if _family(r["dst"]) == family
    ]
    out = _without(doc, "interfaces", "ips", "routes", "cniVersion")
    if ips:
        out["ips"] = ips
    if out_routes:
        out["routes"] = out_routes
    return out


def _as_040_dict(result: Result) -> dict[str, Any]:
    """The result as a 0.4.0 dict without cniVersion, IP versions or empty dns."""
    doc = result.as_version("0.4.0").to_dict()
    doc.pop("cniVersion")
    if doc.get("dns") == {}:
        del doc["dns"]
    for ip in doc.get("ips", []):
        ip.pop("version")
    return doc


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(results_100(), st.sampled_from(V04 + V1))
def test_100_there_and_back(doc: dict[str, Any], target: str) -> None:
    result = result_from_dict(doc)
    back = result.as_version(target).as_version(doc["cniVersion"])
    expected = dict(doc)
    if target in V04 and "interfaces" in doc:
        # 0.3/0.4 interfaces have no mtu, socketPath, pciID.
        expected["interfaces"] = [
            _without(i, "mtu", "socketPath", "pciID") for i in doc["interfaces"]
        ]
    assert back.to_dict() == expected


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(results_040(), st.sampled_from(V04 + V1))
def test_040_there_and_back(doc: dict[str, Any], target: str) -> None:
    result = result_from_dict(doc)
    assert result.as_version(target).as_version(doc["cniVersion"]) == result


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(results_100() | results_040(), st.sampled_from(V02))
def test_through_legacy_keeps_what_legacy_can_hold(doc: dict[str, Any], target: str) -> None:
    result = result_from_dict(doc)
    if not doc.get("ips"):
        try:
            result.as_version(target)
        except VersionError as e:
            assert "no valid IP addresses" in str(e)
            return
        raise AssertionError("a result without IP converted to a legacy version")
    legacy = result.as_version(target)
    assert isinstance(legacy, Result020)
    back = legacy.as_version(doc["cniVersion"])
    expected = _legacy_projection(doc)
    if doc["cniVersion"] in V1:
        assert _as_040_dict(back) == expected
    else:
        got = back.to_dict()
        got.pop("cniVersion")
        if got.get("dns") == {}:
            del got["dns"]
        for ip in got.get("ips", []):
            ip.pop("version")
        if expected.get("dns") == {}:
            del expected["dns"]
        assert got == expected


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(results_020(), st.sampled_from(V1 + V04 + V02))
def test_020_there_and_back(doc: dict[str, Any], target: str) -> None:
    result = result_from_dict(doc)
    converted = result.as_version(target)
    if target in V02 or "ip4" in doc or "ip6" in doc:
        assert converted.as_version(doc["cniVersion"]) == result
    else:
        try:
            converted.as_version(doc["cniVersion"])
        except VersionError as e:
            assert "no valid IP addresses" in str(e)
        else:
            raise AssertionError("a result without IP converted to a legacy version")


@given(any_result, st.sampled_from(V1 + V04 + V02))
def test_conversion_output_parses_back(doc: dict[str, Any], target: str) -> None:
    try:
        converted = result_from_dict(doc).as_version(target)
    except VersionError:
        return
    assert converted.cni_version == target
    assert result_from_bytes(converted.to_json()) == converted


# --------------------------------------------------------------------------
# Hostile input: only DecodeError / VersionError, never anything else


def _decode_only_cni_errors(data: Any, default_version: str = "") -> None:
    try:
        result = (
            result_from_bytes(data, default_version)
            if isinstance(data, (bytes, str))
            else result_from_dict(data, default_version)
        )
    except (DecodeError, VersionError) as e:
        assert isinstance(e, CNIError)
        assert str(e)
        return
    # Whatever parsed serialises and parses back to the same result.
    assert result_from_bytes(result.to_json()) == result
    for version in V1 + V04 + V02:
        try:
            converted = result.as_version(version)
        except VersionError:
            continue
        assert result_from_bytes(converted.to_json()) == converted


@settings(max_examples=300)
@given(st.binary(max_size=200), st.sampled_from(("", *V1, *V04, *V02, "9.9.9")))
def test_arbitrary_bytes(data: bytes, default_version: str) -> None:
    _decode_only_cni_errors(data, default_version)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_arbitrary_text(data: str) -> None:
    _decode_only_cni_errors(data, "1.0.0")


# JSON made of the field names results know, so that parsing goes deep.
known_keys = st.sampled_from(sorted(KNOWN_NAMES)) | st.text(max_size=4)
plausible_scalars = (
    json_scalars
    | st.sampled_from(V1 + V04 + V02 + ("4", "6", "", "x"))
    | cidr()
    | address()
    | st.integers(-3, 3)
)
plausible_json = st.recursive(
    plausible_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(known_keys, inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(plausible_json, st.sampled_from(("", *V1, *V04, *V02)))
def test_arbitrary_json(obj: Any, default_version: str) -> None:
    _decode_only_cni_errors(json.dumps(obj), default_version)
    _decode_only_cni_errors(obj, default_version)


@st.composite
def mutated_results(draw: st.DrawFn) -> Any:
    """A valid result with one member replaced by arbitrary JSON."""
    doc = draw(any_result)
    node: Any = doc
    for _ in range(draw(st.integers(0, 4))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if draw(st.booleans()) or not isinstance(node[key], (dict, list)):
                node[key] = draw(plausible_json)
                return doc
            node = node[key]
        elif isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            if draw(st.booleans()) or not isinstance(node[index], (dict, list)):
                node[index] = draw(plausible_json)
                return doc
            node = node[index]
    return doc


# 120, not 300: the valid results are those of the round trips above, and what
# replaces a member is test_arbitrary_json's JSON (300 examples there).
@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_results())
def test_mutated_results(doc: Any) -> None:
    _decode_only_cni_errors(json.dumps(doc))
    _decode_only_cni_errors(doc)


@given(
    st.one_of(
        st.none(), st.integers(), st.text(), st.lists(st.integers()), st.binary(),
        st.dictionaries(st.text(), st.integers()), st.sets(st.integers()),
    )
)  # fmt: skip
def test_arbitrary_python_values(value: Any) -> None:
    for obj in (value, {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/8", "x": value}]}):
        with contextlib.suppress(CNIError):
            result_from_dict(obj, "1.0.0")
