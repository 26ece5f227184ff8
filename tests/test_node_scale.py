"""What one container and one GC cost when the cache holds many (behaviour.md §4.6, §11.3, §11.4).

Complexity, counted, never timed: the files a teardown, check or inspect of
one container opens and the directories it lists do not depend on how many
other containers are cached (the container's records directory is its
index); one ``NetworkManager.gc`` lists the cache once and reads each entry
at most once however many networks it collects, and not at all the entries
of valid containers whose file names settle whose they are. Real plugin
runs (``tests/plugins/testplugin``); the other containers' files are
written as a libcni ADD (or the Go library) leaves them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_manager import Env

import libcni
from libcni import GCError, NetworkManager, TeardownError
from libcni.cache import RECORD_V1, CacheEntry, ResultCache


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    e = Env(tmp_path)
    monkeypatch.setenv("TESTPLUGIN_RECORD", str(e.record))
    return e


def conf(name: str, version: str = "1.0.0") -> bytes:
    plugins = [{"type": "testplugin"}]
    return json.dumps({"cniVersion": version, "name": name, "plugins": plugins}).encode()


RESULT = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]}


def leave(
    cache: ResultCache,
    network: str,
    cid: str,
    ifname: str = "eth0",
    *,
    record: bool = True,
    entry: bool = True,
    version: str = "1.0.0",
) -> None:
    """What an ADD of libcni leaves (its record, then its entry); ``record=False``: the Go
    library's (the entry alone); ``entry=False``: an ADD that died (the record alone)."""
    e = CacheEntry(cid, network, ifname, conf(network, version), f"/run/netns/{cid}", (), {})
    if record:
        cache.wal.write(attrs.evolve(e, kind=RECORD_V1))
    if entry:
        cache.write(attrs.evolve(e, result=RESULT))


class FileOps:
    """The directories listed and the files opened under ``root``, by path."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.listed: Counter[str] = Counter()
        self.opened: Counter[str] = Counter()

    def _path(self, name: Any, dir_fd: int | None) -> str | None:
        if isinstance(name, int):
            path = os.readlink(f"/proc/self/fd/{name}")
        else:
            path = os.fsdecode(name)
            if dir_fd is not None and not os.path.isabs(path):
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        path = os.path.normpath(path)
        if not path.startswith(self.root):
            return None
        return os.path.relpath(path, self.root)

    @contextmanager
    def counting(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[FileOps]:
        real_listdir, real_scandir, real_open = os.listdir, os.scandir, os.open

        def listdir(path: Any = ".") -> list[str]:
            where = self._path(path, None)
            if where is not None:
                self.listed[where] += 1
            return real_listdir(path)

        def scandir(path: Any = ".") -> Any:
            where = self._path(path, None)
            if where is not None:
                self.listed[where] += 1
            return real_scandir(path)

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            where = self._path(path, dir_fd)
            if where is not None:
                self.opened[where] += 1
            return real_open(path, flags, mode, dir_fd=dir_fd)

        with monkeypatch.context() as m:
            m.setattr(os, "listdir", listdir)
            m.setattr(os, "scandir", scandir)
            m.setattr(os, "open", open_)
            yield self


def _generic(ops: FileOps) -> tuple[Counter[str], Counter[str]]:
    """The counts with the container's own names left as they are (the same in every run)."""
    return ops.listed, ops.opened


def _container_ops(
    env: Env, monkeypatch: pytest.MonkeyPatch, others: int, *, go_style: bool = False
) -> dict[str, tuple[Counter[str], Counter[str]]]:
    """Set up "target" on network a (and loopback), with ``others`` other containers
    cached; the files each of inspect, check and teardown of it lists and opens."""
    cache = ResultCache(env.cache)
    for i in range(others):
        leave(cache, "a", f"other{i:04d}")
        leave(cache, "cni-loopback", f"other{i:04d}", "lo")
    m = env.manager()
    m.setup("target", "/run/netns/target")
    if go_style:  # set up by the Go library or an older libcni: entries, no records
        for p in (env.cache / "records" / "target").iterdir():
            p.unlink()
        (env.cache / "records" / "target").rmdir()
    out = {}
    for name, call in (
        ("inspect", lambda: m.inspect("target")),
        ("check", lambda: m.check("target")),
        ("teardown", lambda: m.teardown("target")),
    ):
        with FileOps(env.cache).counting(monkeypatch) as ops:
            call()
        out[name] = _generic(ops)
    return out


def test_teardown_check_and_inspect_cost_the_same_whatever_else_is_cached(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("10-a.conflist", "a")
    alone = _container_ops(env, monkeypatch, 0)
    (tmp_path / "crowded").mkdir()
    crowded_env = Env(tmp_path / "crowded")
    crowded_env.conf = env.conf  # the same configuration
    crowded = _container_ops(crowded_env, monkeypatch, 300)
    for op in ("inspect", "check", "teardown"):
        listed, opened = crowded[op]
        assert (listed, opened) == alone[op], op  # file for file, listing for listing
        # Only the container's own records directory is listed, never results/.
        assert set(listed) <= {"records/target"}, (op, listed)
        assert not any(p.startswith("results/") and "target" not in p for p in opened), opened
    assert crowded["inspect"][0] == Counter({"records/target": 1})
    # What each teardown DELeted (one record file for both): its two attachments alone.
    assert [(c[0], c[1]) for c in env.calls() if c[0] == "DEL"] == [
        ("DEL", "a"),
        ("DEL", "cni-loopback"),
    ] * 2
    assert sorted(os.listdir(crowded_env.cache / "records")) == [
        f"other{i:04d}" for i in range(300)
    ]


def test_a_container_without_records_is_found_by_a_listing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set up by the Go library (or a libcni before records): teardown, check and inspect
    # find its entries in results/, and teardown DELs them.
    env.write("10-a.conflist", "a")
    ops = _container_ops(env, monkeypatch, 20, go_style=True)
    for op in ("inspect", "check", "teardown"):
        assert ops[op][0]["results"] == 1, op
    assert [c[:2] for c in env.calls() if c[0] == "DEL"] == [("DEL", "a"), ("DEL", "cni-loopback")]
    assert not any("target" in name for name in env.cached())


def test_inspect_sees_complete_and_in_progress_attachments_through_the_index(env: Env) -> None:
    env.write("10-a.conflist", "a")
    cache = ResultCache(env.cache)
    leave(cache, "a", "c1")
    leave(cache, "b", "c1", "eth1", entry=False)  # its ADD died
    leave(cache, "a", "c2")  # another container
    view = env.manager().inspect("c1")
    assert [a.network for a in view.attachments] == ["a"]
    assert view.incomplete == (("b", "eth1"),)
    assert view.netns == "/run/netns/c1"


# -- gc ---------------------------------------------------------------------------------


@contextmanager
def reads_and_listings(monkeypatch: pytest.MonkeyPatch, root: Path) -> Iterator[dict[str, Any]]:
    """The entry and record files read (by path) and the directories listed, during GC."""
    from libcni.cache import _files

    seen: dict[str, Any] = {"reads": Counter()}
    real = _files._read_ident_at

    def counting(dfd: int, name: str, path: str) -> Any:
        got = real(dfd, name, path)  # (a missing file raises: not a read)
        seen["reads"][os.path.relpath(path, root)] += 1
        return got

    monkeypatch.setattr(_files, "_read_ident_at", counting)
    with FileOps(root).counting(monkeypatch) as ops:
        seen["ops"] = ops
        yield seen


def _age(path: Path, seconds: float = 600) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_one_gc_lists_the_cache_once_and_reads_only_what_each_network_needs(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in "abc":
        env.write(f"10-{n}.conflist", n, version="1.1.0")
    cache = ResultCache(env.cache)
    valid = [f"{i:08x}" for i in range(20)]  # IDs without a dash: the names settle it
    for cid in valid:
        for n in "abc":
            leave(cache, n, cid, version="1.1.0")
    go_valid = [f"go-{i}" for i in range(5)]  # the Go library's, IDs with a dash
    for cid in go_valid:
        leave(cache, "b", cid, record=False, version="1.1.0")
    leave(cache, "a", "dead-1", entry=False, version="1.1.0")  # an ADD that died
    leave(cache, "c", "dead2", entry=False, version="1.1.0")
    _age(env.cache / "results")
    m = env.manager(loopback=False)
    with reads_and_listings(monkeypatch, env.cache) as seen:
        m.gc([*valid, *go_valid])
    reads, ops = seen["reads"], seen["ops"]
    # One listing of results/ and of records/ for the whole run, and of each container.
    assert ops.listed["results"] == 1, ops.listed
    assert ops.listed["records"] == 1
    assert all(n == 1 for n in ops.listed.values()), ops.listed
    # Each file read at most once; valid containers' entries not at all when their names
    # settle whose they are (IDs without a dash), once when they do not.
    assert all(n == 1 for n in reads.values()), reads
    assert not [p for p in reads if p.startswith("results/") and not p.startswith("results/b-go-")]
    assert sorted(p for p in reads if p.startswith("results/")) == [
        f"results/b-{cid}-eth0" for cid in go_valid
    ]
    assert sorted(p for p in reads if p.startswith("records/")) == [
        "records/dead-1/a-dead-1-eth0",
        "records/dead2/c-dead2-eth0",
    ]
    # ...and each network got its own attachments, and collected its dead ADD.
    gcs = {r["stdin"]["name"]: r["stdin"] for r in env.runs() if r["command"] == "GC"}
    for n in "abc":
        got = {(a["containerID"], a["ifname"]) for a in gcs[n]["cni.dev/valid-attachments"]}
        expected = {(cid, "eth0") for cid in valid}
        expected |= {(cid, "eth0") for cid in go_valid} if n == "b" else set()
        assert got == expected, n
        assert gcs[n]["cni.dev/attachments"] == gcs[n]["cni.dev/valid-attachments"]
    dels = [
        (r["stdin"]["name"], r["env"]["CNI_CONTAINERID"])
        for r in env.runs()
        if r["command"] == "DEL"
    ]
    assert sorted(dels) == [("a", "dead-1"), ("c", "dead2")]
    assert not (env.cache / "records" / "dead-1").exists()


def test_gc_reads_an_entry_once_across_networks_and_after_the_cache_changed(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Names that two networks can claim (network "x" and "x-y"), containers with dashes,
    # stale entries whose DEL changes results/ under the next network's lock.
    env.write("10-x.conflist", "x", version="1.1.0")
    env.write("20-xy.conflist", "x-y", version="1.1.0")
    cache = ResultCache(env.cache)
    leave(cache, "x", "y-1", record=False)  # x-y-1-eth0: x's or x-y's by its name
    leave(cache, "x-y", "1-a", record=False)  # x-y-1-a-eth0
    leave(cache, "x", "y-2", record=False)  # stale
    leave(cache, "x-y", "3", record=False)  # stale
    with reads_and_listings(monkeypatch, env.cache) as seen:
        env.manager(loopback=False).gc(["y-1", "1-a"])
    # Once each, but a stale entry twice: its network's scan, then its DEL.
    twice = sorted(path for path, n in seen["reads"].items() if n != 1)
    assert twice == ["results/x-y-2-eth0", "results/x-y-3-eth0"], seen["reads"]
    assert all(seen["reads"][path] == 2 for path in twice)
    dels = sorted(
        (r["stdin"]["name"], r["env"]["CNI_CONTAINERID"])
        for r in env.runs()
        if r["command"] == "DEL"
    )
    assert dels == [("x", "y-2"), ("x-y", "3")]
    assert env.cached() == ["x-y-1-a-eth0", "x-y-1-eth0"]
    gcs = {
        r["stdin"]["name"]: r["stdin"]["cni.dev/valid-attachments"]
        for r in env.runs()
        if r["command"] == "GC"
    }
    assert gcs == {
        "x": [{"containerID": "y-1", "ifname": "eth0"}],
        "x-y": [{"containerID": "1-a", "ifname": "eth0"}],
    }


def test_gc_sees_an_entry_a_valid_container_added_after_the_listing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listing is made under the first network's lock: an ADD of another network that
    # completes after it and before that network's GC lock is seen (results/ is listed
    # again when it changed), so the plugins' GC is told it is valid.
    from libcni.cache._gc import GCScan

    env.write("10-a.conflist", "a", version="1.1.0")
    env.write("20-b.conflist", "b", version="1.1.0")
    cache = ResultCache(env.cache)
    real = GCScan.survey

    def survey(self: GCScan, *args: Any) -> None:
        real(self, *args)
        leave(cache, "b", "late", version="1.1.0")  # after the listing, under a's lock

    monkeypatch.setattr(GCScan, "survey", survey)
    env.manager(loopback=False).gc(["late"])
    gcs = {r["stdin"]["name"]: r["stdin"] for r in env.runs() if r["command"] == "GC"}
    assert gcs["b"]["cni.dev/valid-attachments"] == [{"containerID": "late", "ifname": "eth0"}]
    assert gcs["a"]["cni.dev/valid-attachments"] == []
    assert "DEL" not in [r["command"] for r in env.runs()]


# -- a DEL that trips over the state an interrupted ADD left -------------------------


def _del_fails_once(env: Env, network: str) -> bytes:
    counter = env.root / f"counter-{network}"
    plugin = {
        "type": "testplugin",
        "test": {
            "DEL": {
                "error": {"code": 999, "msg": "Chain does not exist"},
                "times": 1,
                "counter": str(counter),
            }
        },
    }
    return json.dumps({"cniVersion": "1.0.0", "name": network, "plugins": [plugin]}).encode()


def test_gc_tries_the_del_of_an_attachment_in_progress_once_more(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    config = _del_fails_once(env, "a")
    (env.conf / "10-a.conflist").write_bytes(config)
    ResultCache(env.cache).wal.write(
        CacheEntry("dead", "a", "eth0", config, "/run/netns/dead", (), {}, kind=RECORD_V1)
    )
    with caplog.at_level(logging.WARNING, logger="libcni"):
        env.manager(loopback=False).gc([])  # no error: the second DEL succeeded
    dels = [r for r in env.runs() if r["command"] == "DEL"]
    assert len(dels) == 2
    assert not (env.cache / "records" / "dead").exists()
    [warning] = [r for r in caplog.records if "once more" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "Chain does not exist" in warning.getMessage()


def test_gc_does_not_try_a_failed_del_of_a_complete_entry_again(env: Env) -> None:
    config = _del_fails_once(env, "a")
    (env.conf / "10-a.conflist").write_bytes(config)
    cache = ResultCache(env.cache)
    e = CacheEntry("dead", "a", "eth0", config, "/run/netns/dead", (), {})
    cache.wal.write(attrs.evolve(e, kind=RECORD_V1))
    cache.write(attrs.evolve(e, result=RESULT))
    with pytest.raises(GCError) as info:
        env.manager(loopback=False).gc([])
    assert [e.code for e in info.value.errors] == [999]
    assert len([r for r in env.runs() if r["command"] == "DEL"]) == 1
    assert env.cached() == ["a-dead-eth0"]  # kept for the next GC, which succeeds
    env.manager(loopback=False).gc([])
    assert env.cached() == []


def test_gc_of_a_record_whose_del_fails_twice_reports_it_and_keeps_it(env: Env) -> None:
    plugin = {"type": "testplugin", "test": {"DEL": {"error": {"code": 999, "msg": "no"}}}}
    config = json.dumps({"cniVersion": "1.0.0", "name": "a", "plugins": [plugin]}).encode()
    (env.conf / "10-a.conflist").write_bytes(config)
    ResultCache(env.cache).wal.write(
        CacheEntry("dead", "a", "eth0", config, "/run/netns/dead", (), {}, kind=RECORD_V1)
    )
    with pytest.raises(GCError) as info:
        env.manager(loopback=False).gc([])
    assert [e.code for e in info.value.errors] == [999]
    assert len([r for r in env.runs() if r["command"] == "DEL"]) == 2
    assert (env.cache / "records" / "dead" / "a-dead-eth0").is_file()


# -- messages -------------------------------------------------------------------------


def test_a_cached_configuration_that_cannot_be_used_names_where_networks_come_from(
    env: Env,
) -> None:
    # conf_dir=None: the message names the networks given to the manager, not "in None".
    cache = ResultCache(env.cache)
    bad = CacheEntry("c1", "gone", "eth0", b"{not json", "/run/netns/c1", (), {})
    cache.wal.write(attrs.evolve(bad, kind=RECORD_V1))
    cache.write(attrs.evolve(bad, result=RESULT))
    net = libcni.conf_list_from_bytes(conf("a"))
    m = NetworkManager(None, [env.bin], networks=[net], cache_dir=env.cache, loopback=False)
    with pytest.raises(TeardownError) as info:
        m.teardown("c1")
    [error] = info.value.errors
    assert "among the networks given to the manager" in str(error), str(error)
    assert "in None" not in str(error)


def _networks_in_flight(events: list[libcni.Event]) -> int:
    """The most network GCs of one manager GC under way at once, from their events."""
    now = most = 0
    for e in events:
        if e.kind == "network":
            now += 1 if e.phase == "start" else -1
            most = max(most, now)
    return most


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gc_collects_the_networks_one_after_the_other(env: Env, mode: str) -> None:
    # Each network is collected as alone (its own valid attachments, its stale entry
    # DELeted), one at a time, each a network event; the failure of one is reported with
    # the others collected.
    names = [f"n{i}" for i in range(4)]
    failing = {"type": "testplugin", "test": {"GC": {"error": {"code": 7, "msg": "no"}}}}
    for i, n in enumerate(names):
        plugin = failing if i == 1 else {"type": "testplugin"}
        env.write(f"{i:02d}-{n}.conflist", n, plugin, version="1.1.0")
    env.write("20-old.conflist", "old")  # 1.0.0: no GC request, its stale entry DELeted
    cache = ResultCache(env.cache)
    for n in [*names, "old"]:
        leave(cache, n, "alive", version="1.1.0")
        leave(cache, n, "gone", version="1.1.0")
    seen: list[libcni.Event] = []
    if mode == "sync":
        m = env.manager(loopback=False, observers=[seen.append])
        with pytest.raises(GCError) as info:
            m.gc(["alive"])
    else:
        import asyncio

        am = env.amanager(loopback=False, observers=[seen.append])
        with pytest.raises(GCError) as info:
            asyncio.run(am.gc(["alive"]))
    [error] = info.value.errors
    assert "no" in str(error)
    assert _networks_in_flight(seen) == 1
    starts = [e.network for e in seen if e.kind == "network" and e.phase == "start"]
    assert starts == [*names, "old"]
    gcs = {r["stdin"]["name"]: r["stdin"] for r in env.runs() if r["command"] == "GC"}
    assert sorted(gcs) == sorted(names)
    for n in names:
        assert gcs[n]["cni.dev/valid-attachments"] == [{"containerID": "alive", "ifname": "eth0"}]
    dels = sorted(
        (r["stdin"]["name"], r["env"]["CNI_CONTAINERID"])
        for r in env.runs()
        if r["command"] == "DEL"
    )
    assert dels == [(n, "gone") for n in sorted([*names, "old"])]
    assert env.cached() == sorted(f"{n}-alive-eth0" for n in [*names, "old"])


def test_gc_right_after_adds_lists_the_cache_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A runtime's GC often follows ADDs closely. results/ changed a few ticks of the
    # kernel's clock before the listing cannot change later without a newer timestamp:
    # the listing is trusted for every network (not listed again under each lock).
    names = [f"n{i}" for i in range(6)]
    for n in names:
        env.write(f"10-{n}.conflist", n)
    cache = ResultCache(env.cache)
    for n in names:
        leave(cache, n, "alive")
    time.sleep(0.05)  # five ticks at HZ = 100
    with reads_and_listings(monkeypatch, env.cache) as seen:
        env.manager(loopback=False).gc(["alive"])
    assert seen["ops"].listed["results"] == 1, seen["ops"].listed
    assert env.cached() == sorted(f"{n}-alive-eth0" for n in names)


def test_the_lock_directories_are_opened_once_for_many_locks(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # locks/, locks/networks and locks/containers stay open from one lock to the next
    # (checked with one lstat each): taking a lock opens its lock file and nothing else.
    cache = ResultCache(env.cache)
    cache.lock("n", "warm", "eth0").release()
    cache.network_lock("n", exclusive=False).release()
    cache.container_lock("warm").release()
    with FileOps(env.cache).counting(monkeypatch) as ops:
        for i in range(20):
            cache.network_lock(f"n{i}", exclusive=False).release()
            cache.lock(f"n{i}", f"c{i}", "eth0").release()
            cache.container_lock(f"c{i}").release()
    dirs = {
        p: n for p, n in ops.opened.items() if p in ("locks", "locks/networks", "locks/containers")
    }
    assert dirs == {}, ops.opened
    assert sum(ops.opened.values()) == 60  # the lock files


def test_a_cancelled_async_gc_stops_the_network_in_flight_and_starts_no_more(env: Env) -> None:
    # Cancelled while the first network's plugin runs: that plugin is killed and reaped,
    # the other networks never start, and every network lock is free again.
    import asyncio

    names = [f"n{i}" for i in range(3)]
    slow = {"type": "testplugin", "test": {"GC": {"sleep": 30}}}
    for i, n in enumerate(names):
        env.write(f"{i:02d}-{n}.conflist", n, slow, version="1.1.0")

    async def main() -> None:
        task = asyncio.ensure_future(env.amanager(loopback=False).gc([]))
        for _ in range(1000):  # until the first plugin runs (at most 20 s)
            if [r for r in env.runs() if r["command"] == "GC"]:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # (no further start comes meanwhile)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    gcs = [r for r in env.runs() if r["command"] == "GC"]
    assert [r["stdin"]["name"] for r in gcs] == ["n0"]
    with pytest.raises(ProcessLookupError):
        os.kill(gcs[0]["pid"], 0)  # killed and reaped
    cache = ResultCache(env.cache)
    for n in names:
        lk = cache.try_network_lock(n, exclusive=True)
        assert lk is not None, n
        lk.release()
