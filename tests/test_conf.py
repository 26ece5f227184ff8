"""Tests of libcni.conf: behaviour.md §1 (versions, as used by configurations) and §2."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from libcni.conf import (
    NetworkConfig,
    NetworkConfigList,
    PluginConfig,
    conf_files,
    conf_from_bytes,
    conf_from_file,
    conf_list_from_bytes,
    conf_list_from_conf,
    conf_list_from_file,
    inject_conf,
    load_conf,
    load_conf_list,
)
from libcni.errors import ConfigError, NoConfigsFoundError, NotFoundError
from libcni.types.dns import DNS

#: The CNI specification texts whose examples are parsed (copied into the repository).
SPEC_DIR = Path(__file__).parent / "data" / "spec"


def dump(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def plist(**extra: Any) -> bytes:
    obj: dict[str, Any] = {"name": "net", "plugins": [{"type": "bridge"}]}
    obj.update(extra)
    return dump(obj)


def write(path: Path, content: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    return path


def raises_config(fn: Any, *args: Any, match: str | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    if match is not None:
        assert re.search(match, str(info.value)), str(info.value)
    return info.value


# =========================================================================== §1 versions


class TestVersionNegotiation:
    def test_numeric_not_textual_comparison(self) -> None:
        lst = conf_list_from_bytes(plist(cniVersions=["0.4.0", "0.10.0", "0.9.0"]))
        assert lst.cni_version == "0.10.0"

    def test_missing_parts_are_zero(self) -> None:
        assert conf_list_from_bytes(plist(cniVersions=["0.4.0", "1"])).cni_version == "1"
        assert conf_list_from_bytes(plist(cniVersions=["1", "0.4"])).cni_version == "1"

    def test_empty_string_is_0_1_0(self) -> None:
        assert conf_list_from_bytes(plist(cniVersions=["", "0.2.0"])).cni_version == "0.2.0"
        assert conf_list_from_bytes(plist(cniVersions=[""])).cni_version == ""

    @pytest.mark.parametrize("bad", ["1.0.0.0", "1..0", "a.b.c", "1.0.x", "v1", "1.²"])
    def test_invalid_entry_is_config_error_naming_it(self, bad: str) -> None:
        err = raises_config(conf_list_from_bytes, plist(cniVersions=["0.4.0", bad]))
        assert repr(bad) in err.msg or bad in err.msg
        assert "index 1" in err.msg

    def test_newer_than_supported_dropped(self) -> None:
        lst = conf_list_from_bytes(plist(cniVersions=["1.0.0", "1.2.0", "2.0.0"]))
        assert lst.cni_version == "1.0.0"

    def test_current_is_accepted(self) -> None:
        assert conf_list_from_bytes(plist(cniVersions=["1.1.0"])).cni_version == "1.1.0"

    def test_cni_version_is_a_candidate(self) -> None:
        lst = conf_list_from_bytes(plist(cniVersion="1.1.0", cniVersions=["1.0.0"]))
        assert lst.cni_version == "1.1.0"
        lst = conf_list_from_bytes(plist(cniVersion="0.3.1", cniVersions=["1.0.0"]))
        assert lst.cni_version == "1.0.0"

    def test_too_new_cni_version_loses_to_entries(self) -> None:
        lst = conf_list_from_bytes(plist(cniVersion="9.9.9", cniVersions=["0.4.0"]))
        assert lst.cni_version == "0.4.0"

    def test_nothing_remains_keeps_cni_version(self) -> None:
        lst = conf_list_from_bytes(plist(cniVersion="2.0.0", cniVersions=["3.0.0"]))
        assert lst.cni_version == "2.0.0"
        lst = conf_list_from_bytes(plist(cniVersion="0.4.0", cniVersions=[]))
        assert lst.cni_version == "0.4.0"
        assert conf_list_from_bytes(plist(cniVersions=[])).cni_version == ""

    def test_cni_version_verbatim_without_cni_versions(self) -> None:
        assert conf_list_from_bytes(plist(cniVersion="banana")).cni_version == "banana"
        assert conf_list_from_bytes(plist(cniVersion="0.3")).cni_version == "0.3"
        assert conf_list_from_bytes(plist()).cni_version == ""

    def test_invalid_cni_version_with_cni_versions(self) -> None:
        err = raises_config(conf_list_from_bytes, plist(cniVersion="banana", cniVersions=["1.0.0"]))
        assert "cniVersion" in err.msg and "banana" in err.msg

    @pytest.mark.parametrize("value", ["1.0.0", {"a": 1}, 1, None, True])
    def test_cni_versions_must_be_a_list(self, value: Any) -> None:
        err = raises_config(conf_list_from_bytes, plist(cniVersions=value))
        assert "'cniVersions'" in err.msg

    @pytest.mark.parametrize("entry", [1, None, ["1.0.0"], {"v": "1"}, 1.0])
    def test_cni_versions_entries_must_be_strings(self, entry: Any) -> None:
        err = raises_config(conf_list_from_bytes, plist(cniVersions=["1.0.0", entry]))
        assert "'cniVersions' entry 1" in err.msg

    def test_equal_versions_keep_first_spelling(self) -> None:
        lst = conf_list_from_bytes(plist(cniVersions=["1.0", "1.0.0"]))
        assert lst.cni_version in ("1.0", "1.0.0")


# =========================================================================== §2.1 plugin


class TestPluginConfig:
    def test_parses_well_known_fields(self) -> None:
        data = dump(
            {
                "cniVersion": "1.0.0",
                "name": "dbnet",
                "type": "bridge",
                "capabilities": {"portMappings": True, "mac": False},
                "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"},
                "dns": {
                    "nameservers": ["10.1.0.1"],
                    "domain": "example",
                    "search": ["a"],
                    "options": ["ndots:2"],
                },
            }
        )
        conf = conf_from_bytes(data)
        assert conf.type == "bridge"
        assert conf.name == "dbnet"
        assert conf.cni_version == "1.0.0"
        assert conf.capabilities == {"portMappings": True, "mac": False}
        assert conf.ipam == {"type": "host-local", "subnet": "10.1.0.0/16"}
        assert conf.dns == DNS(("10.1.0.1",), "example", ("a",), ("ndots:2",))

    def test_optional_fields_default(self) -> None:
        conf = conf_from_bytes(b'{"type": "x"}')
        assert (conf.name, conf.cni_version, conf.capabilities, conf.ipam, conf.dns) == (
            "",
            "",
            {},
            None,
            None,
        )

    def test_null_well_known_fields_are_absent(self) -> None:
        conf = conf_from_bytes(
            b'{"type":"x","name":null,"cniVersion":null,"capabilities":null,"ipam":null,"dns":null}'
        )
        assert (conf.name, conf.cni_version, conf.capabilities, conf.ipam, conf.dns) == (
            "",
            "",
            {},
            None,
            None,
        )

    def test_unknown_keys_kept_and_bytes_unchanged(self) -> None:
        data = b'{ "type" : "bridge",\n "bridge": "cni0", "keyA": ["x", 1, {"y": null}] }\n'
        conf = conf_from_bytes(data)
        assert conf.bytes is data or conf.bytes == data
        assert conf.raw == json.loads(data)
        assert conf.raw["keyA"] == ["x", 1, {"y": None}]

    def test_str_input_is_encoded_utf8(self) -> None:
        text = '{"type": "bridge", "comment": "caf\u00e9 \u2603"}'
        conf = conf_from_bytes(text)
        assert conf.bytes == text.encode("utf-8")
        assert conf.raw["comment"] == "caf\u00e9 \u2603"

    def test_bytearray_and_memoryview_accepted(self) -> None:
        assert conf_from_bytes(bytearray(b'{"type":"a"}')).bytes == b'{"type":"a"}'
        assert conf_from_bytes(memoryview(b'{"type":"a"}')).type == "a"

    def test_non_bytes_input_is_config_error(self) -> None:
        raises_config(conf_from_bytes, 42, match="bytes or str")

    @pytest.mark.parametrize("data", [b"", b"{", b"not json", b'{"type": "a",}', b"{'type': 'a'}"])
    def test_not_json(self, data: bytes) -> None:
        raises_config(conf_from_bytes, data, match="invalid JSON")

    @pytest.mark.parametrize("data", [b"[]", b'"bridge"', b"null", b"1", b"true"])
    def test_not_an_object(self, data: bytes) -> None:
        raises_config(conf_from_bytes, data, match="must be a JSON object")

    @pytest.mark.parametrize("data", [b"{}", b'{"type": ""}', b'{"type": null}', b'{"name": "n"}'])
    def test_missing_type(self, data: bytes) -> None:
        raises_config(conf_from_bytes, data, match="missing 'type'")

    @pytest.mark.parametrize("value", [1, True, ["bridge"], {"a": 1}])
    def test_type_must_be_string(self, value: Any) -> None:
        raises_config(conf_from_bytes, dump({"type": value}), match="'type' must be a string")

    @pytest.mark.parametrize("field", ["name", "cniVersion"])
    @pytest.mark.parametrize("value", [1, False, [], {}])
    def test_string_fields_typed(self, field: str, value: Any) -> None:
        err = raises_config(conf_from_bytes, dump({"type": "a", field: value}))
        assert f"'{field}' must be a string" in err.msg

    @pytest.mark.parametrize("value", [[], "mac", 1, True])
    def test_capabilities_must_be_object(self, value: Any) -> None:
        raises_config(
            conf_from_bytes,
            dump({"type": "a", "capabilities": value}),
            match="'capabilities' must be an object",
        )

    @pytest.mark.parametrize("value", ["true", 1, None, {}, []])
    def test_capability_must_be_boolean_naming_it(self, value: Any) -> None:
        caps = {"mac": True, "portMappings": value}
        err = raises_config(conf_from_bytes, dump({"type": "a", "capabilities": caps}))
        assert "portMappings" in err.msg
        assert "boolean" in err.msg

    def test_false_capabilities_kept(self) -> None:
        conf = conf_from_bytes(dump({"type": "a", "capabilities": {"x": False, "y": True}}))
        assert conf.capabilities == {"x": False, "y": True}
        assert [k for k, v in conf.capabilities.items() if v] == ["y"]

    @pytest.mark.parametrize("value", ["host-local", [], 1, True])
    def test_ipam_must_be_object(self, value: Any) -> None:
        raises_config(
            conf_from_bytes, dump({"type": "a", "ipam": value}), match="'ipam' must be an object"
        )

    @pytest.mark.parametrize("value", [1, [], {}, True])
    def test_ipam_type_must_be_string(self, value: Any) -> None:
        raises_config(
            conf_from_bytes, dump({"type": "a", "ipam": {"type": value}}), match="'ipam.type'"
        )

    def test_empty_ipam_object_accepted(self) -> None:
        # An L2-only bridge network uses "ipam": {} (no IPAM plugin).
        assert conf_from_bytes(dump({"type": "bridge", "ipam": {}})).ipam == {}

    @pytest.mark.parametrize(
        ("dns", "field"),
        [
            ("8.8.8.8", "must be an object"),
            ({"nameservers": "8.8.8.8"}, "nameservers"),
            ({"nameservers": [1]}, "nameservers"),
            ({"domain": 1}, "domain"),
            ({"search": [None]}, "search"),
            ({"options": {"a": 1}}, "options"),
        ],
    )
    def test_dns_fields_typed(self, dns: Any, field: str) -> None:
        err = raises_config(conf_from_bytes, dump({"type": "a", "dns": dns}))
        assert "dns" in err.msg and field in err.msg

    @pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
    def test_nan_and_infinity_refused(self, constant: bytes) -> None:
        err = raises_config(conf_from_bytes, b'{"type": "a", "x": ' + constant + b"}")
        assert constant.decode().lstrip("-") in str(err)

    def test_out_of_range_float_refused(self) -> None:
        raises_config(conf_from_bytes, b'{"type": "a", "x": 1e400}', match="1e400")

    def test_huge_integer(self) -> None:
        # Either parsed exactly or refused with a ConfigError, never another exception.
        big = b"9" * 5000
        try:
            conf = conf_from_bytes(b'{"type": "a", "x": ' + big + b"}")
        except ConfigError:
            return
        assert conf.raw["x"] == int(big)

    def test_invalid_utf8(self) -> None:
        raises_config(conf_from_bytes, b'{"type": "a\xff\xfe"}', match="UTF-8")

    def test_utf8_bom_refused(self) -> None:
        raises_config(conf_from_bytes, b'\xef\xbb\xbf{"type": "a"}')

    def test_utf16_refused(self) -> None:
        raises_config(conf_from_bytes, '{"type": "a"}'.encode("utf-16"))

    def test_unencodable_str(self) -> None:
        raises_config(conf_from_bytes, '{"type": "a\ud800"}', match="UTF-8")

    def test_deep_nesting(self) -> None:
        deep = b'{"type": "a", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
        raises_config(conf_from_bytes, deep)

    def test_escaped_lone_surrogate_is_kept(self) -> None:
        conf = conf_from_bytes(b'{"type": "a", "x": "\\ud800"}')
        assert conf.raw["x"] == "\ud800"

    def test_frozen(self) -> None:
        conf = conf_from_bytes(b'{"type": "a"}')
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            conf.type = "b"  # type: ignore[misc]

    def test_hashable_and_equal(self) -> None:
        a = conf_from_bytes(b'{"type": "a", "ipam": {"type": "x"}}')
        b = conf_from_bytes(b'{"type": "a", "ipam": {"type": "x"}}')
        assert a == b and hash(a) == hash(b)
        assert len({a, b}) == 1

    def test_network_config_alias(self) -> None:
        assert NetworkConfig is PluginConfig


# =========================================================================== §2.2 list


class TestConfList:
    def test_parses(self) -> None:
        data = dump(
            {
                "cniVersion": "1.0.0",
                "name": "dbnet",
                "extra": {"k": [1, 2]},
                "plugins": [{"type": "bridge", "bridge": "cni0"}, {"type": "tuning"}],
            }
        )
        lst = conf_list_from_bytes(data)
        assert lst.name == "dbnet"
        assert lst.cni_version == "1.0.0"
        assert (lst.disable_check, lst.disable_gc, lst.load_only_inlined_plugins) == (
            False,
            False,
            False,
        )
        assert [p.type for p in lst.plugins] == ["bridge", "tuning"]
        assert isinstance(lst.plugins, tuple)
        assert lst.bytes == data
        assert lst.raw["extra"] == {"k": [1, 2]}

    def test_str_input(self) -> None:
        text = '{"name": "n\u00e9t", "plugins": [{"type": "a"}]}'
        lst = conf_list_from_bytes(text)
        assert lst.bytes == text.encode() and lst.name == "n\u00e9t"

    def test_plugin_keeps_unknown_keys_and_has_json_bytes(self) -> None:
        plugin = {"type": "bridge", "bridge": "cni0", "nested": {"a": [1, None, "x"]}}
        lst = conf_list_from_bytes(dump({"name": "n", "plugins": [plugin]}))
        assert lst.plugins[0].raw == plugin
        assert json.loads(lst.plugins[0].bytes) == plugin

    @pytest.mark.parametrize("data", [b"[]", b"null", b'"x"', b"3"])
    def test_not_an_object(self, data: bytes) -> None:
        raises_config(conf_list_from_bytes, data, match="must be a JSON object")

    def test_not_json(self) -> None:
        raises_config(conf_list_from_bytes, b'{"name": ', match="configuration list: invalid JSON")

    def test_name_required(self) -> None:
        raises_config(conf_list_from_bytes, dump({"plugins": [{"type": "a"}]}), match="'name'")

    @pytest.mark.parametrize("value", [None, 1, ["n"], {"n": 1}, True])
    def test_name_must_be_string(self, value: Any) -> None:
        raises_config(conf_list_from_bytes, plist(name=value), match="'name' must be a string")

    @pytest.mark.parametrize("value", [None, 1, ["1.0.0"], True])
    def test_cni_version_must_be_string(self, value: Any) -> None:
        raises_config(
            conf_list_from_bytes, plist(cniVersion=value), match="'cniVersion' must be a string"
        )

    @pytest.mark.parametrize(
        ("key", "attr"),
        [
            ("disableCheck", "disable_check"),
            ("disableGC", "disable_gc"),
            ("loadOnlyInlinedPlugins", "load_only_inlined_plugins"),
        ],
    )
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (True, True),
            (False, False),
            ("true", True),
            ("FALSE", False),
            ("True", True),
            ("fAlSe", False),
        ],
    )
    def test_flags(self, key: str, attr: str, value: Any, expected: bool) -> None:
        lst = conf_list_from_bytes(plist(**{key: value}))
        assert getattr(lst, attr) is expected

    @pytest.mark.parametrize("key", ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"])
    def test_flags_absent_are_false(self, key: str) -> None:
        lst = conf_list_from_bytes(plist())
        assert not (lst.disable_check or lst.disable_gc or lst.load_only_inlined_plugins)

    @pytest.mark.parametrize("key", ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"])
    @pytest.mark.parametrize("value", ["yes", "1", "", " true", 1, 0, None, [], {}])
    def test_flags_invalid_name_key_and_value(self, key: str, value: Any) -> None:
        err = raises_config(conf_list_from_bytes, plist(**{key: value}))
        assert key in err.msg
        assert repr(value) in err.msg

    def test_no_plugins_key_with_load_only_inlined(self) -> None:
        data = dump({"name": "n", "loadOnlyInlinedPlugins": True})
        err = raises_config(conf_list_from_bytes, data)
        assert "loadOnlyInlinedPlugins" in err.msg and "plugins" in err.msg

    def test_no_plugins_key_gives_no_inline_plugins(self) -> None:
        assert conf_list_from_bytes(b'{"name": "n"}').plugins == ()

    @pytest.mark.parametrize("value", [None, {"type": "a"}, "bridge", 1])
    def test_plugins_must_be_list(self, value: Any) -> None:
        raises_config(conf_list_from_bytes, plist(plugins=value), match="'plugins' must be a list")

    def test_plugins_must_not_be_empty(self) -> None:
        raises_config(conf_list_from_bytes, plist(plugins=[]), match="no plugins")

    @pytest.mark.parametrize("value", ["bridge", None, 1, [{"type": "a"}]])
    def test_plugin_not_object_names_index(self, value: Any) -> None:
        err = raises_config(conf_list_from_bytes, plist(plugins=[{"type": "a"}, value]))
        assert "plugin config 1" in err.msg and "object" in err.msg

    def test_plugin_error_names_index_and_field(self) -> None:
        err = raises_config(
            conf_list_from_bytes,
            plist(plugins=[{"type": "a"}, {"type": "b"}, {"type": "c", "dns": {"domain": 5}}]),
        )
        assert "plugin config 2" in err.msg and "domain" in err.msg
        err = raises_config(conf_list_from_bytes, plist(plugins=[{"type": "a"}, {}]))
        assert "plugin config 1" in err.msg and "missing 'type'" in err.msg
        err = raises_config(
            conf_list_from_bytes,
            plist(plugins=[{"type": "a", "capabilities": {"mac": "yes"}}]),
        )
        assert "plugin config 0" in err.msg and "mac" in err.msg

    def test_frozen_and_hashable(self) -> None:
        lst = conf_list_from_bytes(plist())
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            lst.name = "x"  # type: ignore[misc]
        assert hash(lst) == hash(conf_list_from_bytes(plist()))


# =========================================================================== §2.3 files


class TestConfFromFile:
    def test_reads(self, tmp_path: Path) -> None:
        data = b'{"type": "bridge", "name": "n"}\n'
        path = write(tmp_path / "a.conf", data)
        conf = conf_from_file(path)
        assert conf.bytes == data and conf.name == "n"
        assert conf_from_file(str(path)) == conf

    def test_missing_file_names_it(self, tmp_path: Path) -> None:
        path = tmp_path / "nope.conf"
        err = raises_config(conf_from_file, path)
        assert str(path) in err.msg

    def test_directory_names_it(self, tmp_path: Path) -> None:
        err = raises_config(conf_from_file, tmp_path)
        assert str(tmp_path) in err.msg

    def test_parse_error_names_file(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conf", {"name": "n"})
        err = raises_config(conf_from_file, path)
        assert str(path) in err.msg and "missing 'type'" in err.msg


class TestConfListFromFile:
    def test_reads(self, tmp_path: Path) -> None:
        data = plist()
        path = write(tmp_path / "a.conflist", data)
        lst = conf_list_from_file(path)
        assert lst.bytes == data and lst.name == "net"

    def test_missing_file_names_it(self, tmp_path: Path) -> None:
        err = raises_config(conf_list_from_file, tmp_path / "x.conflist")
        assert str(tmp_path / "x.conflist") in err.msg

    def test_parse_error_names_file(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", b"{nope")
        err = raises_config(conf_list_from_file, path)
        assert str(path) in err.msg

    def test_drop_in_plugins_appended_sorted(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", plist(name="net"))
        write(tmp_path / "net" / "20-b.conf", {"type": "second"})
        write(tmp_path / "net" / "10-a.conf", {"type": "first"})
        write(tmp_path / "net" / "30-c.json", {"type": "ignored-json"})
        write(tmp_path / "net" / "40-d.conflist", {"type": "ignored-conflist"})
        (tmp_path / "net" / "50-dir.conf").mkdir()
        lst = conf_list_from_file(path)
        assert [p.type for p in lst.plugins] == ["bridge", "first", "second"]
        assert lst.plugins[1].bytes == (tmp_path / "net" / "10-a.conf").read_bytes()
        assert lst.bytes == path.read_bytes()

    def test_drop_in_only(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", {"name": "net", "cniVersion": "1.1.0"})
        write(tmp_path / "net" / "p.conf", {"type": "dropped"})
        lst = conf_list_from_file(path)
        assert [p.type for p in lst.plugins] == ["dropped"]

    def test_missing_subdirectory_adds_nothing(self, tmp_path: Path) -> None:
        lst = conf_list_from_file(write(tmp_path / "a.conflist", plist()))
        assert [p.type for p in lst.plugins] == ["bridge"]

    def test_subdirectory_of_other_network_ignored(self, tmp_path: Path) -> None:
        write(tmp_path / "other" / "p.conf", {"type": "x"})
        lst = conf_list_from_file(write(tmp_path / "a.conflist", plist()))
        assert [p.type for p in lst.plugins] == ["bridge"]

    def test_load_only_inlined_ignores_directory(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", plist(loadOnlyInlinedPlugins="true"))
        write(tmp_path / "net" / "p.conf", {"type": "dropped"})
        assert [p.type for p in conf_list_from_file(path).plugins] == ["bridge"]

    def test_no_plugins_at_all(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", {"name": "net"})
        err = raises_config(conf_list_from_file, path)
        assert "no plugin configs found" in err.msg and str(path) in err.msg

    def test_empty_subdirectory_no_plugins(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", {"name": "net"})
        (tmp_path / "net").mkdir()
        raises_config(conf_list_from_file, path, match="no plugin configs found")

    def test_bad_drop_in_names_file(self, tmp_path: Path) -> None:
        path = write(tmp_path / "a.conflist", plist())
        bad = write(tmp_path / "net" / "p.conf", {"name": "x"})
        err = raises_config(conf_list_from_file, path)
        assert str(bad) in err.msg and "missing 'type'" in err.msg

    @pytest.mark.parametrize("name", ["", ".", "..", "../outside", "a/b"])
    def test_unsafe_names_never_leave_the_directory(self, tmp_path: Path, name: str) -> None:
        # An empty name would otherwise make the configuration directory itself
        # the drop-in directory; "../x" would load plugins from elsewhere.
        conf_dir = tmp_path / "netd"
        path = write(conf_dir / "a.conflist", plist(name=name))
        write(conf_dir / "stray.conf", {"type": "stray"})
        write(tmp_path / "outside" / "p.conf", {"type": "outside"})
        write(conf_dir / "a" / "b" / "p.conf", {"type": "nested"})
        assert [p.type for p in conf_list_from_file(path).plugins] == ["bridge"]

    def test_relative_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        write(tmp_path / "a.conflist", {"name": "net"})
        write(tmp_path / "net" / "p.conf", {"type": "dropped"})
        monkeypatch.chdir(tmp_path)
        assert [p.type for p in conf_list_from_file("a.conflist").plugins] == ["dropped"]


class TestConfFiles:
    def test_filters_and_sorts(self, tmp_path: Path) -> None:
        for name in [
            "b.conf",
            "a.json",
            "c.conflist",
            "d.CONF",
            "e.conf.bak",
            "noext",
            ".conf",
            "f.conf",
        ]:
            write(tmp_path / name, "{}")
        (tmp_path / "dir.conf").mkdir()
        got = conf_files(tmp_path, [".conf", ".json"])
        assert got == [str(tmp_path / n) for n in [".conf", "a.json", "b.conf", "f.conf"]]

    def test_extensions_with_or_without_dot(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conflist", "{}")
        assert conf_files(tmp_path, ["conflist"]) == conf_files(tmp_path, [".conflist"])
        assert conf_files(tmp_path, ["conflist"]) == [str(tmp_path / "a.conflist")]

    def test_case_sensitive(self, tmp_path: Path) -> None:
        write(tmp_path / "a.Conf", "{}")
        assert conf_files(tmp_path, [".conf"]) == []

    def test_symlinks(self, tmp_path: Path) -> None:
        target = write(tmp_path / "real" / "x.txt", "{}")
        os.symlink(target, tmp_path / "link.conf")
        os.symlink(tmp_path / "real", tmp_path / "dirlink.conf")
        os.symlink(tmp_path / "missing", tmp_path / "broken.conf")
        assert conf_files(tmp_path, [".conf"]) == [str(tmp_path / "link.conf")]

    def test_missing_directory(self, tmp_path: Path) -> None:
        assert conf_files(tmp_path / "nope", [".conf"]) == []

    def test_not_a_directory(self, tmp_path: Path) -> None:
        path = write(tmp_path / "file", "x")
        err = raises_config(conf_files, path, [".conf"])
        assert str(path) in err.msg


class TestLoadConf:
    def test_first_sorted_match(self, tmp_path: Path) -> None:
        write(tmp_path / "20.conf", {"name": "net", "type": "second"})
        write(tmp_path / "10.json", {"name": "net", "type": "first"})
        write(tmp_path / "05.conf", {"name": "other", "type": "zero"})
        assert load_conf(tmp_path, "net").type == "first"
        assert load_conf(str(tmp_path), "other").type == "zero"

    def test_no_files(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conflist", plist())
        with pytest.raises(NoConfigsFoundError) as info:
            load_conf(tmp_path, "net")
        assert info.value.dir == str(tmp_path) and str(tmp_path) in str(info.value)

    def test_missing_directory(self, tmp_path: Path) -> None:
        with pytest.raises(NoConfigsFoundError):
            load_conf(tmp_path / "nope", "net")

    def test_no_match(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conf", {"name": "other", "type": "x"})
        with pytest.raises(NotFoundError) as info:
            load_conf(tmp_path, "net")
        assert (info.value.dir, info.value.name) == (str(tmp_path), "net")
        assert '"net"' in str(info.value) and info.value.details == ""

    def test_bad_file_does_not_hide_match(self, tmp_path: Path) -> None:
        write(tmp_path / "00.conf", b"{net")
        write(tmp_path / "10.conf", {"name": "net", "type": "x"})
        assert load_conf(tmp_path, "net").type == "x"


class TestLoadConfList:
    def test_first_sorted_conflist(self, tmp_path: Path) -> None:
        write(tmp_path / "20.conflist", plist(plugins=[{"type": "second"}]))
        write(tmp_path / "10.conflist", plist(plugins=[{"type": "first"}]))
        write(tmp_path / "00.conflist", plist(name="other"))
        lst = load_conf_list(tmp_path, "net")
        assert [p.type for p in lst.plugins] == ["first"]
        assert lst.bytes == (tmp_path / "10.conflist").read_bytes()

    def test_conflist_preferred_over_conf(self, tmp_path: Path) -> None:
        write(tmp_path / "00.conf", {"name": "net", "type": "single"})
        write(tmp_path / "99.conflist", plist(plugins=[{"type": "listed"}]))
        assert [p.type for p in load_conf_list(tmp_path, "net").plugins] == ["listed"]

    def test_drop_in_directory_applied(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conflist", {"name": "net", "cniVersion": "1.1.0"})
        write(tmp_path / "net" / "1.conf", {"type": "dropped"})
        assert [p.type for p in load_conf_list(tmp_path, "net").plugins] == ["dropped"]

    def test_falls_back_to_conf(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conflist", plist(name="other"))
        write(tmp_path / "b.json", {"name": "net", "cniVersion": "0.3.1", "type": "single"})
        lst = load_conf_list(tmp_path, "net")
        assert (lst.name, lst.cni_version) == ("net", "0.3.1")
        assert [p.type for p in lst.plugins] == ["single"]
        assert not (lst.disable_check or lst.disable_gc or lst.load_only_inlined_plugins)

    def test_only_conflists_no_match_is_not_found(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conflist", plist(name="other"))
        with pytest.raises(NotFoundError) as info:
            load_conf_list(tmp_path, "net")
        assert (info.value.dir, info.value.name) == (str(tmp_path), "net")

    def test_conf_files_no_match_is_not_found(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conf", {"name": "other", "type": "x"})
        with pytest.raises(NotFoundError):
            load_conf_list(tmp_path, "net")

    def test_missing_directory(self, tmp_path: Path) -> None:
        with pytest.raises(NoConfigsFoundError) as info:
            load_conf_list(tmp_path / "nope", "net")
        assert info.value.dir == str(tmp_path / "nope")

    def test_empty_directory(self, tmp_path: Path) -> None:
        write(tmp_path / "README", "hello")
        with pytest.raises(NoConfigsFoundError):
            load_conf_list(tmp_path, "net")

    def test_pathlike_and_str(self, tmp_path: Path) -> None:
        write(tmp_path / "a.conflist", plist())
        assert load_conf_list(tmp_path, "net") == load_conf_list(str(tmp_path), "net")

    # ---- [beyond]: a broken file does not hide a valid network

    def test_bad_file_before_match_is_skipped_and_logged(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        bad = write(tmp_path / "00-bad.conflist", b'{"name": "net", "plugins": [')
        write(tmp_path / "10-good.conflist", plist())
        with caplog.at_level(logging.WARNING, logger="libcni"):
            lst = load_conf_list(tmp_path, "net")
        assert lst.bytes == (tmp_path / "10-good.conflist").read_bytes()
        assert any(str(bad) in r.getMessage() for r in caplog.records)
        assert all(r.name == "libcni" for r in caplog.records)

    def test_unrelated_bad_file_does_not_hide(self, tmp_path: Path) -> None:
        write(tmp_path / "00-bad.conflist", b"\xff\xfe garbage")
        write(tmp_path / "01-bad.conflist", {"name": "x", "plugins": "nope"})
        write(tmp_path / "10-good.conflist", plist())
        assert load_conf_list(tmp_path, "net").name == "net"

    def test_list_without_plugins_does_not_hide(self, tmp_path: Path) -> None:
        write(tmp_path / "00.conflist", {"name": "net"})
        write(tmp_path / "10.conflist", plist())
        assert [p.type for p in load_conf_list(tmp_path, "net").plugins] == ["bridge"]

    def test_bad_conf_in_fallback_does_not_hide(self, tmp_path: Path) -> None:
        write(tmp_path / "00.conf", {"name": "net", "type": 7})
        write(tmp_path / "10.conf", {"name": "net", "type": "good"})
        assert load_conf_list(tmp_path, "net").plugins[0].type == "good"

    def test_not_found_details_name_every_bad_file(self, tmp_path: Path) -> None:
        bad1 = write(tmp_path / "00.conflist", b'{"name": "net", "plugins": [')
        bad2 = write(tmp_path / "01.conflist", b"NaN")  # does not mention the name
        bad3 = write(tmp_path / "02.conflist", {"name": "net"})  # no plugins
        bad4 = write(tmp_path / "03.conf", {"name": "x", "type": ""})
        write(tmp_path / "05.conflist", plist(name="other"))
        with pytest.raises(NotFoundError) as info:
            load_conf_list(tmp_path, "net")
        details = info.value.details
        for bad in (bad1, bad2, bad3, bad4):
            assert str(bad) in details
        assert "invalid JSON" in details
        assert "no plugin configs found" in details
        assert "missing 'type'" in details
        assert str(tmp_path / "05.conflist") not in details
        assert details in str(info.value)

    def test_not_found_details_only_conflists(self, tmp_path: Path) -> None:
        bad = write(tmp_path / "00.conflist", b"[]")
        with pytest.raises(NotFoundError) as info:
            load_conf_list(tmp_path, "net")
        assert str(bad) in info.value.details and "JSON object" in info.value.details

    def test_dangling_symlink_is_not_a_config_file(self, tmp_path: Path) -> None:
        os.symlink(tmp_path / "dangling", tmp_path / "00.conflist")
        write(tmp_path / "10.conflist", plist())
        assert load_conf_list(tmp_path, "net").name == "net"

    def test_unreadable_file_does_not_hide(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        unreadable = write(tmp_path / "00.conflist", plist())
        write(tmp_path / "10.conflist", plist(plugins=[{"type": "second"}]))
        real_open = open

        def fake_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            if str(file) == str(unreadable):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr("builtins.open", fake_open)
        assert load_conf_list(tmp_path, "net").plugins[0].type == "second"
        (tmp_path / "10.conflist").unlink()
        with pytest.raises(NotFoundError) as info:
            load_conf_list(tmp_path, "net")
        assert str(unreadable) in info.value.details
        assert "Permission denied" in info.value.details

    def test_escaped_name_is_found(self, tmp_path: Path) -> None:
        # The pre-check must not skip a file that spells the name with escapes.
        write(tmp_path / "a.conflist", b'{"name": "\\u006eet", "plugins": [{"type": "a"}]}')
        assert load_conf_list(tmp_path, "net").plugins[0].type == "a"

    def test_many_files(self, tmp_path: Path) -> None:
        for i in range(300):
            write(tmp_path / f"{i:04d}.conflist", plist(name=f"net{i}"))
        assert load_conf_list(tmp_path, "net299").name == "net299"
        assert load_conf_list(tmp_path, "net7").name == "net7"
        with pytest.raises(NotFoundError):
            load_conf_list(tmp_path, "net300")


# =========================================================================== transforms


class TestConfListFromConf:
    def test_wraps(self) -> None:
        conf = conf_from_bytes(b'{"name": "n", "cniVersion": "0.4.0", "type": "a", "k": 1}')
        lst = conf_list_from_conf(conf)
        assert isinstance(lst, NetworkConfigList)
        assert (lst.name, lst.cni_version) == ("n", "0.4.0")
        assert lst.plugins == (conf,)
        assert not (lst.disable_check or lst.disable_gc or lst.load_only_inlined_plugins)
        assert json.loads(lst.bytes) == {
            "cniVersion": "0.4.0",
            "name": "n",
            "plugins": [{"name": "n", "cniVersion": "0.4.0", "type": "a", "k": 1}],
        }
        assert conf_list_from_bytes(lst.bytes).plugins[0].raw == conf.raw


class TestInjectConf:
    def test_sets_and_replaces(self) -> None:
        conf = conf_from_bytes(b'{"type": "a", "name": "old", "keep": [1]}')
        new = inject_conf(conf, {"name": "new", "runtimeConfig": {"mac": "00:11"}})
        assert new.name == "new"
        assert new.raw == {
            "type": "a",
            "name": "new",
            "keep": [1],
            "runtimeConfig": {"mac": "00:11"},
        }
        assert json.loads(new.bytes) == new.raw
        assert conf.name == "old" and "runtimeConfig" not in conf.raw

    def test_empty_values(self) -> None:
        conf = conf_from_bytes(b'{"type": "a"}')
        assert inject_conf(conf, {}).raw == conf.raw

    def test_empty_key(self) -> None:
        raises_config(inject_conf, conf_from_bytes(b'{"type": "a"}'), {"": 1}, match="empty")

    def test_none_value_names_key(self) -> None:
        err = raises_config(inject_conf, conf_from_bytes(b'{"type": "a"}'), {"prevResult": None})
        assert "prevResult" in err.msg

    @pytest.mark.parametrize("value", [object(), float("nan"), {1j: 1}])
    def test_unserialisable_value(self, value: Any) -> None:
        raises_config(inject_conf, conf_from_bytes(b'{"type": "a"}'), {"x": value})

    def test_result_is_validated(self) -> None:
        conf = conf_from_bytes(b'{"type": "a"}')
        raises_config(inject_conf, conf, {"type": ""}, match="missing 'type'")
        raises_config(inject_conf, conf, {"capabilities": {"mac": 1}}, match="mac")


# =========================================================================== spec examples


def _clean_jsonc(text: str) -> str:
    """Strip // comments (outside strings), trailing commas, and the spec's missing commas."""
    out = []
    in_str = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    cleaned = "".join(out)
    cleaned = re.sub(r",(\s*[}\]])", r"\1", cleaned)
    # One example lacks a comma between a closing brace and the next key.
    return re.sub(r'([}\]"])(\s*\n\s*")', r"\1,\2", cleaned)


def _spec_examples() -> list[tuple[str, int, Any]]:
    """Every ```json/```jsonc block of the spec texts, decoded (``None`` if it cannot be).

    Blocks that elide parts (``...``) do not decode; no configuration list may be one.
    """
    found = []
    for path in sorted(SPEC_DIR.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"```jsonc?\n(.*?)```", text, re.S):
            line = text.count("\n", 0, m.start()) + 1
            try:
                obj = json.loads(_clean_jsonc(m.group(1)))
            except ValueError:
                assert '"plugins"' not in m.group(1), f"{path.name}:{line} does not decode"
                obj = None
            found.append((path.name, line, obj))
    return [(f, n, o) for f, n, o in found if isinstance(o, dict)]


class TestSpecExamples:
    def test_example_configuration_lists_parse(self) -> None:
        lists = [(f, n, o) for f, n, o in _spec_examples() if "plugins" in o]
        assert len(lists) >= 2
        for fname, line, obj in lists:
            data = json.dumps(obj, indent=2).encode()
            lst = conf_list_from_bytes(data)
            assert lst.name == obj["name"], (fname, line)
            assert lst.cni_version == obj["cniVersion"]
            assert [p.raw for p in lst.plugins] == obj["plugins"]
            assert lst.plugins[0].ipam is not None and lst.plugins[0].dns is not None

    def test_1_0_0_example_capabilities(self) -> None:
        lists = [o for f, _, o in _spec_examples() if "plugins" in o and "1.0.0" in f]
        assert lists
        lst = conf_list_from_bytes(json.dumps(lists[0]))
        assert [dict(p.capabilities) for p in lst.plugins] == [
            {},
            {"mac": True},
            {"portMappings": True},
        ]

    def test_example_plugin_configurations_parse(self) -> None:
        confs = [(f, n, o) for f, n, o in _spec_examples() if "type" in o and "plugins" not in o]
        assert len(confs) >= 5
        for fname, line, obj in confs:
            conf = conf_from_bytes(json.dumps(obj))
            assert conf.type == obj["type"], (fname, line)
            assert conf.raw == obj
