"""The on-disk cache (behaviour.md §7, §8, §4.5): format, atomicity, safety, listing, locks."""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import GO_CACHE_KEYS

import libcni
from libcni.cache import CacheEntry, CacheLock, ResultCache, _files
from libcni.errors import CacheError, ValidationError

DATA = Path(__file__).parent / "data" / "cache"
GO_FILE = "podman-4f3c2a1b9d8e7f60-eth0"
LEGACY_FILE = "legacy-0123456789ab-eth0"
REPO_ROOT = Path(libcni.__file__).resolve().parent.parent


RESULT = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.1.0.2/24", "interface": 0}],
}


@pytest.fixture
def cache(tmp_path: Path) -> ResultCache:
    return ResultCache(tmp_path / "cni")


def results(cache: ResultCache) -> Path:
    return Path(cache.results_dir)


def put_file(cache: ResultCache, name: str, content: bytes | str) -> Path:
    """Plant a file in the results directory as another program would."""
    d = results(cache)
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_bytes(content.encode() if isinstance(content, str) else content)
    return p


def full_entry(**kw: Any) -> CacheEntry:
    base: dict[str, Any] = {
        "container_id": "c1",
        "network_name": "net",
        "ifname": "eth0",
        "config": b'{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]}',
        "netns": "/var/run/netns/c1",
        "cni_args": (("K8S_POD_NAME", "web"), ("IgnoreUnknown", "1")),
        "capability_args": {"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
        "result": RESULT,
    }
    base.update(kw)
    return CacheEntry(**base)


def dotfiles(cache: ResultCache) -> list[str]:
    return [n for n in os.listdir(cache.results_dir) if n.startswith(".")]


# -- reading what the Go library writes ---------------------------------------


def test_reads_entry_written_by_go(cache: ResultCache) -> None:
    shutil.copy(DATA / GO_FILE, put_file(cache, GO_FILE, b""))
    e = cache.read("podman", "4f3c2a1b9d8e7f60", "eth0")
    assert e is not None
    assert e.kind == "cniCacheV1"
    assert (e.network_name, e.container_id, e.ifname) == ("podman", "4f3c2a1b9d8e7f60", "eth0")
    assert e.config == (DATA / "go-config.conflist").read_bytes()
    assert e.netns == "/var/run/netns/cni-8a1e2f3d"
    assert e.cni_args == (
        ("IgnoreUnknown", "1"),
        ("K8S_POD_NAMESPACE", "default"),
        ("K8S_POD_NAME", "web-0"),
    )
    assert e.capability_args == {
        "io.kubernetes.cri.pod-annotations": {"note": "a&b <x>"},
        "portMappings": [{"containerPort": 80, "hostPort": 8080, "protocol": "tcp"}],
    }
    assert e.result is not None
    assert e.result["cniVersion"] == "1.0.0"
    assert e.result["ips"] == [{"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 2}]
    assert e.result["interfaces"][2]["sandbox"] == "/var/run/netns/cni-8a1e2f3d"


def test_go_entry_reencodes_to_the_same_json(cache: ResultCache) -> None:
    original = json.loads((DATA / GO_FILE).read_bytes())
    e = CacheEntry.from_dict(original)
    again = json.loads(e.to_json())
    assert again == original
    assert list(again) == list(original) == GO_CACHE_KEYS


def test_reads_legacy_bare_result(cache: ResultCache) -> None:
    shutil.copy(DATA / LEGACY_FILE, put_file(cache, LEGACY_FILE, b""))
    e = cache.read("legacy", "0123456789ab", "eth0")
    assert e is not None
    assert e.kind == ""
    assert e.config == b""
    assert (e.network_name, e.container_id, e.ifname) == ("legacy", "0123456789ab", "eth0")
    assert e.result == json.loads((DATA / LEGACY_FILE).read_bytes())
    assert e.netns == "" and e.cni_args == () and e.capability_args == {}


def test_object_with_other_kind_is_a_legacy_result(cache: ResultCache) -> None:
    put_file(cache, "n-c-eth0", '{"kind":"somethingElse","cniVersion":"0.4.0"}')
    e = cache.read("n", "c", "eth0")
    assert (
        e is not None
        and e.kind == ""
        and e.result
        == {
            "kind": "somethingElse",
            "cniVersion": "0.4.0",
        }
    )


def test_null_fields_take_zero_values_as_in_go(cache: ResultCache) -> None:
    put_file(
        cache,
        "n-c-eth0",
        '{"kind":"cniCacheV1","containerId":null,"config":null,"ifName":"eth0",'
        '"networkName":"n","netns":null,"cniArgs":null,"capabilityArgs":null,"result":null}',
    )
    e = cache.read("n", "c", "eth0")
    assert e == CacheEntry(
        container_id="c", network_name="n", ifname="eth0", config=b"", result=None
    )


def test_names_missing_from_a_v1_file_come_from_the_arguments(cache: ResultCache) -> None:
    put_file(cache, "n-c-eth0", '{"kind":"cniCacheV1","config":"","result":{"cniVersion":"1.0.0"}}')
    e = cache.read("n", "c", "eth0")
    assert e is not None
    assert (e.network_name, e.container_id, e.ifname) == ("n", "c", "eth0")
    assert e.result == {"cniVersion": "1.0.0"}


def test_config_base64_with_line_breaks_is_accepted() -> None:
    enc = base64.b64encode(b"x" * 100).decode()
    obj = {"kind": "cniCacheV1", "config": enc[:40] + "\r\n" + enc[40:]}
    assert CacheEntry.from_dict(obj).config == b"x" * 100


# -- what we write ------------------------------------------------------------


def test_written_file_has_go_field_names_order_and_encodings(cache: ResultCache) -> None:
    entry = full_entry()
    cache.write(entry)
    raw = (results(cache) / "net-c1-eth0").read_bytes()
    obj = json.loads(raw)
    assert list(obj) == GO_CACHE_KEYS
    assert obj == {
        "kind": "cniCacheV1",
        "containerId": "c1",
        "config": base64.b64encode(entry.config).decode(),
        "ifName": "eth0",
        "networkName": "net",
        "netns": "/var/run/netns/c1",
        "cniArgs": [["K8S_POD_NAME", "web"], ["IgnoreUnknown", "1"]],
        "capabilityArgs": {"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
        "result": RESULT,
    }
    assert b"\n" not in raw and b": " not in raw and b", " not in raw  # compact
    assert cache.read("net", "c1", "eth0") == entry


def test_empty_fields_are_omitted(cache: ResultCache) -> None:
    cache.write(CacheEntry("c1", "net", "eth0", b""))
    obj = json.loads((results(cache) / "net-c1-eth0").read_bytes())
    assert obj == {
        "kind": "cniCacheV1",
        "containerId": "c1",
        "config": "",
        "ifName": "eth0",
        "networkName": "net",
    }
    assert cache.read("net", "c1", "eth0") == CacheEntry("c1", "net", "eth0", b"")


def test_legacy_entry_is_written_back_as_v1(cache: ResultCache) -> None:
    cache.write(CacheEntry("c", "n", "eth0", b"", result={"cniVersion": "0.3.1"}, kind=""))
    obj = json.loads((results(cache) / "n-c-eth0").read_bytes())
    assert obj["kind"] == "cniCacheV1"


def test_cni_args_are_converted_to_tuples() -> None:
    # Lists, as JSON decodes pairs: outside the annotation, converted at run time.
    e = CacheEntry("c", "n", "eth0", b"", cni_args=[["A", "1"], ("B", "2")])  # type: ignore[arg-type]
    assert e.cni_args == (("A", "1"), ("B", "2"))


def test_non_ascii_values_round_trip(cache: ResultCache) -> None:
    entry = full_entry(netns="/run/netns/ünï", capability_args={"k": "☃ \u2028 <&>"})
    cache.write(entry)
    assert cache.read("net", "c1", "eth0") == entry


def test_modes(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        cache = ResultCache(tmp_path / "a" / "b")
        cache.write(full_entry())
        with cache.lock("net", "c1", "eth0"), cache.network_lock("net", exclusive=False):
            pass
    finally:
        os.umask(old)
    for d in (
        tmp_path / "a",
        tmp_path / "a" / "b",
        Path(cache.results_dir),
        Path(cache.locks_dir),
        Path(cache.locks_dir) / "networks",
    ):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in (
        Path(cache.results_dir) / "net-c1-eth0",
        Path(cache.locks_dir) / "net-c1-eth0",
        Path(cache.locks_dir) / "networks" / "net",
    ):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_write_replaces_the_previous_entry(cache: ResultCache) -> None:
    cache.write(full_entry(netns="/old"))
    cache.write(full_entry(netns="/new"))
    e = cache.read("net", "c1", "eth0")
    assert e is not None and e.netns == "/new"
    assert os.listdir(cache.results_dir) == ["net-c1-eth0"]


# -- atomicity ----------------------------------------------------------------


def _fail(err: int) -> Callable[..., Any]:
    def raiser(*a: Any, **k: Any) -> Any:
        raise OSError(err, os.strerror(err))

    return raiser


@pytest.mark.parametrize(
    ("target", "err"),
    [
        ("fsync", errno.ENOSPC),
        ("write", errno.ENOSPC),
        ("write", errno.EIO),
        ("rename", errno.EROFS),
    ],
)
def test_failed_write_leaves_previous_entry_and_no_temp_file(
    cache: ResultCache, monkeypatch: pytest.MonkeyPatch, target: str, err: int
) -> None:
    cache.write(full_entry(netns="/old"))
    before = (results(cache) / "net-c1-eth0").read_bytes()
    monkeypatch.setattr(os, target, _fail(err))
    with pytest.raises(CacheError) as ei:
        cache.write(full_entry(netns="/new"))
    monkeypatch.undo()
    assert "net-c1-eth0" in str(ei.value)
    assert os.strerror(err) in str(ei.value)
    assert ei.value.code == 5
    assert (results(cache) / "net-c1-eth0").read_bytes() == before
    assert os.listdir(cache.results_dir) == ["net-c1-eth0"]


def test_failed_first_write_leaves_nothing(
    cache: ResultCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", _fail(errno.ENOSPC))
    with pytest.raises(CacheError):
        cache.write(full_entry())
    monkeypatch.undo()
    assert os.listdir(cache.results_dir) == []
    assert cache.read("net", "c1", "eth0") is None


def test_directory_fsync_failure_is_reported(
    cache: ResultCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.write(full_entry())  # the directory exists, only the write path syncs now
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:  # the first is the temporary file, the second the directory
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(CacheError, match="could not be synced"):
        cache.write(full_entry(netns="/new"))
    monkeypatch.undo()
    assert dotfiles(cache) == []


def test_write_syncs_file_then_directory(
    cache: ResultCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.write(full_entry())
    seen: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        seen.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    def rename(*a: Any, **k: Any) -> None:
        seen.append("rename")
        real_rename(*a, **k)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    cache.write(full_entry(netns="/new"))
    assert seen == ["file", "rename", "dir"]


@pytest.mark.parametrize(
    "bad",
    [{"x": float("nan")}, {"x": object()}, {"x": float("inf")}],
    ids=["nan", "object", "inf"],
)
def test_unencodable_entry_is_a_cache_error_and_writes_nothing(
    cache: ResultCache, bad: dict[str, Any]
) -> None:
    with pytest.raises(CacheError, match="cannot encode"):
        cache.write(full_entry(capability_args=bad))
    assert not results(cache).exists()


def test_deeply_nested_entry_is_a_cache_error(cache: ResultCache) -> None:
    deep: Any = {}
    for _ in range(100_000):
        deep = {"a": deep}
    with pytest.raises(CacheError):
        cache.write(full_entry(result=deep))


# -- symlinks and odd files -----------------------------------------------------


def test_symlink_at_entry_path_is_replaced_not_followed(cache: ResultCache, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    results(cache).mkdir(parents=True)
    (results(cache) / "net-c1-eth0").symlink_to(victim)
    cache.write(full_entry())
    assert victim.read_text() == "precious"
    p = results(cache) / "net-c1-eth0"
    assert not p.is_symlink() and p.is_file()
    assert cache.read("net", "c1", "eth0") == full_entry()


def test_symlinked_results_dir_is_refused(cache: ResultCache, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "net-c1-eth0").write_text(json.dumps(full_entry().to_dict()))
    Path(cache.dir).mkdir()
    results(cache).symlink_to(elsewhere)
    with pytest.raises(CacheError, match="symbolic link"):
        cache.write(full_entry(netns="/x"))
    with pytest.raises(CacheError, match="symbolic link"):
        cache.read("net", "c1", "eth0")
    with pytest.raises(CacheError, match="symbolic link"):
        cache.remove("net", "c1", "eth0")
    with pytest.raises(CacheError, match="symbolic link"):
        cache.entries()
    assert os.listdir(elsewhere) == ["net-c1-eth0"]


def test_symlinked_locks_dir_is_refused(cache: ResultCache, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Path(cache.dir).mkdir()
    Path(cache.locks_dir).symlink_to(elsewhere)
    with pytest.raises(CacheError, match="symbolic link"):
        cache.lock("net", "c1", "eth0")
    with pytest.raises(CacheError, match="symbolic link"):
        cache.network_lock("net", exclusive=True)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("which", ["locks", "locks/networks", "locks/containers"])
def test_a_lock_directory_planted_after_use_is_refused(
    cache: ResultCache, tmp_path: Path, which: str
) -> None:
    # The lock directories stay open between locks, each checked with one lstat: a
    # symlink planted at one after it was used is refused as on first use.
    def take() -> CacheLock:
        if which == "locks":
            return cache.lock("net", "c1", "eth0")
        if which == "locks/networks":
            return cache.network_lock("net", exclusive=True)
        return cache.container_lock("c1")

    take().release()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = Path(cache.dir) / which
    shutil.rmtree(planted)
    planted.symlink_to(elsewhere)
    with pytest.raises(CacheError, match="symbolic link"):
        take()
    assert os.listdir(elsewhere) == []


def test_a_lock_directory_removed_or_replaced_is_made_again(cache: ResultCache) -> None:
    # Removed (an operator cleaning up) or replaced by another directory: the next lock
    # uses the directory now at the path, where another process would look.
    cache.lock("net", "c1", "eth0").release()
    cache.network_lock("net", exclusive=True).release()
    shutil.rmtree(cache.locks_dir)
    with cache.network_lock("net", exclusive=False), cache.lock("net", "c1", "eth0") as lk:
        assert os.path.exists(os.path.join(cache.locks_dir, "networks", "net"))
        assert lk.path == os.path.join(cache.locks_dir, "net-c1-eth0")
        assert os.path.exists(lk.path)
    os.rename(cache.locks_dir, cache.locks_dir + ".old")
    os.mkdir(cache.locks_dir, 0o700)
    os.mkdir(os.path.join(cache.locks_dir, "networks"), 0o700)
    with cache.network_lock("net", exclusive=True):
        assert os.listdir(os.path.join(cache.locks_dir, "networks")) == ["net"]


def test_results_path_that_is_a_file_is_refused(cache: ResultCache) -> None:
    Path(cache.dir).mkdir()
    results(cache).write_text("")
    with pytest.raises(CacheError, match="not a directory"):
        cache.write(full_entry())


def test_symlink_entry_is_not_read_and_remove_removes_the_link(
    cache: ResultCache, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text(json.dumps(full_entry().to_dict()))
    results(cache).mkdir(parents=True)
    (results(cache) / "net-c1-eth0").symlink_to(victim)
    with pytest.raises(CacheError, match="symbolic link"):
        cache.read("net", "c1", "eth0")
    assert cache.entries() == []
    cache.remove("net", "c1", "eth0")
    assert victim.exists()
    assert os.listdir(cache.results_dir) == []


def test_fifo_entry_does_not_block(cache: ResultCache) -> None:
    results(cache).mkdir(parents=True)
    os.mkfifo(results(cache) / "net-c1-eth0")
    with pytest.raises(CacheError, match="not a regular file"):
        cache.read("net", "c1", "eth0")


def test_directory_at_entry_path(cache: ResultCache) -> None:
    (results(cache) / "net-c1-eth0").mkdir(parents=True)
    with pytest.raises(CacheError, match="not a regular file"):
        cache.read("net", "c1", "eth0")
    with pytest.raises(CacheError, match="net-c1-eth0"):
        cache.write(full_entry())
    assert dotfiles(cache) == []


# -- absent and corrupt entries -------------------------------------------------


def test_absent(cache: ResultCache) -> None:
    assert cache.read("net", "c1", "eth0") is None  # no directory at all
    cache.remove("net", "c1", "eth0")
    assert cache.entries() == [] and cache.entries("c1") == []
    results(cache).mkdir(parents=True)
    assert cache.read("net", "c1", "eth0") is None
    cache.remove("net", "c1", "eth0")


def test_remove(cache: ResultCache) -> None:
    cache.write(full_entry())
    cache.remove("net", "c1", "eth0")
    assert cache.read("net", "c1", "eth0") is None
    cache.remove("net", "c1", "eth0")


CORRUPT = {
    "empty": (b"", "is empty"),
    "blank": (b" \n\t", "is empty"),
    "not-json": (b'{"kind": "cniCacheV1", ', "not valid JSON"),
    "truncated": (b'{"kind":"cniCacheV1","containerId":"c', "not valid JSON"),
    "array": (b"[1, 2]", "not a JSON object"),
    "string": (b'"x"', "not a JSON object"),
    "null": (b"null", "not a JSON object"),
    "nan": (b'{"cniVersion": NaN}', "not valid JSON"),
    "deep": (b"[" * 200_000 + b"]" * 200_000, "not valid JSON"),
    "bad-utf8-bom": (b"\xef\xbb\xbf{}", "not valid JSON"),
    "containerId-type": (b'{"kind":"cniCacheV1","containerId":5}', "'containerId'"),
    "ifName-type": (b'{"kind":"cniCacheV1","ifName":["eth0"]}', "'ifName'"),
    "netns-type": (b'{"kind":"cniCacheV1","netns":{}}', "'netns'"),
    "config-type": (b'{"kind":"cniCacheV1","config":123}', "'config'"),
    "config-base64": (b'{"kind":"cniCacheV1","config":"not base64!"}', "'config'"),
    "config-padding": (b'{"kind":"cniCacheV1","config":"e30"}', "'config'"),
    "config-nonascii": (b'{"kind":"cniCacheV1","config":"\\u00e9"}', "'config'"),
    "cniArgs-type": (b'{"kind":"cniCacheV1","cniArgs":"K=V"}', "'cniArgs'"),
    "cniArgs-pair": (b'{"kind":"cniCacheV1","cniArgs":[["K"]]}', "'cniArgs'"),
    "cniArgs-value": (b'{"kind":"cniCacheV1","cniArgs":[["K",1]]}', "'cniArgs'"),
    "capabilityArgs-type": (b'{"kind":"cniCacheV1","capabilityArgs":[]}', "'capabilityArgs'"),
    "result-type": (b'{"kind":"cniCacheV1","result":"ok"}', "'result'"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_entry_is_a_cache_error_naming_the_file(cache: ResultCache, case: str) -> None:
    content, what = CORRUPT[case]
    put_file(cache, "net-c1-eth0", content)
    with pytest.raises(CacheError) as ei:
        cache.read("net", "c1", "eth0")
    text = str(ei.value)
    assert what in text
    assert os.path.join(cache.results_dir, "net-c1-eth0") in text
    assert cache.entries() == []


def test_invalid_utf8_is_replaced_as_go_does(cache: ResultCache) -> None:
    put_file(cache, "net-c1-eth0", b'{"kind":"cniCacheV1","netns":"/x\xff"}')
    e = cache.read("net", "c1", "eth0")
    assert e is not None and e.netns == "/x\ufffd"


def test_from_dict_rejects_other_kinds() -> None:
    with pytest.raises(CacheError):
        CacheEntry.from_dict({"kind": "other"})
    with pytest.raises(CacheError):
        CacheEntry.from_dict([])


# -- hostile names --------------------------------------------------------------

HOSTILE = ["", ".", "..", "../x", "a/b", "/abs", "a\0b", "x" * 300, "é" * 130]


def _short(v: object) -> str:
    s = repr(v)
    return s if len(s) < 20 else f"{s[:8]}...len{len(str(v))}"


def _ops(cache: ResultCache) -> dict[str, Callable[[str, str, str], object]]:
    def write(n: str, c: str, i: str) -> object:
        cache.write(CacheEntry(container_id=c, network_name=n, ifname=i, config=b"{}"))
        return None

    return {
        "write": write,
        "read": cache.read,
        "remove": cache.remove,
        "lock": cache.lock,
        "try_lock": cache.try_lock,
        "entry_path": cache.entry_path,
    }


@pytest.mark.parametrize("op", ["write", "read", "remove", "lock", "try_lock", "entry_path"])
@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("bad", HOSTILE, ids=_short)
def test_hostile_names_are_refused(
    cache: ResultCache, tmp_path: Path, op: str, position: int, bad: str
) -> None:
    args = ["net", "c1", "eth0"]
    args[position] = bad
    with pytest.raises(ValidationError) as ei:
        _ops(cache)[op](*args)
    if bad:
        assert repr(bad)[:50] in ei.value.details or bad[:50] in ei.value.details
    assert os.listdir(tmp_path) == []  # nothing was created anywhere


@pytest.mark.parametrize("bad", HOSTILE, ids=_short)
def test_hostile_names_are_refused_by_network_lock_and_entries(
    cache: ResultCache, tmp_path: Path, bad: str
) -> None:
    with pytest.raises(ValidationError):
        cache.network_lock(bad, exclusive=True)
    with pytest.raises(ValidationError):
        cache.try_network_lock(bad, exclusive=False)
    if bad:
        with pytest.raises(ValidationError):
            cache.entries(bad)
    assert os.listdir(tmp_path) == []


def test_network_name_starting_with_dot_is_refused(cache: ResultCache) -> None:
    with pytest.raises(ValidationError, match="start with"):
        cache.read(".hidden", "c1", "eth0")


def test_name_length_limit_is_in_bytes(cache: ResultCache) -> None:
    ok = "n" * (255 - len("-c-e"))
    cache.write(CacheEntry("c", ok, "e", b""))
    assert cache.read(ok, "c", "e") is not None
    with pytest.raises(ValidationError, match="256 bytes"):
        cache.read(ok + "n", "c", "e")
    with pytest.raises(ValidationError):
        cache.read("é" * 126, "c", "e")  # 252 bytes + 4


def test_validation_error_codes(cache: ResultCache) -> None:
    with pytest.raises(ValidationError) as ei:
        cache.read("net", "", "eth0")
    assert ei.value.code == 3
    with pytest.raises(ValidationError) as ei:
        cache.read("a/b", "c", "eth0")
    assert ei.value.code == 7
    with pytest.raises(ValidationError) as ei:
        cache.read("n", "c", "a/b")
    assert ei.value.code == 4


# -- listing ----------------------------------------------------------------------


def _populate_listing(cache: ResultCache) -> None:
    for net, cid, ifn in [
        ("net-b", "c1", "eth0"),
        ("net-a", "c1", "eth1"),
        ("net-a", "c1", "eth0"),
        ("net-a", "c2", "eth0"),
        ("net-a", "c11", "eth0"),
        ("x", "c1-c1", "eth0"),
    ]:
        cache.write(full_entry(network_name=net, container_id=cid, ifname=ifn))


def test_entries_all_sorted_and_skipping_unusable(cache: ResultCache) -> None:
    _populate_listing(cache)
    shutil.copy(DATA / GO_FILE, results(cache) / GO_FILE)
    shutil.copy(DATA / LEGACY_FILE, results(cache) / LEGACY_FILE)  # legacy: skipped
    put_file(cache, "corrupt-c1-eth0", b"{")
    put_file(cache, "empty-c1-eth0", b"")
    put_file(cache, ".tmp-0123", json.dumps(full_entry(network_name="tmp").to_dict()))
    put_file(cache, "noname-c1-eth0", '{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0"}')
    put_file(cache, "noif-c1-eth0", '{"kind":"cniCacheV1","containerId":"c1","networkName":"n"}')
    (results(cache) / "adir-c1-eth0").mkdir()
    got = [(e.network_name, e.container_id, e.ifname) for e in cache.entries()]
    assert got == [
        ("net-a", "c1", "eth0"),
        ("net-a", "c1", "eth1"),
        ("net-a", "c11", "eth0"),
        ("net-a", "c2", "eth0"),
        ("net-b", "c1", "eth0"),
        ("podman", "4f3c2a1b9d8e7f60", "eth0"),
        ("x", "c1-c1", "eth0"),
    ]
    assert cache.entries()[0] == full_entry(network_name="net-a", container_id="c1")


def test_entries_of_one_container(cache: ResultCache) -> None:
    _populate_listing(cache)
    put_file(cache, "corrupt-c1-eth0", b"{")
    # The name matches but the content is another container's: skipped.
    put_file(cache, "other-c1-eth0", json.dumps(full_entry(container_id="c9").to_dict()))
    got = [(e.network_name, e.container_id, e.ifname) for e in cache.entries("c1")]
    assert got == [("net-a", "c1", "eth0"), ("net-a", "c1", "eth1"), ("net-b", "c1", "eth0")]
    assert [e.network_name for e in cache.entries("c1-c1")] == ["x"]
    assert [e.network_name for e in cache.entries("c2")] == ["net-a"]
    assert cache.entries("nope") == []


def test_entries_unlistable_directory(cache: ResultCache, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.write(full_entry())
    monkeypatch.setattr(os, "listdir", _fail(errno.EACCES))
    with pytest.raises(CacheError, match="cannot list"):
        cache.entries()


def test_entries_of_one_container_opens_only_candidates(
    cache: ResultCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10,000 entries written as another runtime would (quicker than cache.write).
    d = results(cache)
    d.mkdir(parents=True)
    template = full_entry()
    for i in range(10_000):
        cid = f"{i:064x}"
        data = CacheEntry(
            cid, f"net{i % 7}", "eth0", template.config, result=template.result
        ).to_json()
        (d / f"net{i % 7}-{cid}-eth0").write_bytes(data)
    wanted = f"{1234:064x}"
    opened: list[str] = []
    real = _files._read_ident_at

    def counting(dfd: int, name: str, path: str) -> tuple[bytes, _files.FileIdent]:
        opened.append(name)
        return real(dfd, name, path)

    monkeypatch.setattr(_files, "_read_ident_at", counting)
    t0 = time.perf_counter()
    got = cache.entries(wanted)
    elapsed = time.perf_counter() - t0
    assert [e.container_id for e in got] == [wanted]
    assert opened == [f"net{1234 % 7}-{wanted}-eth0"]
    print(f"entries(one of 10,000): {elapsed * 1000:.1f} ms")


# -- locks --------------------------------------------------------------------------


def test_lock_is_a_context_manager_and_releases(cache: ResultCache) -> None:
    with cache.lock("net", "c1", "eth0") as lk:
        assert isinstance(lk, CacheLock) and lk.held and lk.exclusive
        assert cache.try_lock("net", "c1", "eth0") is None
    assert not lk.held
    lk.release()  # twice is harmless
    again = cache.try_lock("net", "c1", "eth0")
    assert again is not None
    again.release()


def test_lock_excludes_other_threads(cache: ResultCache) -> None:
    inside = 0
    most = 0
    guard = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        nonlocal inside, most
        try:
            for _ in range(20):
                with cache.lock("net", "c1", "eth0"):
                    with guard:
                        inside += 1
                        most = max(most, inside)
                    time.sleep(0.001)
                    with guard:
                        inside -= 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert most == 1


def test_blocked_thread_waits_for_release(cache: ResultCache) -> None:
    held = cache.lock("net", "c1", "eth0")
    got = threading.Event()

    def waiter() -> None:
        with cache.lock("net", "c1", "eth0"):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    assert not got.wait(0.2)
    held.release()
    assert got.wait(5)
    t.join()


def test_different_attachments_do_not_block(cache: ResultCache) -> None:
    with cache.lock("net", "c1", "eth0"):
        for other in [("net", "c1", "eth1"), ("net", "c2", "eth0"), ("net2", "c1", "eth0")]:
            lk = cache.try_lock(*other)
            assert lk is not None, other
            lk.release()
        # nor the network lock, in either mode
        nl = cache.try_network_lock("net", exclusive=True)
        assert nl is not None
        nl.release()


HOLDER = """
import sys
from libcni.cache import ResultCache
cache = ResultCache(sys.argv[1])
kind = sys.argv[2]
if kind == "attachment":
    lk = cache.lock("net", "c1", "eth0")
else:
    lk = cache.network_lock("net", exclusive=(kind == "exclusive"))
print("locked", flush=True)
sys.stdin.readline()
lk.release()
print("released", flush=True)
"""


@pytest.fixture
def holder(cache: ResultCache) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(kind: str) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, cache.dir, kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "locked"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _let_go(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "released"


def test_lock_excludes_other_processes(
    cache: ResultCache, holder: Callable[[str], subprocess.Popen[str]]
) -> None:
    p = holder("attachment")
    assert cache.try_lock("net", "c1", "eth0") is None
    other = cache.try_lock("net", "c1", "eth1")
    assert other is not None
    other.release()
    _let_go(p)
    lk = cache.try_lock("net", "c1", "eth0")
    assert lk is not None
    lk.release()


def test_network_lock_shared_and_exclusive_in_process(cache: ResultCache) -> None:
    a = cache.network_lock("net", exclusive=False)
    b = cache.try_network_lock("net", exclusive=False)
    assert b is not None and not b.exclusive  # shared + shared
    assert cache.try_network_lock("net", exclusive=True) is None  # GC waits for ADD/DEL
    other_net = cache.try_network_lock("net2", exclusive=True)
    assert other_net is not None
    other_net.release()
    a.release()
    assert cache.try_network_lock("net", exclusive=True) is None  # b still holds it
    b.release()
    with cache.network_lock("net", exclusive=True):
        assert cache.try_network_lock("net", exclusive=False) is None  # ADD/DEL wait for GC
        assert cache.try_network_lock("net", exclusive=True) is None


def test_network_lock_across_processes(
    cache: ResultCache, holder: Callable[[str], subprocess.Popen[str]]
) -> None:
    p = holder("exclusive")
    assert cache.try_network_lock("net", exclusive=False) is None
    _let_go(p)
    p = holder("shared")
    lk = cache.try_network_lock("net", exclusive=False)
    assert lk is not None
    assert cache.try_network_lock("net", exclusive=True) is None
    lk.release()
    assert cache.try_network_lock("net", exclusive=True) is None
    _let_go(p)
    lk = cache.try_network_lock("net", exclusive=True)
    assert lk is not None
    lk.release()


def test_network_lock_names_cannot_collide_with_attachment_locks(cache: ResultCache) -> None:
    # An attachment of network "networks" and a network called like an attachment.
    # (Looked at while held: an attachment's lock file goes away with its entry.)
    with cache.lock("networks", "c", "eth0"), cache.network_lock("net-c1-eth0", exclusive=True):
        lk = cache.try_lock("net", "c1", "eth0")
        assert lk is not None
        assert sorted(os.listdir(cache.locks_dir)) == ["net-c1-eth0", "networks", "networks-c-eth0"]
        assert os.listdir(Path(cache.locks_dir) / "networks") == ["net-c1-eth0"]
        lk.release()


def test_dropped_lock_is_released(cache: ResultCache) -> None:
    lk: CacheLock | None = cache.lock("net", "c1", "eth0")
    del lk
    again = cache.try_lock("net", "c1", "eth0")
    assert again is not None
    again.release()


# -- removing unreadable entries (GC) -----------------------------------------


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_remove_corrupt_removes_only_old_broken_entries_of_the_network(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    cache.write(CacheEntry("good", "net", "eth0", b"{}", result={"cniVersion": "1.0.0"}))
    results = tmp_path / "results"
    broken = {
        "net-empty-eth0": b"",
        "net-garbage-eth0": b"{nope",
        "net-list-eth0": b"[1]",
        "net-types-eth0": json.dumps({"kind": "cniCacheV1", "containerId": 5}).encode(),
    }
    for name, data in broken.items():
        (results / name).write_bytes(data)
        _age(results / name, 120)
    (results / "net-legacy-eth0").write_bytes(
        b'{"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}'
    )
    _age(results / "net-legacy-eth0", 120)
    (results / "net-fresh-eth0").write_bytes(b"")  # maybe being written in place right now
    (results / "other-old-eth0").write_bytes(b"")
    _age(results / "other-old-eth0", 120)

    assert cache.remove_corrupt("net") == (sorted(broken), [])
    left = sorted(p.name for p in results.iterdir())
    assert left == ["net-fresh-eth0", "net-good-eth0", "net-legacy-eth0", "other-old-eth0"]
    assert cache.remove_corrupt("net", older_than=0) == (["net-fresh-eth0"], [])


def test_remove_corrupt_without_results_dir_and_with_hostile_names(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    assert cache.remove_corrupt("net") == ([], [])
    with pytest.raises(ValidationError):
        cache.remove_corrupt("../x")


def test_remove_unreadable_is_the_former_name_of_remove_corrupt(tmp_path: Path) -> None:
    # Callers of the old name keep working: a corrupt entry goes, an unreadable one stays.
    cache = ResultCache(tmp_path)
    results = tmp_path / "results"
    results.mkdir(mode=0o700)
    (results / "net-c1-eth0").write_bytes(b"{nope")
    _age(results / "net-c1-eth0", 120)
    assert cache.remove_unreadable("net") == (["net-c1-eth0"], [])
    assert list(results.iterdir()) == []


def test_an_entry_under_another_entrys_file_name_is_not_listed_and_gc_removes_it(
    tmp_path: Path,
) -> None:
    cache = ResultCache(tmp_path)
    cache.write(CacheEntry("c1", "net", "eth0", b"{}"))
    cache.write(CacheEntry("c2", "net", "eth0", b"{}"))
    results = tmp_path / "results"
    # a copy of c2's entry under c1's file name: tampered, or copied by hand
    (results / "net-c1-eth0").write_bytes((results / "net-c2-eth0").read_bytes())
    assert [e.container_id for e in cache.entries()] == ["c2"]
    assert cache.entries("c1") == []
    _age(results / "net-c1-eth0", 120)
    assert cache.remove_corrupt("net") == (["net-c1-eth0"], [])
    assert sorted(p.name for p in results.iterdir()) == ["net-c2-eth0"]


def test_an_entry_without_names_is_named_by_its_file(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    results = tmp_path / "results"
    cache.write(CacheEntry("c1", "net", "eth0", b"{}"))
    obj = json.loads((results / "net-c1-eth0").read_bytes())
    del obj["containerId"]
    (results / "net-c1-eth0").write_text(json.dumps(obj))
    _age(results / "net-c1-eth0", 120)
    assert cache.remove_corrupt("net") == ([], [])  # usable: a read names it after the file
    entry = cache.read("net", "c1", "eth0")
    assert entry is not None and entry.container_id == "c1"


# -- the directories kept open between operations ------------------------------------


def test_kept_directories_are_checked_at_every_use(tmp_path: Path) -> None:
    # results/ and records/ stay open from one operation to the next (one lstat checks
    # them): a directory replaced, planted or removed at the path is seen at the next use.
    cache = ResultCache(tmp_path)
    cache.write(CacheEntry("c1", "net", "eth0", b"{}"))
    cache.wal.write(CacheEntry("c1", "net", "eth0", b"{}", kind=libcni.cache.RECORD_V1))
    results = tmp_path / "results"
    results.rename(tmp_path / "results.old")  # moved away, and a new one made by another
    ResultCache(tmp_path).write(CacheEntry("c2", "net", "eth0", b"{}"))
    assert cache.read("net", "c1", "eth0") is None
    assert cache.read("net", "c2", "eth0") is not None
    cache.remove("net", "c2", "eth0")
    assert not (results / "net-c2-eth0").exists()
    # Planted: a symlink, a directory others can write.
    shutil.rmtree(results)
    results.symlink_to(tmp_path / "results.old")
    with pytest.raises(CacheError, match="symbolic link"):
        cache.read("net", "c1", "eth0")
    with pytest.raises(CacheError, match="symbolic link"):
        cache.write(CacheEntry("c3", "net", "eth0", b"{}"))
    assert sorted(os.listdir(tmp_path / "results.old")) == ["net-c1-eth0"]
    results.unlink()
    results.mkdir(mode=0o777)
    results.chmod(0o777)
    with pytest.raises(CacheError, match="writable by group or others"):
        cache.read("net", "c1", "eth0")
    results.rmdir()
    assert cache.read("net", "c1", "eth0") is None  # gone: nothing cached
    # records/ alike: removed, then written anew through a new descriptor.
    shutil.rmtree(tmp_path / "records")
    assert cache.read_record("net", "c1", "eth0") is None
    cache.wal.write(CacheEntry("c1", "net", "eth1", b"{}", kind=libcni.cache.RECORD_V1))
    assert os.listdir(tmp_path / "records" / "c1") == ["net-c1-eth1"]


def test_a_forked_child_opens_the_kept_directories_anew(tmp_path: Path) -> None:
    # A child forked without exec that closes every descriptor it inherited (as a daemon
    # does) and reuses their numbers must not read through a descriptor that is no longer
    # the cache's directory.
    cache = ResultCache(tmp_path)
    cache.write(CacheEntry("c1", "net", "eth0", b"{}"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "net-c1-eth0").write_text("not the entry")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.closerange(3, 1024)
            for _ in range(8):  # the lowest numbers again, on another directory
                os.open(other, os.O_RDONLY | os.O_DIRECTORY)
            entry = cache.read("net", "c1", "eth0")
            code = 0 if entry is not None and entry.container_id == "c1" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- the entry's conversions and the facade (issue 30 item 4) ---------------------------


def test_an_entry_is_made_from_a_runtime_conf_and_gives_it_back() -> None:
    rt = libcni.RuntimeConf(
        "c1",
        "/var/run/netns/c1",
        "eth0",
        args=[("K8S_POD_NAME", "web")],
        capability_args={"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
        cache_dir="/somewhere",
    )
    record = CacheEntry.from_runtime(rt, network="net", config=b"{}")
    assert record.is_record and record.result is None
    assert (record.network_name, record.config) == ("net", b"{}")
    back = record.runtime_conf(cache_dir="/somewhere")
    assert back == rt
    assert back.capability_args is not rt.capability_args  # the entry's own copy
    assert record.runtime_conf(netns="/other").netns == "/other"
    assert record.runtime_conf().cache_dir is None
    entry = CacheEntry.from_runtime(rt, network="net", config=b"{}", kind=libcni.cache.CNI_CACHE_V1)
    assert not entry.is_record


def test_every_entry_field_reaches_the_attachment_or_is_named_as_not_exposed() -> None:
    # A new CacheEntry field fails here until CacheEntry.attachment (the one place an
    # entry becomes a NetworkAttachment) says what becomes of it.
    import attrs

    not_exposed = {"result", "kind"}  # complete is told by the kind
    renamed = {"network_name": "network"}
    entry = full_entry()
    att = entry.attachment()
    for f in attrs.fields(CacheEntry):
        if f.name in not_exposed:
            continue
        assert getattr(att, renamed.get(f.name, f.name)) == getattr(entry, f.name), f.name
    assert att.complete and not entry.as_record().attachment().complete
    legacy = CacheEntry("c1", "net", "eth0", b"", result=RESULT, kind="")
    assert legacy.attachment().complete


def test_the_result_is_the_last_field_written_as_completed_json_requires() -> None:
    entry = full_entry()
    assert list(entry.to_dict())[-1] == "result"
    made = libcni.cache.completed_json(entry.as_record().to_json(), RESULT)
    assert made == entry.to_json()


def test_the_facade_is_small_and_its_parts_share_one_layout(cache: ResultCache) -> None:
    public = [n for n in dir(ResultCache) if not n.startswith("_")]
    assert len(public) <= 25, public
    parts = (cache.results, cache.wal, cache.locks, cache.cleanup)
    assert all(part.dirs is cache.dirs for part in parts)
    # A record written through the part is the one the facade lists.
    cache.wal.write(CacheEntry("c1", "net", "eth0", b"{}", kind=libcni.cache.RECORD_V1))
    assert [(r.network_name, r.ifname) for r in cache.records("c1")] == [("net", "eth0")]
