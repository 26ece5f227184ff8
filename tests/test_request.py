"""The request a plugin receives (behaviour.md §3, §6.2, §8): pure functions, nothing runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libcni import request as rq
from libcni.errors import ConfigError, ValidationError

CONF = {
    "type": "bridge",
    "name": "from-file",
    "cniVersion": "0.3.1",
    "capabilities": {"portMappings": True, "mac": False, "ips": True},
    "runtimeConfig": {"from": "file"},
    "args": {"cni": {"x": 1}},
    "unknownKey": [1, 2, 3],
}


def req(**kw: Any) -> dict[str, object]:
    base: dict[str, Any] = {"name": "net", "cni_version": "1.0.0", **kw}
    request: dict[str, object] = json.loads(rq.plugin_request(CONF, **base))
    return request


def test_name_and_version_come_from_the_list_not_the_plugin_object() -> None:
    out = req()
    assert out["name"] == "net"
    assert out["cniVersion"] == "1.0.0"


def test_unknown_keys_args_and_capabilities_pass_through() -> None:
    out = req()
    assert out["unknownKey"] == [1, 2, 3]
    assert out["args"] == {"cni": {"x": 1}}
    assert out["capabilities"] == CONF["capabilities"]
    assert out["type"] == "bridge"


def test_runtime_config_holds_only_declared_and_provided_capabilities() -> None:
    out = req(capability_args={"portMappings": [{"hostPort": 80}], "mac": "aa", "bandwidth": {}})
    assert out["runtimeConfig"] == {"portMappings": [{"hostPort": 80}]}


def test_runtime_config_in_file_passes_through_when_nothing_to_inject() -> None:
    assert req(capability_args={"mac": "aa"})["runtimeConfig"] == {"from": "file"}
    assert req()["runtimeConfig"] == {"from": "file"}


def test_capability_args_without_declared_capabilities_add_nothing() -> None:
    conf = {"type": "x"}
    out = json.loads(
        rq.plugin_request(conf, name="n", cni_version="1.0.0", capability_args={"mac": "a"})
    )
    assert "runtimeConfig" not in out


def test_prev_result_set_only_when_given() -> None:
    conf = dict(CONF, prevResult={"old": True})
    assert json.loads(rq.plugin_request(conf, name="n", cni_version="1.0.0"))["prevResult"] == {
        "old": True
    }
    out = json.loads(
        rq.plugin_request(conf, name="n", cni_version="1.0.0", prev_result={"ips": []})
    )
    assert out["prevResult"] == {"ips": []}
    assert "prevResult" not in req()


def test_request_does_not_modify_the_configuration() -> None:
    before = json.dumps(CONF)
    req(capability_args={"portMappings": []}, prev_result={"a": 1})
    assert json.dumps(CONF) == before


def test_gc_request_carries_valid_attachments_under_both_keys() -> None:
    out = json.loads(
        rq.gc_request(CONF, name="n", cni_version="1.1.0", valid_attachments=[("c1", "eth0")])
    )
    expected = [{"containerID": "c1", "ifname": "eth0"}]
    assert out["cni.dev/valid-attachments"] == expected
    assert out["cni.dev/attachments"] == expected
    assert out["name"] == "n" and out["cniVersion"] == "1.1.0"
    assert out["runtimeConfig"] == {"from": "file"}  # passes through; nothing injected


_json_scalar = st.none() | st.booleans() | st.integers() | st.text()
_conf_values = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@given(
    conf=st.dictionaries(
        st.sampled_from(["type", "name", "cniVersion", "cni.dev/attachments", "x", "\ud800"])
        | st.text(),
        _conf_values,
        max_size=4,
    ),
    pairs=st.lists(st.tuples(st.text(), st.text()), max_size=4),
)
def test_gc_request_with_attachments_encoded_once_is_the_same_bytes(
    conf: dict[str, Any], pairs: list[tuple[str, str]]
) -> None:
    # A GC encodes its valid attachments once for all its plugins (EncodedAttachments):
    # every request is byte for byte the one made from the pairs themselves, lone
    # surrogates and configurations that hold the keys already included.
    encoded = rq.EncodedAttachments(pairs)
    for _ in range(2):  # the text made at the first use serves the next
        assert rq.gc_request(
            conf, name="n", cni_version="1.1.0", valid_attachments=encoded
        ) == rq.gc_request(conf, name="n", cni_version="1.1.0", valid_attachments=pairs)


def test_status_request_sets_name_and_version_only() -> None:
    out = json.loads(rq.status_request(CONF, name="n", cni_version="1.1.0"))
    assert {k: out[k] for k in ("name", "cniVersion")} == {"name": "n", "cniVersion": "1.1.0"}
    assert "prevResult" not in out


def test_cni_args_are_joined_in_order() -> None:
    assert rq.encode_cni_args([("B", "2"), ("A", "1")]) == "B=2;A=1"
    assert rq.encode_cni_args([]) == ""
    assert rq.encode_cni_args([("K", "")]) == "K="


@pytest.mark.parametrize(
    "pair", [("", "v"), ("a;b", "v"), ("a=b", "v"), ("k", "v;x"), ("k", "a=b"), ("k", "a\0")]
)
def test_unrepresentable_cni_args_are_refused_naming_the_pair(pair: tuple[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        rq.encode_cni_args([("OK", "1"), pair])
    assert pair[0] in info.value.details


@pytest.mark.parametrize("pair", [("k",), ("k", "v", "w"), ("k", 1), "kv"])
def test_malformed_cni_args_pairs_are_config_errors(pair: object) -> None:
    with pytest.raises(ConfigError):
        rq.encode_cni_args([pair])  # type: ignore[list-item]


@given(st.lists(st.tuples(st.text(), st.text()), max_size=5))
def test_cni_args_either_round_trip_or_are_refused(pairs: list[tuple[str, str]]) -> None:
    try:
        encoded = rq.encode_cni_args(pairs)
    except ConfigError:
        assert any(not k or set(k + v) & {";", "=", "\0"} for k, v in pairs)
        return
    decoded = [tuple(p.split("=", 1)) for p in encoded.split(";")] if encoded else []
    assert decoded == pairs


def test_env_sets_all_six_variables_over_inherited_ones() -> None:
    env = rq.plugin_env(
        {"PATH": "/bin", "CNI_COMMAND": "stale", "CNI_NETNS": "stale"},
        command="ADD",
        container_id="c1",
        ifname="eth0",
        path=["/opt/a", "/opt/b"],
    )
    assert env["PATH"] == "/bin"
    assert env["CNI_COMMAND"] == "ADD"
    assert env["CNI_CONTAINERID"] == "c1"
    assert env["CNI_NETNS"] == ""
    assert env["CNI_IFNAME"] == "eth0"
    assert env["CNI_ARGS"] == ""
    assert env["CNI_PATH"] == "/opt/a:/opt/b"


def test_version_env_sets_dummy_netns_ifname_and_path_as_go() -> None:
    # behaviour.md §4.8: plugins built with an old skel refuse to run without them.
    env = rq.version_env({"CNI_NETNS": "/inherited"}, ["/p"])
    assert env["CNI_COMMAND"] == "VERSION"
    assert env["CNI_NETNS"] == env["CNI_IFNAME"] == env["CNI_PATH"] == "dummy"
    assert env["CNI_CONTAINERID"] == env["CNI_ARGS"] == ""


@pytest.mark.parametrize(
    ("cid", "code"), [("", 3), ("-abc", 4), ("a b", 4), ("a/b", 4), ("ä", 4), ("..", 4)]
)
def test_container_id_validation(cid: str, code: int) -> None:
    with pytest.raises(ValidationError) as info:
        rq.validate_container_id(cid)
    assert info.value.code == code
    if cid:
        assert cid in info.value.details


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (rq.validate_container_id, "1234%%%"),
        (rq.validate_container_id, "x" * 400 + " y"),
        (rq.validate_network_name, "net work"),
        (rq.validate_interface_name, "a" * 16),
        (rq.validate_interface_name, "a:b"),
    ],
)
def test_validation_error_details_is_the_value_itself(check: Any, value: str) -> None:
    # Go: ValidationError Details "1234%%%", not its repr "'1234%%%'" (behaviour.md §8).
    with pytest.raises(ValidationError) as info:
        check(value)
    assert info.value.details == value


@pytest.mark.parametrize(
    "args",
    [
        {1: "a", "1": "b"},
        {"portMappings": [{"hostPort": 80, 2: "x"}]},
        {"a": {"b": {(1, 2): "c"}}},
        {"a": {None: 1}},
        {"bandwidth": {"rate": float("nan")}},
    ],
)
def test_capability_args_with_non_string_keys_are_config_errors(args: dict[Any, Any]) -> None:
    # behaviour.md §8: object keys are strings at every level; json.dumps would
    # otherwise turn {1: "a", "1": "b"} into an object with two "1" keys.
    with pytest.raises(ConfigError):
        rq.check_capability_args(args)


def test_json_capability_args_pass() -> None:
    rq.check_capability_args({"portMappings": [{"hostPort": 80}], "mac": "x", "n": None})


@pytest.mark.parametrize("cid", ["a", "0abc", "a_b.c-d", "A" * 200])
def test_valid_container_ids(cid: str) -> None:
    rq.validate_container_id(cid)


@pytest.mark.parametrize("name", ["", "_x", "a/b", "a b"])
def test_network_name_validation_is_code_7(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        rq.validate_network_name(name)
    assert info.value.code == 7


@pytest.mark.parametrize(
    "ifname", ["", "a" * 16, "é" * 8, ".", "..", "a/b", "a:b", "a b", "a\tb", "a\nb"]
)
def test_interface_name_validation_is_code_4(ifname: str) -> None:
    with pytest.raises(ValidationError) as info:
        rq.validate_interface_name(ifname)
    assert info.value.code == 4


@pytest.mark.parametrize("ifname", ["eth0", "a" * 15, "net1", "veth-x.1"])
def test_valid_interface_names(ifname: str) -> None:
    rq.validate_interface_name(ifname)


@given(st.dictionaries(st.text(), st.booleans()), st.dictionaries(st.text(), st.integers()))
def test_runtime_config_is_the_enabled_intersection(
    caps: dict[str, bool], provided: dict[str, int]
) -> None:
    rc = rq.runtime_config(caps, provided)
    assert set(rc) == {k for k, v in caps.items() if v and k in provided}
    assert all(rc[k] == provided[k] for k in rc)


def test_plugin_stdin_is_the_one_decision_per_plugin_call() -> None:
    base: dict[str, Any] = {"name": "n", "cni_version": "1.1.0"}
    for command in (rq.ADD, rq.CHECK, rq.DEL):
        assert rq.plugin_stdin(command, CONF, prev_result={"ips": []}, **base) == rq.plugin_request(
            CONF, prev_result={"ips": []}, **base
        )
    valid = [("c1", "eth0")]
    assert rq.plugin_stdin(rq.GC, CONF, valid_attachments=valid, **base) == rq.gc_request(
        CONF, valid_attachments=valid, **base
    )
    assert rq.plugin_stdin(rq.STATUS, CONF, **base) == rq.status_request(CONF, **base)
    assert rq.plugin_stdin(rq.VERSION, CONF, **base) == rq.VERSION_REQUEST


def test_operation_env_refuses_bad_cni_args_and_capability_args_before_anything_runs() -> None:
    with pytest.raises(ConfigError):
        rq.operation_env(rq.ADD, args=[("A;B", "1")])
    with pytest.raises(ConfigError):
        rq.operation_env(rq.ADD, capability_args={"x": float("nan")})
    env = rq.operation_env(rq.DEL, container_id="c", ifname="eth0", args=[("K", "V")], path=["/p"])
    assert env["CNI_COMMAND"] == "DEL" and env["CNI_ARGS"] == "K=V" and env["CNI_PATH"] == "/p"
    assert rq.operation_env(rq.VERSION)["CNI_NETNS"] == "dummy"
