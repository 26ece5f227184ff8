"""Write-ahead records (behaviour.md §4.1, §4.3, §4.5, §4.6, §7), with the real test plugin.

ADD records the attachment in ``<cache>/records/<containerID>/`` before its
first plugin runs; the record stays until the attachment is DELeted (it is the
container's index); an attachment with a record and no entry in ``results/``
is *in progress*: DEL, GC, the cached-config getter and the attachment list
find it. Planted or broken records are refused, never DELeted on their word.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from harness import GO_CACHE_KEYS, Env
from hypothesis import given
from hypothesis import strategies as st

import libcni
from libcni import CacheError, GCArgs, GCAttachment, RuntimeConf
from libcni.cache import CNI_CACHE_V1, RECORD_V1, CacheEntry, CorruptEntryError, ResultCache
from libcni.cache._entry import completed_json
from libcni.cache._store import MAX_ENTRY_SIZE

ARGS = (("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web"))
CAPS = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}


def rt(cid: str = "ctr1", ifname: str = "eth0", netns: str = "") -> RuntimeConf:
    return RuntimeConf(
        cid, netns or f"/var/run/netns/{cid}", ifname, args=ARGS, capability_args=CAPS
    )


def record_path(env: Env, net: str = "net", cid: str = "ctr1", ifname: str = "eth0") -> Path:
    return env.cache / "records" / cid / f"{net}-{cid}-{ifname}"


def entry(**kw: Any) -> CacheEntry:
    base: dict[str, Any] = {
        "container_id": "c1",
        "network_name": "net",
        "ifname": "eth0",
        "config": b'{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"p1"}]}',
        "netns": "/var/run/netns/c1",
        "cni_args": ARGS,
        "capability_args": CAPS,
    }
    base.update(kw)
    return CacheEntry(**base)


def runs(env: Env, command: str) -> list[dict[str, Any]]:
    return [c for c in env.records() if c.get("command") == command]


# -- the record on disk -----------------------------------------------------------------


PEEK = '''\
#!{python}
"""A plugin that copies, when it runs, the attachment's record and entry (if any)."""
import json, os, sys
req = json.load(sys.stdin)
cid, ifname = os.environ["CNI_CONTAINERID"], os.environ["CNI_IFNAME"]
name = f"{{req['name']}}-{{cid}}-{{ifname}}"
seen = {{}}
for kind, path in (("record", os.path.join(req["cacheDir"], "records", cid, name)),
                   ("entry", os.path.join(req["cacheDir"], "results", name))):
    try:
        with open(path) as f:
            seen[kind] = f.read()
    except FileNotFoundError:
        seen[kind] = None
with open(req["peekOut"], "a") as f:
    f.write(json.dumps(seen) + "\\n")
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps({{"cniVersion": req["cniVersion"], "ips": [{{"address": "10.1.2.3/24"}}]}}))
'''


def install_peek(env: Env) -> Path:
    path = env.plugins / "peek"
    path.write_text(PEEK.format(python=sys.executable))
    path.chmod(0o755)
    return env.root / "peek.jsonl"


def test_add_records_the_attachment_before_its_first_plugin_runs(env: Env) -> None:
    out = install_peek(env)
    peek = {"type": "peek", "cacheDir": str(env.cache), "peekOut": str(out)}
    net = env.conflist(peek, env.plugin("p2"), name="net")
    env.cni.add_network_list(net, rt())
    [seen] = [json.loads(line) for line in out.read_text().splitlines()]
    assert seen["entry"] is None  # nothing cached yet: the plugin runs
    record = json.loads(seen["record"])
    assert record["kind"] == RECORD_V1 == "libcniRecordV1"
    assert (record["networkName"], record["containerId"], record["ifName"]) == (
        "net",
        "ctr1",
        "eth0",
    )
    assert base64.b64decode(record["config"]) == net.bytes
    assert record["netns"] == "/var/run/netns/ctr1"
    assert [tuple(p) for p in record["cniArgs"]] == list(ARGS)
    assert record["capabilityArgs"] == CAPS
    assert "result" not in record
    # Go's field order, the record's own kind, no result.
    assert list(record) == [k for k in GO_CACHE_KEYS if k != "result"]


def test_record_stays_after_add_and_goes_with_the_entry_at_del(env: Env) -> None:
    net = env.chain({}, {}, name="net")
    env.cni.add_network_list(net, rt())
    rec, ent = record_path(env), env.entry_path("net")
    assert rec.is_file() and ent.is_file()
    assert stat.S_IMODE(rec.stat().st_mode) == 0o1600  # marked complete: the sticky bit
    assert stat.S_IMODE(rec.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(rec.parent.parent.stat().st_mode) == 0o700
    assert [a.complete for a in env.cni.get_cached_attachments()] == [True]
    env.cni.del_network_list(net, rt())
    assert not rec.exists() and not ent.exists()
    assert not rec.parent.exists()  # the container's directory goes with its last record
    assert (env.cache / "records").is_dir()
    assert env.cni.get_cached_attachments() == []


def test_record_of_a_drop_in_list_holds_the_plugins_as_they_ran(env: Env) -> None:
    d = env.root / "net.d"
    (d / "dn").mkdir(parents=True)
    (d / "dn.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "dn"}))
    (d / "dn" / "10-a.conf").write_text(json.dumps(env.plugin("p1", ADD={"error": {"code": 11}})))
    net = libcni.load_conf_list(d, "dn")
    with pytest.raises(libcni.PluginError):
        env.cni.add_network_list(net, rt())
    record = env.cni.get_network_list_cached_config(net, rt())
    assert record is not None
    assert [p.type for p in libcni.conf_list_from_bytes(record[0]).plugins] == ["p1"]


def test_single_plugin_add_records_the_plugins_bytes(env: Env) -> None:
    conf = libcni.conf_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "one", **env.plugin("p1", ADD={"error": {}})})
    )
    with pytest.raises(libcni.PluginError):
        env.cni.add_network(conf, rt())
    [att] = env.cni.get_cached_attachments()
    assert (att.network, att.config, att.complete) == ("one", conf.bytes, False)


# -- an ADD that failed: in progress ----------------------------------------------------


def _failed_add(env: Env, cni: Any = None) -> libcni.NetworkConfigList:
    net = env.chain({}, {"ADD": {"error": {"code": 11, "msg": "no"}}}, {}, name="net")
    with pytest.raises(libcni.PluginError):
        (cni or env.cni).add_network_list(net, rt())
    return net


def test_failed_add_keeps_its_record_in_progress_for_every_reader(env: Env) -> None:
    net = _failed_add(env)
    assert record_path(env).is_file() and not env.entry_path("net").exists()
    [att] = env.cni.get_cached_attachments("ctr1")
    assert (att.network, att.container_id, att.ifname, att.complete) == (
        "net",
        "ctr1",
        "eth0",
        False,
    )
    assert (att.netns, att.cni_args, att.capability_args) == ("/var/run/netns/ctr1", ARGS, CAPS)
    assert att.config == net.bytes
    assert env.cni.get_network_list_cached_result(net, rt()) is None
    # The recorded configuration and runtime values, asked with none of them.
    cached = env.cni.get_network_list_cached_config(net, RuntimeConf("ctr1", "", "eth0"))
    assert cached is not None
    config, crt = cached
    assert config == net.bytes
    assert (crt.args, crt.capability_args) == (ARGS, CAPS)


def test_del_of_an_attachment_in_progress_runs_without_prevresult_then_forgets_it(
    env: Env,
) -> None:
    net = _failed_add(env)
    env.record.unlink()
    env.cni.del_network_list(net, rt())
    dels = runs(env, "DEL")
    assert [d["stdin"]["type"] for d in dels] == ["p3", "p2", "p1"]
    assert all("prevResult" not in d["stdin"] for d in dels)
    assert not record_path(env).exists()
    assert env.cni.get_cached_attachments() == []


def test_failed_del_keeps_the_entry_and_the_record(env: Env) -> None:
    net = env.chain({"DEL": {"error": {"code": 11}}}, {}, name="net")
    env.cni.add_network_list(net, rt())
    with pytest.raises(libcni.PluginError):
        env.cni.del_network_list(net, rt())
    assert record_path(env).is_file() and env.entry_path("net").is_file()
    # In progress (no entry) and its DEL fails: the record stays too.
    env.entry_path("net").unlink()
    with pytest.raises(libcni.PluginError):
        env.cni.del_network_list(net, rt())
    assert record_path(env).is_file()
    env.cni.del_network_list(env.chain({}, {}, name="net"), rt())
    assert not record_path(env).exists()


def test_async_api_records_and_forgets_alike(env: Env) -> None:
    async def main() -> None:
        cni = env.aio()
        net = _failed_net(env)
        with pytest.raises(libcni.PluginError):
            await cni.add_network_list(net, rt())
        [att] = await cni.get_cached_attachments()
        assert att.complete is False
        cached = await cni.get_network_list_cached_config(net, RuntimeConf("ctr1", "", "eth0"))
        assert cached is not None and cached[1].capability_args == CAPS
        await cni.del_network_list(net, rt())
        assert await cni.get_cached_attachments() == []
        ok = env.chain({}, name="net")
        await cni.add_network_list(ok, rt())
        assert record_path(env).is_file()
        await cni.del_network_list(ok, rt())
        assert not record_path(env).exists()

    asyncio.run(main())


def _failed_net(env: Env) -> libcni.NetworkConfigList:
    return env.chain({}, {"ADD": {"error": {"code": 11}}}, name="net")


def test_record_write_failure_runs_no_plugin(env: Env) -> None:
    (env.cache / "records").mkdir(parents=True)
    (env.cache / "records").chmod(0o777)  # planted: others could write into it
    with pytest.raises(CacheError) as info:
        env.cni.add_network_list(env.chain({}, name="net"), rt())
    assert "records" in str(info.value) and "writable by group or others" in str(info.value)
    assert runs(env, "ADD") == []
    assert not env.entry_path("net").exists()


# -- GC ----------------------------------------------------------------------------------


def test_gc_dels_stale_records_with_what_they_recorded_and_keeps_valid_ones(env: Env) -> None:
    net = env.chain({}, {"ADD": {"error": {"code": 11}}}, name="net", version="1.1.0")
    for cid in ("dead", "alive"):
        with pytest.raises(libcni.PluginError):
            env.cni.add_network_list(net, rt(cid, netns=f"/run/netns/{cid}"))
    other = env.chain({"ADD": {"error": {"code": 11}}}, name="other")
    with pytest.raises(libcni.PluginError):
        env.cni.add_network_list(other, rt("dead"))
    env.record.unlink()
    env.cni.gc_network_list(net, GCArgs([GCAttachment("alive", "eth0")]))
    dels = runs(env, "DEL")
    assert [(d["stdin"]["type"], d["env"]["CNI_CONTAINERID"]) for d in dels] == [
        ("p2", "dead"),
        ("p1", "dead"),
    ]
    for d in dels:
        assert d["env"]["CNI_NETNS"] == "/run/netns/dead"
        assert d["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
        assert "prevResult" not in d["stdin"]
    assert not record_path(env, cid="dead").exists()
    assert record_path(env, cid="alive").is_file()  # valid
    assert record_path(env, "other", "dead").is_file()  # another network's
    gcs = runs(env, "GC")
    assert gcs and all(
        g["stdin"]["cni.dev/valid-attachments"] == [{"containerID": "alive", "ifname": "eth0"}]
        for g in gcs
    )


def test_gc_without_valid_attachments_collects_complete_and_in_progress_alike(env: Env) -> None:
    net = env.chain({"ADD": {"result": {"cniVersion": "1.0.0", "ips": []}}}, name="net")
    env.cni.add_network_list(net, rt("done"))
    _failed_add(env, None)  # ctr1 in progress (its own list; same network name)
    env.record.unlink()
    asyncio.run(env.aio().gc_network_list(net))
    dels = runs(env, "DEL")
    assert sorted(d["env"]["CNI_CONTAINERID"] for d in dels) == ["ctr1", "done"]
    done = [d for d in dels if d["env"]["CNI_CONTAINERID"] == "done"]
    assert [("prevResult" in d["stdin"]) for d in done] == [True]
    assert env.cached() == [] and not (env.cache / "records" / "ctr1").exists()
    assert not (env.cache / "records" / "done").exists()


def test_failed_gc_del_keeps_the_record(env: Env) -> None:
    net = env.chain({"ADD": {"error": {"code": 11}}, "DEL": {"error": {"code": 11}}}, name="net")
    with pytest.raises(libcni.PluginError):
        env.cni.add_network_list(net, rt())
    with pytest.raises(libcni.GCError):
        env.cni.gc_network_list(net)
    assert record_path(env).is_file()


# -- what the cache refuses, and what nothing removes -----------------------------------


def test_planted_records_are_refused_never_deleted_on_their_word(env: Env) -> None:
    net = env.chain({}, name="net")
    records = env.cache / "records"
    cache = ResultCache(env.cache)
    good = entry(container_id="ctr1").as_record().to_json()
    # A container directory others can write, and one owned by another user.
    for cid, mode in (("open", 0o777), ("other", 0o700)):
        d = records / cid
        d.mkdir(parents=True)
        (d / f"net-{cid}-eth0").write_bytes(entry(container_id=cid).as_record().to_json())
        d.chmod(mode)
    os.chown(records / "other", 4242, 4242)
    # In a good directory: a symlink to a good record, an oversized one, an undecodable one.
    d = records / "ctr1"
    d.mkdir()
    (env.root / "elsewhere").write_bytes(good)
    (d / "net-ctr1-eth0").symlink_to(env.root / "elsewhere")
    with open(d / "net-ctr1-eth1", "wb") as f:
        f.truncate(MAX_ENTRY_SIZE + 1)
    (d / "net-ctr1-eth2").write_text('{"kind": "libcniRecordV1", "containerId": 5}')
    old = time.time() - 3600
    for p in d.iterdir():
        os.utime(p, (old, old), follow_symlinks=False)
    assert cache.records() == []
    assert env.cni.get_cached_attachments() == []
    (records / "linked").symlink_to(records / "open")
    for cid in ("open", "other", "linked"):
        why = "symbolic link" if cid == "linked" else "refusing to use it"
        with pytest.raises(CacheError, match=why):
            cache.records(cid)
        with pytest.raises(CacheError, match=why):
            cache.read_record("net", cid, "eth0")
        # ADD writes no record there (nor runs anything), DEL removes none.
        with pytest.raises(CacheError, match=why):
            cache.wal.write(entry(container_id=cid, ifname="eth9"))
        with pytest.raises(CacheError, match=why):
            cache.wal.remove("net", cid, "eth0")
        with pytest.raises(CacheError, match=why):
            env.cni.add_network_list(net, rt(cid))
    assert runs(env, "ADD") == []
    assert sorted(os.listdir(records / "open")) == ["net-open-eth0"]
    with pytest.raises(CorruptEntryError, match="symbolic link"):
        cache.read_record("net", "ctr1", "eth0")
    with pytest.raises(CorruptEntryError, match="larger than"):
        cache.read_record("net", "ctr1", "eth1")
    with pytest.raises(CorruptEntryError, match="containerId"):
        cache.read_record("net", "ctr1", "eth2")
    env.cni.gc_network_list(net)
    assert runs(env, "DEL") == []  # none of them was DELeted on its word
    # The unusable files of a trusted directory are removed; the refused directories stay.
    assert sorted(os.listdir(records)) == ["linked", "open", "other"]
    assert (env.root / "elsewhere").read_bytes() == good  # never through the symlink


def test_no_clean_up_of_lock_or_temporary_files_removes_a_record(env: Env) -> None:
    _failed_add(env)
    rec = record_path(env)
    old = time.time() - 100_000
    os.utime(rec, (old, old))
    os.utime(rec.parent, (old, old))
    cache = ResultCache(env.cache)
    assert cache.cleanup.remove_orphan_locks() is not None
    assert cache.cleanup.remove_stale_temporaries() == []
    assert cache.cleanup.sweep_records() == []
    assert rec.is_file()
    assert [a.complete for a in env.cni.get_cached_attachments()] == [False]


def test_sweep_removes_temporaries_of_killed_writers_only(env: Env) -> None:
    cache = ResultCache(env.cache)
    cache.wal.write(entry(container_id="c1"))
    d = env.cache / "records" / "c1"
    (d / ".net-c1-eth1").write_text('{"kind": "libcniRecordV1"')  # a killed writer's
    (d / ".net-c1-eth2").write_text("{")  # a writer that still holds its lock
    (d / "..0123456789abcdef").write_text("{")  # random, fresh
    empty = env.cache / "records" / "c2"
    empty.mkdir(mode=0o700)
    with cache.lock("net", "c1", "eth2"):
        removed = cache.cleanup.sweep_records()
    assert sorted(os.path.basename(p) for p in removed) == [".net-c1-eth1"]
    assert sorted(os.listdir(d)) == ["..0123456789abcdef", ".net-c1-eth2", "net-c1-eth0"]
    assert not empty.exists()
    old = time.time() - 3600
    os.utime(d / "..0123456789abcdef", (old, old))
    assert sorted(os.path.basename(p) for p in cache.cleanup.sweep_records()) == [
        "..0123456789abcdef",
        ".net-c1-eth2",
    ]


def test_records_sharing_a_file_name_are_told_apart(env: Env) -> None:
    # In records/x/: network "a-x-b" with interface "c", network "a" with interface "b-x-c".
    cache = ResultCache(env.cache)
    one = entry(container_id="x", network_name="a-x-b", ifname="c")
    two = entry(container_id="x", network_name="a", ifname="b-x-c")
    cache.wal.write(one)
    with pytest.raises(CacheError, match="another attachment"):
        cache.wal.write(two)
    assert cache.read_record("a", "x", "b-x-c") is None
    assert cache.wal.remove("a", "x", "b-x-c") is False
    assert cache.read_record("a-x-b", "x", "c") == one.as_record()
    cache.wal.write(attrs.evolve(one, netns="/run/netns/new"))  # its own: replaced
    assert cache.records("x")[0].netns == "/run/netns/new"
    assert cache.wal.remove("a-x-b", "x", "c") is True
    cache.wal.write(two)
    assert [r.network_name for r in cache.records()] == ["a"]


def test_a_torn_new_record_is_replaced_and_removed_by_gc(env: Env) -> None:
    # A runtime killed while writing a new record (before any plugin ran) leaves it torn.
    d = env.cache / "records" / "ctr1"
    d.mkdir(parents=True, mode=0o700)
    (env.cache / "records").chmod(0o700)
    (d / "net-ctr1-eth0").write_text('{"kind":"libcniRe')
    net = env.chain({"ADD": {"error": {"code": 11}}}, name="net")
    with pytest.raises(libcni.PluginError):
        env.cni.add_network_list(net, rt())  # replaces it
    assert json.loads(record_path(env).read_text())["kind"] == RECORD_V1
    record_path(env).write_text("")  # torn again
    env.record.unlink()
    env.cni.gc_network_list(net)
    assert runs(env, "DEL") == []
    assert not d.exists()


@pytest.mark.parametrize("torn", ["", '{"kind":"libcniRe'])
def test_a_torn_record_is_no_cached_configuration_and_del_goes_on(env: Env, torn: str) -> None:
    # A runtime killed while writing a new record (before any plugin ran): a restarted
    # runtime asking what was cached gets nothing (it DELs with the current
    # configuration, as crash_worker's recovery does), and the DEL removes the record.
    d = env.cache / "records" / "ctr1"
    d.mkdir(parents=True, mode=0o700)
    (env.cache / "records").chmod(0o700)
    (d / "net-ctr1-eth0").write_text(torn)
    net = env.chain(name="net")
    assert env.cni.get_network_list_cached_config(net, rt()) is None
    assert asyncio.run(env.aio().get_network_list_cached_config(net, rt())) is None
    env.cni.del_network_list(net, rt())
    assert not record_path(env).exists()


def test_writers_and_removers_of_one_container_never_fail_each_other() -> None:
    # A DEL removing a container's last record removes its directory while an ADD of
    # another network of the container writes there: the writer opens it again.
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cache = ResultCache(tmp)
        errors: list[BaseException] = []

        def churn(network: str) -> None:
            try:
                for _ in range(300):
                    cache.wal.write(entry(container_id="c", network_name=network))
                    assert cache.wal.remove(network, "c", "eth0") is True
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=churn, args=(f"n{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert not os.path.exists(os.path.join(tmp, "records", "c"))


# -- a runtime killed in the middle of an ADD ---------------------------------------------


RUNTIME = """
import sys
import libcni
from libcni import CNIConfig, RuntimeConf
plugins, cache, conflist = sys.argv[1:4]
net = libcni.conf_list_from_bytes(conflist.encode())
rt = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0",
                 args=[("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web")],
                 capability_args={"portMappings": [{"hostPort": 8080, "containerPort": 80,
                                                    "protocol": "tcp"}]})
CNIConfig([plugins], cache_dir=cache).add_network_list(net, rt)
"""


@pytest.mark.parametrize("killed_in", ["p1", "p2"])
def test_a_runtime_killed_during_add_is_collected_by_the_next_gc(env: Env, killed_in: str) -> None:
    tests: list[dict[str, Any]] = [{}, {}]
    tests[int(killed_in[1]) - 1] = {"ADD": {"sleep": 30, "passthrough": True}}
    caps = {"capabilities": {"portMappings": True}}
    net = env.conflist(
        {**env.plugin("p1", **tests[0]), **caps}, env.plugin("p2", **tests[1]), name="net"
    )
    env.kill_runtime_during(
        RUNTIME,
        [str(env.plugins), str(env.cache), net.bytes.decode()],
        lambda r: r.get("command") == "ADD" and r["stdin"]["type"] == killed_in,
    )
    assert env.cached() == [] and record_path(env).is_file()
    env.record.unlink()
    env.cni.gc_network_list(net)  # a restarted runtime
    dels = runs(env, "DEL")
    assert [d["stdin"]["type"] for d in dels] == ["p2", "p1"]
    assert all(d["env"]["CNI_NETNS"] == "/var/run/netns/ctr1" for d in dels)
    assert all(d["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web" for d in dels)
    assert dels[1]["stdin"]["runtimeConfig"] == CAPS  # p1 declared the capability
    assert not (env.cache / "records" / "ctr1").exists()
    assert env.cached() == []


def test_gc_reads_each_record_once_and_a_stale_entry_again_only_for_its_del(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from libcni.cache import _files

    net = env.chain({}, name="net")
    for cid in ("a", "b", "c"):
        env.cni.add_network_list(net, rt(cid))
    env.cni.add_network_list(env.chain({}, name="other"), rt("a"))
    _failed_add(env)  # ctr1, in progress
    reads: list[str] = []
    real = _files._read_ident_at

    def counting(dfd: int, name: str, path: str) -> Any:
        got = real(dfd, name, path)  # (a missing file raises: not a read)
        reads.append(path)
        return got

    monkeypatch.setattr(_files, "_read_ident_at", counting)
    env.cni.gc_network_list(net, GCArgs([GCAttachment("b", "eth0")]))
    twice = {p for p in reads if reads.count(p) > 1}
    assert reads and all(reads.count(p) == 2 and "/results/" in p for p in twice), "\n".join(
        sorted(r.split("cache")[-1] for r in reads)
    )
    assert sorted(p.rsplit("/", 1)[1] for p in twice) == ["net-a-eth0", "net-c-eth0"]
    assert not [p for p in reads if "/results/net-b-" in p]  # valid: not even read
    assert sorted(a.container_id for a in env.cni.get_cached_attachments()) == ["a", "b"]


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@given(
    names=st.tuples(_text, _text, _text),
    config=st.binary(max_size=40),
    netns=_text,
    args=st.lists(st.tuples(_text, _text), max_size=3),
    caps=st.dictionaries(_text, _json, max_size=3),
    result=st.none() | st.dictionaries(_text, _json, max_size=4),
)
def test_the_entry_made_from_a_records_json_is_the_entrys_own_json(
    names: tuple[str, str, str],
    config: bytes,
    netns: str,
    args: list[tuple[str, str]],
    caps: dict[str, Any],
    result: dict[str, Any] | None,
) -> None:
    # ADD encodes its attachment once, for the record, and reuses it for the entry.
    cid, network, ifname = names
    record = CacheEntry(cid, network, ifname, config, netns, tuple(args), caps, kind=RECORD_V1)
    made = completed_json(record.to_json(), result)
    entry = attrs.evolve(record, result=result, kind=CNI_CACHE_V1)
    assert made == entry.to_json()
    assert CacheEntry.from_json(made) == CacheEntry.from_json(entry.to_json())


# -- a record marked complete (issue 28): another tool's DEL or GC ----------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_completed_add_marks_its_record_and_an_unfinished_one_does_not(env: Env) -> None:
    env.cni.add_network_list(env.chain({}, name="net"), rt())
    assert _mode(record_path(env)) == 0o1600  # the mark: the sticky bit, one fchmod
    _failed_add(env, cni=env.sync())  # the same attachment again, failing: a new record
    assert _mode(record_path(env)) == 0o600
    ResultCache(env.cache).wal.write(entry(container_id="ctr2"))
    assert _mode(record_path(env, cid="ctr2")) == 0o600

    async def main() -> None:
        await env.aio().add_network_list(env.chain({}, name="net"), rt("ctr3"))

    asyncio.run(main())
    assert _mode(record_path(env, cid="ctr3")) == 0o1600


def _deleted_by_another_tool(env: Env) -> libcni.NetworkConfigList:
    """A complete ADD whose entry a tool that knows only ``results/`` removed (Go's DEL or
    GC, cnitool): what is left is its record, marked complete."""
    net = env.chain({}, {}, name="net")
    env.cni.add_network_list(net, rt())
    env.entry_path("net").unlink()
    env.record.unlink()
    return net


@pytest.mark.parametrize("reader", ["list", "list one", "config", "result", "gc", "gc valid"])
def test_a_complete_record_whose_entry_is_gone_is_dropped_where_found(
    env: Env, reader: str
) -> None:
    net = _deleted_by_another_tool(env)
    if reader == "list":
        assert env.cni.get_cached_attachments() == []
    elif reader == "list one":
        assert env.cni.get_cached_attachments("ctr1") == []
    elif reader == "config":
        assert env.cni.get_network_list_cached_config(net, rt()) is None
    elif reader == "result":
        assert env.cni.get_network_list_cached_result(net, rt()) is None
        assert record_path(env).exists()  # no record read: nothing to drop
        return
    else:
        valid = [GCAttachment("other", "eth0")] if reader == "gc valid" else []
        env.cni.gc_network_list(net, GCArgs(valid))
    assert env.records() == []  # no DEL
    assert not record_path(env).exists() and not record_path(env).parent.exists()
    assert env.cni.get_cached_attachments() == []
    env.cni.gc_network_list(net)
    assert env.records() == []


def test_a_complete_record_is_never_in_progress_for_the_async_api(env: Env) -> None:
    net = _deleted_by_another_tool(env)

    async def main() -> None:
        cni = env.aio()
        assert await cni.get_cached_attachments() == []
        await cni.gc_network_list(net)

    asyncio.run(main())
    assert env.records() == [] and not record_path(env).exists()


def test_a_complete_record_with_an_unusable_entry_is_still_deleted(env: Env) -> None:
    # Its entry is there but cannot be used: the attachment was not DELeted by anyone, so
    # the record is what finds it, as before the mark existed.
    net = env.chain({}, name="net")
    env.cni.add_network_list(net, rt())
    env.entry_path("net").write_bytes(b"{not json")
    env.record.unlink()
    assert [a.complete for a in env.cni.get_cached_attachments()] == [False]
    env.cni.gc_network_list(net)  # too fresh to be removed: a writer may be filling it
    assert runs(env, "DEL") == [] and _mode(record_path(env)) == 0o1600
    old = time.time() - 60
    os.utime(env.entry_path("net"), (old, old))
    # GC removes the entry (unusable) and the record, unmarked, finds the attachment.
    env.cni.gc_network_list(net)
    dels = runs(env, "DEL")
    assert [d["stdin"]["type"] for d in dels] == ["p1"] and "prevResult" not in dels[0]["stdin"]
    assert not record_path(env).exists() and env.cached() == []


def test_a_record_without_the_mark_keeps_the_rule_of_earlier_versions(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written by libcni before the mark, or by a runtime killed between the entry's write
    # and the mark: complete while its entry exists, in progress (DELeted again) without.
    from libcni.cache import OpenRecord

    monkeypatch.setattr(OpenRecord, "complete", lambda self: None)
    net = env.chain({}, name="net")
    env.cni.add_network_list(net, rt())
    assert _mode(record_path(env)) == 0o600
    assert [a.complete for a in env.cni.get_cached_attachments()] == [True]
    env.entry_path("net").unlink()
    env.record.unlink()
    assert [a.complete for a in env.cni.get_cached_attachments()] == [False]
    env.cni.gc_network_list(net)
    assert [d["stdin"]["type"] for d in runs(env, "DEL")] == ["p1"]
    assert not record_path(env).exists()


def test_a_complete_record_is_not_dropped_while_its_attachment_is_locked(env: Env) -> None:
    net = _deleted_by_another_tool(env)
    cache = ResultCache(env.cache)
    with cache.lock("net", "ctr1", "eth0"):  # an ADD of it may be writing a new record
        assert env.cni.get_cached_attachments() == []
        assert record_path(env).exists()
    assert env.cni.get_network_list_cached_config(net, rt()) is None
    assert not record_path(env).exists()


# -- the size cap (§4.1, §7) -------------------------------------------------------------


def test_an_add_whose_record_exceeds_the_size_cap_fails_before_any_plugin_runs(
    env: Env,
) -> None:
    # A huge pod annotation, passed as a capability argument no plugin declares: the plugins
    # would never see it, but the record (and the entry) would hold it.
    big = {"io.kubernetes.cri.pod-annotations": {"a": "x" * MAX_ENTRY_SIZE}}
    with pytest.raises(CacheError) as info:
        env.cni.add_network_list(
            env.chain({}, name="net"),
            RuntimeConf("ctr1", "/run/netns/c", "eth0", capability_args=big),
        )
    assert "size cap of 16 MiB" in str(info.value) and "records/ctr1/net-ctr1-eth0" in str(
        info.value
    )
    assert env.records() == []  # no plugin ran
    assert not record_path(env).exists() and env.cached() == []
    assert env.cni.get_cached_attachments() == []


def test_no_entry_or_record_over_the_size_cap_is_ever_written(env: Env) -> None:
    cache = ResultCache(env.cache)
    result = {"cniVersion": "1.0.0", "dns": {"options": ["x" * MAX_ENTRY_SIZE]}}
    with pytest.raises(CacheError) as info:
        cache.write(entry(result=result))
    assert "size cap of 16 MiB" in str(info.value) and "results/net-c1-eth0" in str(info.value)
    with pytest.raises(CacheError, match="size cap of 16 MiB"):
        cache.wal.write(entry(capability_args={"a": "x" * MAX_ENTRY_SIZE}))
    assert env.cached() == [] and not (env.cache / "records" / "c1").exists()
    # Just under the cap: written, and read back.
    fits = entry(capability_args={"a": "x" * (MAX_ENTRY_SIZE - 400)})
    cache.write(fits)
    assert cache.read("net", "c1", "eth0") == fits
