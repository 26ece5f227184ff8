"""What a Go user looks for: Go libcni v1.3's loader names, the error codes by name, and
every public name visible in ``dir(libcni)`` (the lazily imported ones included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import harness
import pytest

import libcni
import libcni.conf
import libcni.errors
from libcni import Code, ConfigError


def test_v13_loader_names_are_the_same_functions() -> None:
    assert libcni.network_conf_from_bytes is libcni.conf_list_from_bytes
    assert libcni.network_conf_from_file is libcni.conf_list_from_file
    assert libcni.network_plugin_conf_from_bytes is libcni.conf_from_bytes
    assert libcni.load_network_conf is libcni.load_conf_list
    for name in (
        "network_conf_from_bytes",
        "network_conf_from_file",
        "network_plugin_conf_from_bytes",
        "network_plugin_confs_from_files",
        "load_network_conf",
    ):
        assert name in libcni.__all__ and name in libcni.conf.__all__


def test_v13_loaders_on_files(tmp_path: Path) -> None:
    (tmp_path / "10-n.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "a"}]})
    )
    drop = tmp_path / "n"
    drop.mkdir()
    (drop / "20-c.conf").write_text('{"type": "c"}')
    (drop / "10-b.conf").write_text('{"type": "b", "k": 1}')
    (drop / "30-ignored.json").write_text('{"type": "x"}')
    assert [p.type for p in libcni.network_plugin_confs_from_files(tmp_path, "n")] == ["b", "c"]
    assert [p.type for p in libcni.load_network_conf(tmp_path, "n").plugins] == ["a", "b", "c"]
    assert libcni.network_conf_from_file(tmp_path / "10-n.conflist").name == "n"
    assert libcni.network_plugin_confs_from_files(tmp_path, "absent") == []
    assert libcni.network_plugin_confs_from_files(tmp_path / "nowhere", "n") == []


def test_v13_drop_in_loader_refuses_bad_files_and_names(tmp_path: Path) -> None:
    (tmp_path / "n").mkdir()
    bad = tmp_path / "n" / "10-bad.conf"
    bad.write_text('{"no type": true}')
    with pytest.raises(ConfigError, match=str(bad)):
        libcni.network_plugin_confs_from_files(tmp_path, "n")
    for name in ("", ".", "..", "a/b", "../n"):
        with pytest.raises(ConfigError, match="network name"):
            libcni.network_plugin_confs_from_files(tmp_path, name)


def test_code_names_every_well_known_code() -> None:
    assert {c.name: int(c) for c in Code} == {
        "INCOMPATIBLE_CNI_VERSION": 1,
        "UNSUPPORTED_FIELD": 2,
        "UNKNOWN_CONTAINER": 3,
        "INVALID_ENVIRONMENT_VARIABLES": 4,
        "IO_FAILURE": 5,
        "DECODING_FAILURE": 6,
        "INVALID_NETWORK_CONFIG": 7,
        "INVALID_NETNS": 8,
        "TRY_AGAIN_LATER": 11,
        "PLUGIN_NOT_AVAILABLE": 50,
        "PLUGIN_LIMITED_CONNECTIVITY": 51,
        "INTERNAL": 999,
    }
    assert libcni.errors.CODE_INVALID_NETNS == Code.INVALID_NETNS
    assert int(Code.INVALID_NETNS) == 8
    assert libcni.LockTimeoutError("x").code == Code.TRY_AGAIN_LATER
    assert libcni.errors.Code is Code


def test_a_plugin_error_with_code_8_is_named(tmp_path: Path) -> None:
    env = harness.Env(tmp_path, ("p1",))
    net = env.chain({"ADD": {"error": {"code": 8, "msg": "invalid netns"}}})
    with pytest.raises(libcni.PluginError) as info:
        env.cni.add_network_list(net, env.rt)
    assert Code(info.value.code) is Code.INVALID_NETNS


def test_dir_of_libcni_shows_every_public_name_before_it_is_imported() -> None:
    code = (
        "import sys, libcni\n"
        "names = dir(libcni)\n"
        "print(sorted(set(libcni.__all__) - set(names)))\n"
        "print([m for m in ('libcni.manager', 'libcni.capabilities', 'libcni.aio')"
        " if m in sys.modules])\n"
        "print(all(getattr(libcni, n) is not None for n in libcni.__all__))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=harness.python_env()
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "[]", "True"]
    assert "RuntimeConfig" in dir(libcni) and "NetworkManager" in dir(libcni)
