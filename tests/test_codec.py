"""The one converter (libcni/_codec.py): strict primitives, declared names and
omission rules, unknown keys kept, and the path-naming error messages, across
results, cache entries, VERSION replies and plugin error objects."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from libcni.cache import CacheEntry, CorruptEntryError
from libcni.errors import DecodeError, VersionError
from libcni.invoke._errobj import decode_error_object
from libcni.request import VERSION_REQUEST
from libcni.types import result_from_dict
from libcni.version import CURRENT, plugin_info_from_bytes


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"ips": [{"address": "10.1.2.3"}]}, "ips[0].address: invalid CIDR '10.1.2.3'"),
        (
            {"ips": [{"address": "10.0.0.1/8", "interface": "0"}]},
            "ips[0].interface: must be an integer, not '0'",
        ),
        (
            {"ips": [{"address": "10.0.0.1/8", "interface": True}]},
            "ips[0].interface: must be an integer, not True",
        ),
        (
            {"interfaces": [{"name": "e", "mtu": 1500.0}]},
            "interfaces[0].mtu: must be an integer, not 1500.0",
        ),
        ({"ips": "10.0.0.1/8"}, "ips: must be a list, not '10.0.0.1/8'"),
        ({"dns": {"search": "example.com"}}, "dns.search: must be a list, not 'example.com'"),
        ({"interfaces": [{"socketPath": 5}]}, "interfaces[0].socketPath: must be a string, not 5"),
        (
            {"routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": 6}]},
            "routes[1].gw: must be a string (an IP address), not 6",
        ),
    ],
)
def test_result_fields_are_strict_and_named_by_json_path(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(DecodeError) as info:
        result_from_dict({"cniVersion": "1.1.0", **doc})
    assert message in str(info.value)


def test_names_and_omission_rules_are_the_declared_ones() -> None:
    doc = {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "", "socketPath": "/s", "pciID": "0000:00:01.0", "mtu": 0}],
        "ips": [{"address": "10.0.0.2/24", "interface": 0}],
        "dns": {},
    }
    out = result_from_dict(doc).to_dict()
    # name always written, mtu 0 and interface 0 kept, empty dns omitted in 1.x
    assert out == {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "", "mtu": 0, "socketPath": "/s", "pciID": "0000:00:01.0"}],
        "ips": [{"address": "10.0.0.2/24", "interface": 0}],
    }
    # dns always written in 0.x
    assert result_from_dict(doc).as_version("0.4.0").to_dict()["dns"] == {}


def test_unknown_keys_kept_at_every_level_through_a_round_trip_and_a_conversion() -> None:
    doc = {
        "cniVersion": "1.0.0",
        "top": [1],
        "interfaces": [{"name": "eth0", "i": {"a": None}}],
        "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "p": "q"}],
        "routes": [{"dst": "0.0.0.0/0", "r": 1}],
        "dns": {"nameservers": ["10.0.0.1"], "d": True},
    }
    result = result_from_dict(doc)
    assert result.to_dict() == doc
    back = result.as_version("0.4.0").as_version("1.0.0").to_dict()
    assert back == doc


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("containerId", 5, "field 'containerId' must be a string, not 5"),
        ("cniArgs", "K=V", "field 'cniArgs' must be a list"),
        ("cniArgs", [["K", 1]], "cniArgs[0]"),
        ("config", "%%%", "field 'config' is not valid standard base64"),
        ("result", [1], "field 'result' must be an object"),
    ],
)
def test_cache_entry_fields_are_strict(field: str, value: Any, message: str) -> None:
    entry = CacheEntry("c1", "net", "eth0", b"{}").to_dict()
    entry[field] = value
    with pytest.raises(CorruptEntryError) as info:
        CacheEntry.from_json(json.dumps(entry), source="f")
    assert message in str(info.value)


def test_version_reply_is_strict() -> None:
    with pytest.raises(VersionError, match="supportedVersions"):
        plugin_info_from_bytes(b'{"cniVersion":"1.0.0","supportedVersions":"1.0.0"}')
    with pytest.raises(VersionError, match=r"supportedVersions\[1\]"):
        plugin_info_from_bytes(b'{"cniVersion":"1.0.0","supportedVersions":["1.0.0",1]}')


def test_version_request_is_the_current_version() -> None:
    assert json.loads(VERSION_REQUEST) == {"cniVersion": CURRENT}


@pytest.mark.parametrize(
    "stdout",
    [
        b'{"code": 7, "msg": "x", "details": NaN}',
        b'{"code": 7, "msg": "x", "other": Infinity}',
        b'{"code": 1e400, "msg": "x"}',
    ],
)
def test_error_object_goes_through_the_strict_json_decoder(stdout: bytes) -> None:
    assert isinstance(decode_error_object(stdout), str)


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        (b'{"code": true, "msg": "x"}', "code: must be an integer, not True"),
        (b'{"code": "7", "msg": "x"}', "code: must be an integer, not '7'"),
        (b'{"msg": "x"}', "code: missing"),
        (b'{"code": 7, "msg": "x", "details": 3}', "details: must be a string, not 3"),
    ],
)
def test_error_object_fields_are_strict(stdout: bytes, reason: str) -> None:
    assert decode_error_object(stdout) == reason


def test_valid_error_object() -> None:
    assert decode_error_object(b'{"code":11,"msg":"m","details":null}') == (11, "m", "")


def test_import_libcni_does_not_import_cattrs() -> None:
    code = "import sys, libcni; print('cattrs' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
