"""The VERSION probe against plugins built with an old skel (behaviour.md §4.8).

Old skels (libcni 0.x) refuse every command, VERSION included, unless
``CNI_NETNS``, ``CNI_IFNAME`` and ``CNI_PATH`` are set; Go's libcni sets them
to ``dummy`` for the probe. The plugins here are real shell scripts that
behave like those binaries.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import libcni
from libcni import CNIConfig
from libcni.aio import AsyncCNIConfig

# The check of an old skel (pkg/skel, before 0.6): every variable is required
# for every command; then the plugin's own dispatch.
_OLD_SKEL = """#!/bin/sh
cat >/dev/null
for var in CNI_NETNS CNI_IFNAME CNI_PATH; do
    eval "value=\\${$var}"
    if [ -z "$value" ]; then
        echo '{"code":100,"msg":"required env variables missing","details":"'$var' env variable missing"}'
        exit 1
    fi
done
case "$CNI_COMMAND" in
VERSION) %s ;;
*) echo '{"code":4,"msg":"unknown CNI_COMMAND: '$CNI_COMMAND'"}'; exit 1 ;;
esac
"""
# A 0.2.0-era plugin answers VERSION...
_ANSWERS = """echo '{"cniVersion":"0.2.0","supportedVersions":["0.1.0","0.2.0"]}'"""
# ...an older one does not know the command at all: a 0.1.0 plugin.
_UNKNOWN = """echo '{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}'; exit 1"""


def _plugin(tmp_path: Path, name: str, dispatch: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(_OLD_SKEL % dispatch)
    path.chmod(0o755)
    return bindir


def _list(version: str, *types: str) -> libcni.NetworkConfigList:
    obj = {"cniVersion": version, "name": "old", "plugins": [{"type": t} for t in types]}
    return libcni.conf_list_from_bytes(json.dumps(obj))


def test_old_skel_plugin_answers_the_version_probe(tmp_path: Path) -> None:
    cni = CNIConfig([_plugin(tmp_path, "old", _ANSWERS)], cache_dir=tmp_path / "cache")
    info = cni.get_version_info("old")
    assert info.supported_versions == ["0.1.0", "0.2.0"]
    assert cni.validate_network_list(_list("0.2.0", "old")) == []
    with pytest.raises(libcni.VersionError):
        cni.validate_network_list(_list("0.3.1", "old"))
    info = asyncio.run(AsyncCNIConfig([tmp_path / "bin"]).get_version_info("old"))
    assert info.supported_versions == ["0.1.0", "0.2.0"]


def test_old_skel_plugin_without_version_is_a_010_plugin(tmp_path: Path) -> None:
    cni = CNIConfig([_plugin(tmp_path, "older", _UNKNOWN)], cache_dir=tmp_path / "cache")
    assert cni.get_version_info("older").supported_versions == ["0.1.0"]
    assert cni.validate_network_list(_list("0.1.0", "older")) == []
