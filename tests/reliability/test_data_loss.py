"""Data never lost: DEL and GC keep every cache entry they cannot use safely (behaviour.md §4.3, §4.6, §7).

A cache entry is the record a runtime needs to DEL a container and release its
addresses. These tests reproduce, for real, what used to lose one: an entry
that cannot be *read* (too many open files under ``RLIMIT_NOFILE``, a file the
runtime may not read without ``CAP_DAC_OVERRIDE``, a real EIO), an unusable or
unconvertible entry with a DEL that fails, two attachments sharing one file
name, another network whose name starts with this one's, a 1 TiB sparse file,
a directory at an entry's path, names that cannot be encoded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _require import unavailable
from harness import python_env

from libcni import (
    AsyncCNIConfig,
    CacheError,
    GCArgs,
    GCAttachment,
    GCError,
    NetworkConfigList,
    PluginError,
    RuntimeConf,
    ValidationError,
    conf_from_bytes,
)
from libcni.cache import CacheEntry, CorruptEntryError, ResultCache

from .conftest import Env, without_dac_override

pytestmark = pytest.mark.env(cls=Env)

RESULT = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]}
FAIL = {"error": {"code": 11, "msg": "try again"}}


def _age(path: Path, seconds: float = 600) -> None:
    """Make ``path`` look last modified ``seconds`` ago (GC leaves fresher files alone)."""
    old = time.time() - seconds
    os.utime(path, (old, old), follow_symlinks=False)


def _added_and_aged(env: Env) -> tuple[NetworkConfigList, Path, bytes]:
    """ADD ``ctr1``; its entry is old enough for GC's clean-up of unreadable entries.

    Returns the network, the entry's path and its bytes; the plugin record
    starts empty.
    """
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}), version="1.1.0")
    env.cni.add_network_list(net, env.rt)
    entry = env.entry_path()
    before = entry.read_bytes()
    _age(entry)
    env.record.unlink()
    return net, entry, before


def _dels(env: Env, cid: str = "ctr1") -> list[dict[str, Any]]:
    return [
        c for c in env.calls() if c.get("command") == "DEL" and c["env"]["CNI_CONTAINERID"] == cid
    ]


# -- 1. DEL: an entry it cannot read is kept; an unusable one only after the plugins --------

# Run in a child process by the tests of read faults: each attempt records its
# outcome and whether the entry is still there.
_READ_FAULT = r"""
import json, os, sys
import libcni, libcni.cache
from libcni import CNIConfig, GCArgs, GCAttachment, RuntimeConf
plugins, cache, record, entry = sys.argv[1:5]
cni = CNIConfig([plugins], cache_dir=cache)
net = libcni.conf_list_from_bytes(json.dumps({"cniVersion": "1.1.0", "name": "testnet",
    "plugins": [{"type": "p1", "record": record}]}).encode())
out = {}
def attempt(key, call):
    try:
        call()
        out[key] = ["ok", []]
    except libcni.GCError as e:
        out[key] = ["GCError", [[type(x).__name__, str(x)] for x in e.errors]]
    except Exception as e:
        out[key] = [type(e).__name__, str(e)]
    out[key + "-kept"] = os.path.exists(entry)
rt = RuntimeConf("ctr1", "", "eth0")
attempt("del", lambda: cni.del_network_list(net, rt))
attempt("gc", lambda: cni.gc_network_list(net, GCArgs([GCAttachment("other", "eth0")])))
attempt("gc-valid", lambda: cni.gc_network_list(net, GCArgs([GCAttachment("ctr1", "eth0")])))
cache = libcni.cache.ResultCache(cache)
attempt("remove", lambda: cache.remove("testnet", "ctr1", "eth0"))
attempt("check_owner", lambda: cache.check_owner("testnet", "ctr1", "eth0"))
print(json.dumps(out))
"""


def _child_json(argv: list[str], timeout: float) -> Any:
    """Run ``argv`` (a runtime of its own, as these tests need), which must succeed; the
    JSON it printed."""
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=python_env(), timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_entry_that_cannot_be_read_is_kept_by_del_and_gc(env: Env) -> None:
    """Permission denied while reading: DEL raises before running anything, GC removes nothing.

    The runtime runs without ``CAP_DAC_OVERRIDE`` (when the tests run as root)
    and the entry has mode 000: a real EACCES, not an injected one.
    """
    net, entry, before = _added_and_aged(env)
    cmd = without_dac_override(
        [
            sys.executable,
            "-c",
            _READ_FAULT,
            str(env.plugins),
            str(env.cache),
            str(env.record),
            str(entry),
        ]
    )
    entry.chmod(0o000)
    try:
        out = _child_json(cmd, timeout=60)
    finally:
        entry.chmod(0o600)
    kind, msg = out["del"]
    assert kind == "CacheError" and "Permission denied" in msg and str(entry) in msg, out
    assert out["del-kept"] and out["gc-kept"] and out["gc-valid-kept"], out
    assert _dels(env) == []  # DEL ran no plugin
    # GC could not tell whether the entry is stale: it says so, and keeps it.
    assert out["gc"][0] == "GCError", out
    assert [k for k, m in out["gc"][1] if "Permission denied" in m] == ["CacheError"], out
    # Listed as valid: not even opened.
    assert out["gc-valid"][0] in ("ok", "GCError"), out
    assert not any("Permission denied" in m for _, m in out["gc-valid"][1]), out
    # The cache itself: cannot tell whose it is, so neither removes nor replaces it.
    for method in ("remove", "check_owner"):
        kind, msg = out[method]
        assert kind == "CacheError" and "Permission denied" in msg, out
        assert out[f"{method}-kept"], out
    assert entry.read_bytes() == before
    # Readable again: DEL gets the cached result and forgets the entry.
    env.cni.del_network_list(net, env.rt)
    assert _dels(env)[-1]["stdin"]["prevResult"]["ips"] == RESULT["ips"]
    assert not entry.exists()


_EMFILE = r"""
import gc, json, os, resource, sys
import libcni
from libcni import CNIConfig, RuntimeConf
plugins, cache, record, entry = sys.argv[1:5]
cni = CNIConfig([plugins], cache_dir=cache)
net = libcni.conf_list_from_bytes(json.dumps({"cniVersion": "1.0.0", "name": "testnet",
    "plugins": [{"type": "p1", "record": record}]}).encode())
# Warm up: every module, lock file and directory a DEL touches exists already.
warm = RuntimeConf("warm", "", "eth0")
cni.add_network_list(net, warm)
cni.del_network_list(net, warm)
rt = RuntimeConf("ctr1", "", "eth0")
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
fillers = []
while True:
    try:
        fillers.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        break
attempts = []
# One more free descriptor at each attempt: some attempt fails exactly at reading the entry.
# (A client of its own at each attempt: the cache directories it keeps open would otherwise
# leave the entry's read needing fewer descriptors than the locks taken before it. The
# previous client is collected first, with the directories it kept: a failed attempt's
# traceback holds it in a reference cycle.)
while fillers:
    os.close(fillers.pop())
    gc.collect()
    try:
        CNIConfig([plugins], cache_dir=cache).del_network_list(net, rt)
        outcome = ["ok", ""]
    except Exception as e:
        outcome = [type(e).__name__, str(e)]
    attempts.append([outcome, os.path.exists(entry)])
    if outcome[0] == "ok":
        break
for fd in fillers:
    os.close(fd)
print(json.dumps(attempts))
"""


def test_del_out_of_file_descriptors_keeps_the_entry(env: Env) -> None:
    """Too many open files (a real ``RLIMIT_NOFILE``): no DEL attempt loses the entry.

    A runtime process uses up its descriptors, then retries DEL with one more
    free descriptor each time. Some attempt fails at opening the entry
    (EMFILE): it must raise ``CacheError`` and keep the entry; every plugin
    that runs gets the cached result; the last attempt succeeds.
    """
    net = env.conflist(env.plugin("p1", ADD={"result": RESULT}))
    env.cni.add_network_list(net, env.rt)
    entry = env.entry_path()
    attempts = _child_json(
        [
            sys.executable,
            "-c",
            _EMFILE,
            str(env.plugins),
            str(env.cache),
            str(env.record),
            str(entry),
        ],
        timeout=120,
    )
    assert attempts[-1][0][0] == "ok", attempts
    # No plugin ran without the cached result: the entry was there for every one.
    dels = _dels(env)
    assert dels and all(c["stdin"].get("prevResult") == RESULT for c in dels), (dels, attempts)
    assert not entry.exists()
    read_failures = [
        (outcome, kept)
        for outcome, kept in attempts
        if "cannot read cache entry" in outcome[1] and "Too many open files" in outcome[1]
    ]
    assert read_failures, attempts  # the fault was met ...
    for outcome, kept in read_failures:  # ... and lost nothing
        assert outcome[0] == "CacheError" and kept, attempts


def test_an_entry_that_fails_with_eio_is_kept_by_del_and_gc(env: Env) -> None:
    """An I/O error (EIO) while reading: DEL raises before running anything, GC deletes nothing.

    A real EIO on demand: in a private mount namespace, the runtime's own
    ``/proc/<pid>/mem`` is bind-mounted over the entry. It opens as a regular
    file, and reading it from offset 0 (an unmapped address) fails with EIO,
    as a failing disk would. The mount hides the entry from that process
    only, and a mount point cannot be unlinked anyway; what shows that EIO
    was not taken for corruption is that no plugin ran: DEL and GC of a
    corrupt entry would have run the plugins without ``prevResult``.
    """
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        unavailable("needs root and unshare(1) for a private mount namespace")
    net, entry, before = _added_and_aged(env)
    mount_then_exec = 'mount --bind "/proc/$$/mem" "$1" && shift && exec "$@"'
    out = _child_json(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            mount_then_exec,
            "sh",
            str(entry),
            sys.executable,
            "-c",
            _READ_FAULT,
            str(env.plugins),
            str(env.cache),
            str(env.record),
            str(entry),
        ],
        timeout=60,
    )
    kind, msg = out["del"]
    assert kind == "CacheError" and "Input/output error" in msg and str(entry) in msg, out
    assert _dels(env) == []  # neither DEL nor GC ran a plugin's DEL for it
    # GC says it could not read the entry, and tries nothing else with it.
    assert out["gc"][0] == "GCError", out
    assert [(k, "Input/output error" in m) for k, m in out["gc"][1]] == [("CacheError", True)], out
    # Listed as valid: not even opened.
    assert out["gc-valid"] == ["ok", []], out
    # The cache itself: cannot tell whose it is, so neither removes nor replaces it.
    for method in ("remove", "check_owner"):
        kind, msg = out[method]
        assert kind == "CacheError" and "Input/output error" in msg, out
    assert entry.read_bytes() == before
    env.cni.del_network_list(net, env.rt)
    assert _dels(env)[-1]["stdin"]["prevResult"]["ips"] == RESULT["ips"]
    assert not entry.exists()


UNUSABLE = {
    "empty": b"",
    "corrupt": b"{garbage",
    "not-object": b"[1,2]",
    "wrong-types": json.dumps({"kind": "cniCacheV1", "containerId": 5}).encode(),
    "unknown-version": json.dumps(
        {
            "kind": "cniCacheV1",
            "containerId": "ctr1",
            "ifName": "eth0",
            "networkName": "testnet",
            "config": "",
            "result": {"cniVersion": "9.9.9"},
        }
    ).encode(),
    "bad-result": json.dumps(
        {
            "kind": "cniCacheV1",
            "containerId": "ctr1",
            "ifName": "eth0",
            "networkName": "testnet",
            "config": "",
            "result": {"cniVersion": "1.0.0", "ips": 5},
        }
    ).encode(),
    "over-16-MiB": json.dumps(
        {
            "kind": "cniCacheV1",
            "containerId": "ctr1",
            "ifName": "eth0",
            "networkName": "testnet",
            "config": "",
            "result": {"cniVersion": "1.0.0", "x": "x" * (16 << 20)},
        }
    ).encode(),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_del_with_an_unusable_entry_keeps_it_until_the_plugins_succeed(
    env: Env, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    failing = env.conflist(env.plugin("p1"), env.plugin("p2", DEL=FAIL))
    working = env.conflist(env.plugin("p1"), env.plugin("p2"))
    env.cni.add_network_list(working, env.rt)
    entry = env.entry_path()
    entry.write_bytes(UNUSABLE[case])
    with caplog.at_level(logging.WARNING, logger="libcni"), pytest.raises(PluginError):
        env.cni.del_network_list(failing, env.rt)
    assert entry.read_bytes() == UNUSABLE[case]  # the failed DEL kept it, as it was
    assert "without prevResult" in caplog.text
    env.cni.del_network_list(working, env.rt)
    assert [c["stdin"]["type"] for c in _dels(env)] == ["p2", "p2", "p1"]
    assert all("prevResult" not in c["stdin"] for c in _dels(env))
    assert not entry.exists()  # removed once every plugin succeeded


# -- 4. DEL with a configuration version the cached result cannot be converted to ---------


def test_del_with_an_unconvertible_version_keeps_the_entry_until_the_plugins_succeed(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.cni.add_network_list(env.conflist(env.plugin("p1", ADD={"result": RESULT})), env.rt)
    entry = env.entry_path()
    before = entry.read_bytes()
    # 1.3.0 is a version this library cannot convert results to (parsable, >= 0.4.0).
    failing = env.conflist(env.plugin("p1", DEL=FAIL), version="1.3.0")
    with caplog.at_level(logging.WARNING, logger="libcni"), pytest.raises(PluginError):
        env.cni.del_network_list(failing, env.rt)
    assert entry.read_bytes() == before
    assert "without prevResult" in caplog.text
    env.cni.del_network_list(env.conflist(env.plugin("p1"), version="1.3.0"), env.rt)
    assert all("prevResult" not in c["stdin"] for c in _dels(env))
    assert not entry.exists()


# -- 2. GC: never an entry it cannot read, a valid one, or another network's --------------


def test_gc_never_removes_a_broken_entry_listed_as_valid(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    entry = env.entry_path(cid="keep")
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"{half-writ")
    _age(entry)
    # A copy of a valid attachment's entry under another file name: kept too.
    copy = env.entry_path(cid="copy")
    copy.write_text(json.dumps(CacheEntry("keep", "testnet", "eth0", b"{}").to_dict()))
    _age(copy)
    env.cni.gc_network_list(net, GCArgs([GCAttachment("keep", "eth0")]))
    assert entry.read_bytes() == b"{half-writ"
    assert copy.exists()
    assert [c["command"] for c in env.calls()] == ["GC"]  # no DEL
    env.cni.gc_network_list(net, GCArgs([GCAttachment("other", "eth0")]))
    assert not entry.exists() and not copy.exists()  # not valid: unusable entries are removed


def test_gc_does_not_reach_entries_of_a_network_whose_name_starts_with_its_own(env: Env) -> None:
    net_a = env.conflist(env.plugin("p1"), name="a", version="1.1.0")
    net_ab = env.conflist(env.plugin("p1"), name="a-b", version="1.1.0")
    env.cni.add_network_list(net_ab, RuntimeConf("c1", "", "eth0"))
    results = env.results_dir()
    planted = {
        # names network a-b inside, otherwise broken
        "a-b-c2-eth0": json.dumps({"kind": "cniCacheV1", "networkName": "a-b", "containerId": 2}),
        # names nothing: its file name fits network a-b, which this cache holds
        "a-b-c3-eth0": "",
        # names network a-b, under a file name that is not its own
        "a-b-c4-eth0": (results / "a-b-c1-eth0").read_text().replace('"c1"', '"c9"'),
    }
    for name, content in planted.items():
        (results / name).write_text(content)
        _age(results / name)
    (results / "a-x-eth0").write_text("{broken")  # network a's own broken entry
    _age(results / "a-x-eth0")
    env.record.unlink()
    env.cni.gc_network_list(net_a)
    assert _dels(env, "c1") == []
    assert sorted(os.listdir(results)) == ["a-b-c1-eth0", *sorted(planted)]
    env.cni.gc_network_list(net_ab, GCArgs([GCAttachment("c1", "eth0")]))
    assert sorted(os.listdir(results)) == ["a-b-c1-eth0"]


def test_gc_leaves_a_broken_entry_that_an_operation_holds(env: Env) -> None:
    """GC of ``a`` never removes ``a-b-c3-eth0`` while an ADD of network ``a-b`` may write it.

    The broken file names nothing and no other network is known, so it is
    network ``a``'s to collect; but the attachment lock of its file name (the
    same for every attachment named so) is held, here by this test as an ADD
    of ``a-b``/``c3`` would hold it: GC leaves the file for a later run.
    """
    net_a = env.conflist(env.plugin("p1"), name="a", version="1.1.0")
    path = env.results_dir() / "a-b-c3-eth0"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    _age(path)
    cache = ResultCache(env.cache)
    with cache.lock("a-b", "c3", "eth0"):
        env.cni.gc_network_list(net_a)
        assert path.exists()
    env.cni.gc_network_list(net_a)
    assert not path.exists()


# -- 12. a directory at an entry's path --------------------------------------------------


def test_gc_collects_the_error_of_a_directory_at_an_entry_path_and_goes_on(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    env.cni.add_network_list(net, RuntimeConf("stale", "", "eth0"))
    planted = env.entry_path(cid="dir")
    (planted / "inside").mkdir(parents=True)
    _age(planted)
    env.record.unlink()
    with pytest.raises(GCError) as info:
        env.cni.gc_network_list(net)
    errors = info.value.errors
    assert [type(e) for e in errors] == [CacheError], errors
    assert str(planted) in str(errors[0])
    assert [c["command"] for c in env.calls()] == ["DEL", "GC"]  # GC went on
    assert not env.entry_path(cid="stale").exists()
    assert planted.is_dir()


# -- 3. two attachments, one file name ---------------------------------------------------


def test_two_attachments_sharing_a_file_name_never_use_or_remove_each_others_entry(
    env: Env,
) -> None:
    net_ab = env.conflist(env.plugin("p1", ADD={"result": RESULT}), name="a-b")
    net_a = env.conflist(env.plugin("p1"), name="a")
    ab, a = RuntimeConf("c", "", "eth0"), RuntimeConf("b-c", "", "eth0")
    env.cni.add_network_list(net_ab, ab)
    entry = env.entry_path("a", "b-c")
    assert entry == env.entry_path("a-b", "c")
    before = entry.read_bytes()
    env.record.unlink()

    assert env.cni.get_network_list_cached_result(net_a, a) is None
    assert env.cni.get_network_list_cached_config(net_a, a) is None
    env.cni.check_network_list(net_a, a)
    assert "prevResult" not in env.calls()[-1]["stdin"]
    env.cni.del_network_list(net_a, a)
    assert "prevResult" not in env.calls()[-1]["stdin"]
    assert entry.read_bytes() == before  # not removed

    with pytest.raises(CacheError) as info:
        env.cni.add_network_list(net_a, a)
    assert "'a-b'" in str(info.value) and "'b-c'" in str(info.value), info.value
    assert [c["command"] for c in env.calls()] == ["CHECK", "DEL"]  # ADD ran nothing
    assert entry.read_bytes() == before

    # The owner still has it all; once it is gone, the other attachment can ADD.
    cached = env.cni.get_network_list_cached_result(net_ab, ab)
    assert cached is not None and cached.to_dict()["ips"] == RESULT["ips"]
    env.cni.del_network_list(net_ab, ab)
    assert env.calls()[-1]["stdin"]["prevResult"] == RESULT
    env.cni.add_network_list(net_a, a)
    assert json.loads(entry.read_bytes())["networkName"] == "a"


_SWAP_ON_DEL = """#!/bin/sh
cat >/dev/null
if [ "$CNI_COMMAND" = DEL ]; then
    {how} {planted} {entry}
fi
echo '{{"cniVersion":"1.0.0"}}'
"""


@pytest.mark.parametrize("how", ["mv", "cp"])  # a new file renamed over it, or written in place
def test_del_removes_the_entry_it_read_never_one_written_there_since(
    env: Env, tmp_path: Path, how: str
) -> None:
    # DEL reads the entry before its plugins run and removes it after without
    # reading it again, only while the file is still the one it read. A
    # writer outside libcni's locks (here: a plugin) puts another
    # attachment's entry at the same path meanwhile: DEL must leave it.
    other = ResultCache(tmp_path / "other")
    other.write(CacheEntry("c", "a-b", "eth0", b"{}", result=RESULT))
    planted = tmp_path / "planted"
    theirs = Path(other.entry_path("a-b", "c", "eth0")).read_bytes()
    planted.write_bytes(theirs)
    entry = env.entry_path("a", "b-c")
    script = env.plugins / "swap"
    script.write_text(_SWAP_ON_DEL.format(how=how, planted=planted, entry=entry))
    script.chmod(0o755)
    net = env.conflist({"type": "swap"}, name="a")
    rt = RuntimeConf("b-c", "", "eth0")
    env.cni.add_network_list(net, rt)
    assert json.loads(entry.read_bytes())["containerId"] == "b-c"
    env.cni.del_network_list(net, rt)
    assert entry.read_bytes() == theirs  # the other attachment's, kept
    # Without a writer in between, DEL removes what it read.
    plain = env.conflist(env.plugin("p1"), name="n")
    env.cni.add_network_list(plain, env.rt)
    env.cni.del_network_list(plain, env.rt)
    assert not env.entry_path("n").exists()


def test_the_cache_never_reads_removes_or_overwrites_another_attachments_entry(
    tmp_path: Path,
) -> None:
    cache = ResultCache(tmp_path)
    cache.write(CacheEntry("c", "a-b", "eth0", b"{}", result=RESULT))
    path = Path(cache.entry_path("a", "b-c", "eth0"))
    before = path.read_bytes()
    assert cache.read("a", "b-c", "eth0") is None
    assert cache.remove("a", "b-c", "eth0") is False
    with pytest.raises(CacheError, match="another attachment"):
        cache.check_owner("a", "b-c", "eth0")
    with pytest.raises(CacheError, match="another attachment"):
        cache.write(CacheEntry("b-c", "a", "eth0", b"{}"))
    assert path.read_bytes() == before
    assert [dotfile for dotfile in os.listdir(path.parent) if dotfile.startswith(".")] == []
    # A legacy bare result names nobody: it is the one asked for (as before).
    path.write_text(json.dumps(RESULT))
    legacy = cache.read("a", "b-c", "eth0")
    assert legacy is not None and legacy.kind == "" and legacy.network_name == "a"
    assert cache.remove("a", "b-c", "eth0") is True


# -- 11. huge and sparse files ------------------------------------------------------------


def test_a_1_tib_sparse_entry_is_refused_fast_and_only_cni_errors_escape(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    env.cni.add_network_list(net, RuntimeConf("other", "", "eth0"))
    entry = env.entry_path()
    with open(entry, "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, no block used
    _age(entry)
    start = time.monotonic()
    assert [a.container_id for a in env.cni.get_cached_attachments()] == ["other"]
    assert env.cni.get_cached_attachments("ctr1") == []
    for getter in (env.cni.get_network_list_cached_result, env.cni.get_network_list_cached_config):
        with pytest.raises(CacheError, match="larger than 16 MiB") as info:
            getter(net, env.rt)
        # Refused by its size before any read: the error gives the whole size.
        assert info.value.details == f"{1 << 40} bytes"
    with pytest.raises(CacheError, match="larger than 16 MiB"):
        env.cni.check_network_list(net, env.rt)
    env.cni.gc_network_list(
        net, GCArgs([GCAttachment("other", "eth0"), GCAttachment("ctr1", "eth0")])
    )
    assert entry.exists()  # valid: kept
    env.cni.del_network_list(net, env.rt)  # goes on without prevResult, then removes it
    assert not entry.exists()
    with open(entry, "wb") as f:
        f.truncate(1 << 40)
    _age(entry)
    env.cni.gc_network_list(net, GCArgs([GCAttachment("other", "eth0")]))
    assert not entry.exists()  # not valid: removed as unusable
    assert time.monotonic() - start < 5.0  # never read: seconds at most, even under load


def test_reading_stops_at_16_mib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that grows while it is read (here: one that lies about its size) is cut off.

    Fault injection: ``os.fstat`` reports a small size, as for a file that a
    writer extends after the reader looked; no real file does so on demand.
    """
    cache = ResultCache(tmp_path)
    path = Path(cache.entry_path("net", "c1", "eth0"))
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.truncate(64 << 20)
    real_fstat = os.fstat

    class Small:
        """The real status, but for a size of 10 bytes."""

        def __init__(self, st: os.stat_result) -> None:
            self._st, self.st_size = st, 10

        def __getattr__(self, name: str) -> object:
            return getattr(self._st, name)

    monkeypatch.setattr(os, "fstat", lambda fd: Small(real_fstat(fd)))
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting_read)
    with pytest.raises(CorruptEntryError, match="larger than 16 MiB"):
        cache.read("net", "c1", "eth0")
    assert sum(reads) == (16 << 20) + 1


# -- 15. names that cannot be encoded ----------------------------------------------------


SURROGATE = "x\ud800"


def test_names_with_a_lone_surrogate_are_validation_errors_everywhere(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    single = conf_from_bytes(
        json.dumps({"cniVersion": "1.1.0", "name": "single", **env.plugin("p1")}).encode()
    )
    bad_rts = [
        RuntimeConf("ctr1", "", SURROGATE),
        RuntimeConf("c" + SURROGATE, "", "eth0"),
    ]
    cni = env.cni
    ops: list[tuple[str, Callable[[RuntimeConf], Any]]] = [
        ("ADD", lambda rt: cni.add_network_list(net, rt)),
        ("CHECK", lambda rt: cni.check_network_list(net, rt)),
        ("DEL", lambda rt: cni.del_network_list(net, rt)),
        ("add_network", lambda rt: cni.add_network(single, rt)),
        ("check_network", lambda rt: cni.check_network(single, rt)),
        ("del_network", lambda rt: cni.del_network(single, rt)),
        ("cached result", lambda rt: cni.get_network_list_cached_result(net, rt)),
        ("cached config", lambda rt: cni.get_network_list_cached_config(net, rt)),
        ("cached result 1", lambda rt: cni.get_network_cached_result(single, rt)),
        ("cached config 1", lambda rt: cni.get_network_cached_config(single, rt)),
    ]
    env.cni.add_network_list(net, env.rt)  # the results directory exists
    for rt in bad_rts:
        for _what, op in ops:
            with pytest.raises(ValidationError):
                op(rt)
    with pytest.raises(ValidationError):
        cni.get_cached_attachments("c" + SURROGATE)
    aio = AsyncCNIConfig([env.plugins], cache_dir=env.cache)
    for rt in bad_rts:
        with pytest.raises(ValidationError):
            asyncio.run(aio.del_network_list(net, rt))
    assert [c["command"] for c in env.calls()] == ["ADD"]  # nothing else ran


def test_every_cache_method_refuses_a_lone_surrogate(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    cache.write(CacheEntry("c1", "net", "eth0", b"{}"))
    methods: list[Callable[[str, str, str], Any]] = [
        cache.entry_path,
        cache.read,
        cache.remove,
        cache.check_owner,
        lambda net, cid, ifname: cache.write(CacheEntry(cid, net, ifname, b"{}")),
        cache.lock,
        cache.try_lock,
    ]
    for names in (("net", "c1", SURROGATE), ("net", SURROGATE, "eth0"), (SURROGATE, "c1", "eth0")):
        for method in methods:
            with pytest.raises(ValidationError):
                method(*names)
    for call in (
        lambda: cache.entries(SURROGATE),
        lambda: cache.remove_corrupt(SURROGATE),
        lambda: cache.network_lock(SURROGATE, exclusive=True),
        lambda: cache.try_network_lock(SURROGATE, exclusive=False),
    ):
        with pytest.raises(ValidationError):
            call()


def test_a_huge_entry_is_corrupt_not_an_io_error(tmp_path: Path) -> None:
    """Over 16 MiB is unusable content: reads say so, ADD may replace it, DEL removes it."""
    cache = ResultCache(tmp_path)
    path = Path(cache.entry_path("net", "c1", "eth0"))
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.truncate(1 << 40)
    with pytest.raises(CorruptEntryError, match="larger than 16 MiB"):
        cache.read("net", "c1", "eth0")
    cache.check_owner("net", "c1", "eth0")  # may be overwritten
    assert cache.entries() == [] and cache.entries("c1") == []
    assert cache.remove("net", "c1", "eth0") is True
