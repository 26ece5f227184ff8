"""Property tests of libcni.conf: no input makes the parsers raise anything but ConfigError."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libcni.conf import (
    NetworkConfigList,
    PluginConfig,
    conf_from_bytes,
    conf_list_from_bytes,
    conf_list_from_conf,
    inject_conf,
)
from libcni.errors import ConfigError

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The tests of generated objects (parsed to check, valid ones round-tripped): 150
# examples, as their fields are few presence choices around values kept verbatim,
# and tests/reliability/test_hostile_input.py fuzzes the same parsers with hostile
# plugin and list objects (250 examples each). Cheap inputs (bytes, text) keep 300.
OBJECTS = settings(SETTINGS, max_examples=150)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=25,
)
# The values around the keys a parser reads (extra keys, IPAM settings, values of
# well-known keys): the parsers keep them as they are, so their shape matters, not
# their size; small ones keep the examples quick to draw.
small_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
well_known = st.sampled_from(
    [
        "type",
        "name",
        "cniVersion",
        "cniVersions",
        "capabilities",
        "ipam",
        "dns",
        "plugins",
        "disableCheck",
        "disableGC",
        "loadOnlyInlinedPlugins",
    ]
)
# Objects whose keys are mostly the well-known ones, with arbitrary values.
tricky_objects = st.recursive(
    st.dictionaries(well_known, small_values, max_size=6),
    lambda children: st.dictionaries(
        well_known | st.text(max_size=5), children | st.lists(children, max_size=3), max_size=6
    ),
    max_leaves=10,
)


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


def _check_plugin(conf: PluginConfig, value: Any) -> None:
    assert isinstance(conf, PluginConfig)
    assert isinstance(conf.type, str) and conf.type
    assert isinstance(conf.name, str) and isinstance(conf.cni_version, str)
    assert all(isinstance(v, bool) for v in conf.capabilities.values())
    assert conf.ipam is None or isinstance(conf.ipam, dict)
    assert conf.raw == value


def _check_list(lst: NetworkConfigList, value: Any) -> None:
    assert isinstance(lst, NetworkConfigList)
    assert isinstance(lst.name, str) and isinstance(lst.cni_version, str)
    assert isinstance(lst.plugins, tuple)
    for plugin, plugin_value in zip(lst.plugins, value.get("plugins", []), strict=True):
        _check_plugin(plugin, plugin_value)
    assert lst.raw == value


def _parse_plugin(data: bytes | str, value: Any = None, decoded: bool = False) -> None:
    try:
        conf = conf_from_bytes(data)
    except ConfigError:
        return
    if decoded:
        _check_plugin(conf, value)


def _parse_list(data: bytes | str, value: Any = None, decoded: bool = False) -> None:
    try:
        lst = conf_list_from_bytes(data)
    except ConfigError:
        return
    if decoded:
        _check_list(lst, value)


@SETTINGS
@given(json_values)
def test_any_json_value(value: Any) -> None:
    data = _encode(value)
    _parse_plugin(data, value, decoded=True)
    _parse_list(data, value, decoded=True)


@OBJECTS
@given(tricky_objects)
def test_objects_with_well_known_keys(value: Any) -> None:
    data = _encode(value)
    _parse_plugin(data, value, decoded=True)
    _parse_list(data, value, decoded=True)


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes(data: bytes) -> None:
    _parse_plugin(data)
    _parse_list(data)


@SETTINGS
@given(st.text(max_size=300))
def test_any_text(data: str) -> None:
    _parse_plugin(data)
    _parse_list(data)


@SETTINGS
@given(json_values, st.integers(min_value=0, max_value=200))
def test_any_json_value_mutated(value: Any, cut: int) -> None:
    data = _encode(value)
    _parse_plugin(data[:cut] + data[cut + 1 :])
    _parse_list(data[:cut] + b"\\" + data[cut:])


# --------------------------------------------------------------------------- valid configs

versions = st.sampled_from(["", "0.1.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "1", "0.10.0"])
dns_objects = st.fixed_dictionaries(
    {},
    optional={
        "nameservers": st.lists(st.text(max_size=8), max_size=3),
        "domain": st.text(max_size=8),
        "search": st.lists(st.text(max_size=8), max_size=3),
        "options": st.lists(st.text(max_size=8), max_size=3),
    },
)
extra_keys = st.dictionaries(
    st.text(max_size=10).filter(
        lambda k: k not in {"type", "name", "cniVersion", "capabilities", "ipam", "dns"}
    ),
    small_values,
    max_size=4,
)


# The strategies the composites draw from, built once (building and validating a
# strategy per example cost more than the parsing under test).
plugin_types = st.text(min_size=1, max_size=10)
short_names = st.text(max_size=10)
capability_maps = st.dictionaries(st.text(max_size=8), st.booleans(), max_size=3)
# Any keys but "type", which is drawn (as a string) or left out.
ipam_objects = st.dictionaries(
    st.text(max_size=5).filter(lambda k: k != "type"), small_values, max_size=3
)
ipam_types = st.text(max_size=8)


@st.composite
def plugin_objects(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = draw(extra_keys)
    obj["type"] = draw(plugin_types)
    if draw(st.booleans()):
        obj["name"] = draw(short_names)
    if draw(st.booleans()):
        obj["cniVersion"] = draw(versions)
    if draw(st.booleans()):
        obj["capabilities"] = draw(capability_maps)
    if draw(st.booleans()):
        ipam = draw(ipam_objects)
        if draw(st.booleans()):
            ipam["type"] = draw(ipam_types)
        obj["ipam"] = ipam
    if draw(st.booleans()):
        obj["dns"] = draw(dns_objects)
    return obj


flag_values = st.sampled_from([True, False, "true", "false", "TRUE", "False"])
plugin_lists = st.lists(plugin_objects(), min_size=1, max_size=4)
version_lists = st.lists(versions | st.sampled_from(["2.0.0", "1.2"]))


@st.composite
def list_objects(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {"name": draw(short_names)}
    obj["plugins"] = draw(plugin_lists)
    if draw(st.booleans()):
        obj["cniVersion"] = draw(versions)
    if draw(st.booleans()):
        obj["cniVersions"] = draw(version_lists)
    for key in ("disableCheck", "disableGC", "loadOnlyInlinedPlugins"):
        if draw(st.booleans()):
            obj[key] = draw(flag_values)
    obj["x-extra"] = draw(small_values)
    return obj


@OBJECTS
@given(plugin_objects(), st.booleans())
def test_valid_plugin_round_trips(obj: dict[str, Any], as_text: bool) -> None:
    text = json.dumps(obj, ensure_ascii=False)
    data: bytes | str
    try:
        data = text if as_text else text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogate in generated text
        data = json.dumps(obj)
    conf = conf_from_bytes(data)
    assert conf.raw == obj
    assert conf.bytes == (data.encode() if isinstance(data, str) else data)
    assert conf.type == obj["type"]
    assert conf.name == obj.get("name", "")
    assert conf.cni_version == obj.get("cniVersion", "")
    assert dict(conf.capabilities) == obj.get("capabilities", {})
    assert conf.ipam == obj.get("ipam")
    assert (conf.dns is None) == ("dns" not in obj)
    # Wrapping and re-parsing keeps the plugin's object.
    lst = conf_list_from_conf(conf)
    assert lst.plugins[0].raw == obj
    assert conf_list_from_bytes(lst.bytes).plugins[0].raw == obj


@OBJECTS
@given(list_objects())
def test_valid_list_round_trips(obj: dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    lst = conf_list_from_bytes(data)
    assert lst.raw == obj
    assert lst.bytes == data
    assert lst.name == obj["name"]
    assert [p.raw for p in lst.plugins] == obj["plugins"]
    assert [json.loads(p.bytes) for p in lst.plugins] == obj["plugins"]
    for key, attr in (
        ("disableCheck", "disable_check"),
        ("disableGC", "disable_gc"),
        ("loadOnlyInlinedPlugins", "load_only_inlined_plugins"),
    ):
        assert getattr(lst, attr) is (str(obj.get(key, False)).lower() == "true")
    if "cniVersions" not in obj:
        assert lst.cni_version == obj.get("cniVersion", "")
    else:
        candidates = [*obj["cniVersions"], obj.get("cniVersion", "")]
        assert lst.cni_version in candidates
        assert lst.cni_version not in ("2.0.0", "1.2")


@OBJECTS
@given(plugin_objects(), st.dictionaries(st.text(min_size=1, max_size=8), small_values, max_size=4))
def test_inject_conf_sets_keys(obj: dict[str, Any], values: dict[str, Any]) -> None:
    conf = conf_from_bytes(json.dumps(obj))
    try:
        new = inject_conf(conf, values)
    except ConfigError:
        # Only a None value, or a well-known key given a bad value, may be refused.
        assert any(v is None for v in values.values()) or (
            set(values) & {"type", "name", "cniVersion", "capabilities", "ipam", "dns"}
        )
        return
    for key, value in values.items():
        assert new.raw[key] == value
    for key in obj.keys() - values.keys():
        assert new.raw[key] == obj[key]
    assert json.loads(new.bytes) == new.raw
    assert conf.raw == obj
