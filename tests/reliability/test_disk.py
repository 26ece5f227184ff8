"""Full, read-only and unwritable cache directories (behaviour.md §7).

A full file system (no blocks, or no inodes), a read-only one and a
directory the runtime may not write give a ``CacheError`` naming the
directory; the entries already there stay intact and readable, no temporary
file is left behind, and DEL (which needs no free space) still works. The
full and read-only cases mount a tiny tmpfs and need root; the unwritable one
runs the runtime without ``CAP_DAC_OVERRIDE`` when the tests run as root.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import TESTPLUGIN, python_env

from libcni import CacheError, RuntimeConf

from .conftest import Env, fill, remount, tiny_tmpfs, without_dac_override

RESULT = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}], "extra": "x" * 300}


def _rt(cid: str) -> RuntimeConf:
    return RuntimeConf(cid, f"/var/run/netns/{cid}", "eth0")


def _fill_inodes(directory: Path) -> None:
    """Create empty files in ``directory`` until the file system has no inode left."""
    n = 0
    with contextlib.suppress(OSError):
        while True:
            (directory / f"inode{n}").touch()
            n += 1


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory)) if directory.exists() else []


@pytest.fixture
def tmpfs_env(tmp_path: Path) -> Iterator[tuple[Env, Path]]:
    with tiny_tmpfs(size="64k", inodes=64) as mnt:
        yield Env(tmp_path, cache=mnt / "cni"), mnt


@pytest.mark.parametrize("exhaust", ["blocks", "inodes"])
def test_full_disk_add_fails_with_cache_error_entries_survive_and_del_works(
    tmpfs_env: tuple[Env, Path], exhaust: str
) -> None:
    env, mnt = tmpfs_env
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}))
    env.cni.add_network_list(net, _rt("old1"))
    env.cni.add_network_list(net, _rt("old2"))
    before = {p.name: p.read_bytes() for p in env.results_dir().iterdir()}
    assert len(before) == 2

    if exhaust == "blocks":
        fill(mnt)
    else:
        _fill_inodes(mnt)

    # A new attachment, and a new version of an existing one: both refused.
    for cid in ("new1", "old1"):
        with pytest.raises(CacheError) as info:
            env.cni.add_network_list(net, _rt(cid))
        assert str(env.cache) in str(info.value), str(info.value)
        assert "No space left" in str(info.value), str(info.value)

    after = {p.name: p.read_bytes() for p in env.results_dir().iterdir()}
    assert after == before, "entries changed, or a temporary file was left behind"
    for cid in ("old1", "old2"):
        cached = env.cni.get_network_list_cached_result(net, _rt(cid))
        assert cached is not None and cached.to_dict()["ips"] == RESULT["ips"]
    listed = {a.container_id for a in env.cni.get_cached_attachments()}
    assert listed == {"old1", "old2"}

    # DEL needs no free space: the old attachments, and the one whose ADD failed.
    for cid in ("old1", "old2", "new1"):
        env.cni.del_network_list(net, _rt(cid))
    assert _files(env.results_dir()) == []
    dels = [c for c in env.calls() if c.get("command") == "DEL"]
    assert [c["env"]["CNI_CONTAINERID"] for c in dels] == ["old1", "old2", "new1"]
    assert dels[0]["stdin"]["prevResult"]["ips"] == RESULT["ips"]


def test_read_only_cache_gives_cache_error_naming_the_directory(
    tmpfs_env: tuple[Env, Path],
) -> None:
    env, mnt = tmpfs_env
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}))
    env.cni.add_network_list(net, _rt("old1"))
    entry = env.entry_path(cid="old1")
    before = entry.read_bytes()

    remount(mnt, "ro")
    try:
        for cid in ("new1", "old1"):
            with pytest.raises(CacheError) as info:
                env.cni.add_network_list(net, _rt(cid))
            assert str(env.cache) in str(info.value), str(info.value)
            assert "Read-only" in str(info.value), str(info.value)
        assert entry.read_bytes() == before
        assert env.cni.get_network_list_cached_result(net, _rt("old1")) is not None
        assert [a.container_id for a in env.cni.get_cached_attachments()] == ["old1"]
        # DEL cannot forget the entry: it says so, and the entry stays for a retry.
        with pytest.raises(CacheError) as info:
            env.cni.del_network_list(net, _rt("old1"))
        assert str(env.cache) in str(info.value), str(info.value)
        assert entry.read_bytes() == before
    finally:
        remount(mnt, "rw")
    env.cni.del_network_list(net, _rt("old1"))
    assert not entry.exists()


def test_read_only_empty_cache_gives_cache_error_naming_the_directory(
    tmpfs_env: tuple[Env, Path],
) -> None:
    env, mnt = tmpfs_env
    net = env.conflist(env.plugin("p1"))
    remount(mnt, "ro")
    try:
        with pytest.raises(CacheError) as info:
            env.cni.add_network_list(net, _rt("new1"))
        assert str(env.cache) in str(info.value), str(info.value)
        assert env.cni.get_cached_attachments() == []
        assert env.cni.get_network_list_cached_result(net, _rt("new1")) is None
    finally:
        remount(mnt, "rw")


_AS_USER = r"""
import json, sys
import libcni
from libcni import CNIConfig, RuntimeConf
plugins, cache = sys.argv[1], sys.argv[2]
cni = CNIConfig([plugins], cache_dir=cache)
net = libcni.conf_list_from_bytes(
    b'{"cniVersion":"1.0.0","name":"testnet","plugins":[{"type":"p1"}]}')
out = {}
try:
    cni.add_network_list(net, RuntimeConf("ctr1", "", "eth0"))
    out["add"] = ["ok", ""]
except Exception as e:
    out["add"] = [type(e).__name__, str(e)]
try:
    out["list"] = len(cni.get_cached_attachments())
except Exception as e:
    out["list"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


@pytest.mark.parametrize("unwritable", ["cache", "results"])
def test_unwritable_cache_directory_gives_cache_error_naming_it(unwritable: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="libcni-rel-"))
    try:
        os.chmod(base, 0o755)
        (base / "bin").mkdir(mode=0o755)
        shutil.copy2(TESTPLUGIN, base / "bin" / "p1")
        cache = base / "cache"
        cache.mkdir()
        target = cache if unwritable == "cache" else cache / "results"
        if unwritable == "results":
            cache.chmod(0o755)
            target.mkdir()
        cmd = without_dac_override([sys.executable, "-c", _AS_USER, str(base / "bin"), str(cache)])
        target.chmod(0o500)
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=python_env(),
            timeout=60,
            check=False,
            cwd=base,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        kind, msg = out["add"]
        assert kind == "CacheError", out
        assert str(target) in msg, msg
        assert "Permission denied" in msg, msg
        # An unwritable cache directory stops ADD at its write-ahead record, before any
        # plugin runs; an unwritable results/ after its plugins ran: the record stays,
        # listed as in progress, for a DEL to find.
        assert out["list"] == (0 if unwritable == "cache" else 1), out
    finally:
        for p in (base / "cache", base / "cache" / "results"):
            with contextlib.suppress(OSError):
                p.chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)
