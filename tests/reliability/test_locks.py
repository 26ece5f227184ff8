"""Cache locks under faults (behaviour.md §6.3 timeouts, §7 locks).

- A wait for a cache lock that another process holds ends with
  ``LockTimeoutError`` within the operation's timeout (sync and async ADD,
  CHECK, DEL, and GC behind a running ADD).
- A child forked without exec (``os.fork``, a ``multiprocessing`` worker)
  does not keep the runtime's locks alive after the runtime is killed.
- Lock files go away with their entries, GC sweeps the unheld orphans, and
  exclusion holds while lock files are removed (by the clean-up, or by an
  operator removing ``locks/``).
- ``results/``, ``locks/`` and ``locks/networks/`` planted by another user, or
  writable by others, are refused.

Every lock holder here is a real second process (or thread), every fork a
real ``fork``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import kill_quietly, python_env, wait_gone

import libcni
from libcni import (
    CacheError,
    GCArgs,
    GCAttachment,
    GCError,
    LockTimeoutError,
    PluginError,
    PluginTimeoutError,
    RuntimeConf,
)
from libcni.aio import AsyncCNIConfig
from libcni.cache import ResultCache
from libcni.invoke import RawExec

from .conftest import HERE, Env, require_root
from .lock_worker import hammer

pytestmark = pytest.mark.env(cls=Env)

TIMEOUT = 0.5
SLACK = 2.0  # a loaded machine (2 cores, several test suites) may be that late

_HOLD = """
import sys, time
from libcni.cache import ResultCache
cache = ResultCache(sys.argv[1])
if sys.argv[2] == "attachment":
    lock = cache.lock(sys.argv[3], sys.argv[4], sys.argv[5])
else:
    lock = cache.network_lock(sys.argv[3], exclusive=sys.argv[4] == "exclusive")
print("held", flush=True)
sys.stdin.readline()  # until the test says so (or dies)
lock.release()
"""


@contextlib.contextmanager
def held_elsewhere(cache: Path, *what: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding a lock (``attachment NET CID IF`` or ``network NET MODE``).

    It releases the lock when a line is written to its stdin, and is killed on exit.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(cache), *what],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def let_go(proc: subprocess.Popen[str]) -> None:
    """Make a ``held_elsewhere`` process release its lock and exit."""
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    proc.wait(timeout=10)


def aio(env: Env) -> AsyncCNIConfig:
    return AsyncCNIConfig([env.plugins], cache_dir=env.cache, exec=RawExec(grace=0.3))


def run(
    env: Env, api: str, command: str, net: libcni.NetworkConfigList, rt: RuntimeConf, **kw: Any
) -> Any:
    """One operation through the sync or the async API."""
    if api == "sync":
        cni = env.cni
        call = {
            "ADD": cni.add_network_list,
            "CHECK": cni.check_network_list,
            "DEL": cni.del_network_list,
        }[command]
        return call(net, rt, **kw)
    acni = aio(env)
    acall = {
        "ADD": acni.add_network_list,
        "CHECK": acni.check_network_list,
        "DEL": acni.del_network_list,
    }[command]
    return asyncio.run(acall(net, rt, **kw))


def gc(
    env: Env, api: str, net: libcni.NetworkConfigList, args: GCArgs | None = None, **kw: Any
) -> None:
    if api == "sync":
        env.cni.gc_network_list(net, args, **kw)
    else:
        asyncio.run(aio(env).gc_network_list(net, args, **kw))


def wait_for_call(env: Env, command: str, timeout: float = 10.0) -> None:
    """Wait until a plugin has recorded a ``command`` call (it then runs, under its locks)."""
    env.wait_for_call(lambda c: c.get("command") == command, timeout=timeout)


# -- timeouts bound the wait for a lock (item 5) ------------------------------------


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("command", ["ADD", "CHECK", "DEL"])
def test_wait_for_a_lock_another_process_holds_ends_with_lock_timeout_error(
    env: Env, api: str, command: str
) -> None:
    net = env.conflist()
    if command != "ADD":
        env.cni.add_network_list(net, env.rt)
    before = env.entry_path().read_bytes() if command != "ADD" else None
    calls = len(env.calls())
    with held_elsewhere(env.cache, "attachment", "testnet", "ctr1", "eth0"):
        start = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            run(env, api, command, net, env.rt, timeout=TIMEOUT)
        waited = time.monotonic() - start
    e = info.value
    assert isinstance(e, CacheError) and isinstance(e, TimeoutError)
    assert e.code == 11
    assert TIMEOUT * 0.9 <= waited < TIMEOUT + SLACK, waited
    for name in (command, "'testnet'", "'ctr1'", "'eth0'", "0.5s"):
        assert name in e.msg, e.msg
    assert e.details == str(env.cache / "locks" / "testnet-ctr1-eth0")
    assert len(env.calls()) == calls, "a plugin ran without the attachment's lock"
    if before is None:
        assert not env.entry_path().exists()
    else:
        assert env.entry_path().read_bytes() == before


@pytest.mark.parametrize("api", ["sync", "async"])
def test_gc_behind_a_running_add_ends_with_lock_timeout_error(env: Env, api: str) -> None:
    slow = env.conflist(env.plugin(ADD={"sleep": 60}), version="1.1.0")
    adder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, libcni\n"
            "cni = libcni.CNIConfig([sys.argv[1]], cache_dir=sys.argv[2])\n"
            "cni.add_network_list(libcni.conf_list_from_bytes(sys.argv[3].encode()),\n"
            "                     libcni.RuntimeConf('busy', '/var/run/netns/busy', 'eth0'))\n",
            str(env.plugins),
            str(env.cache),
            slow.bytes.decode(),
        ],
        env=python_env(),
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_call(env, "ADD")  # the ADD holds the network's lock, shared
        start = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            gc(env, api, env.conflist(version="1.1.0"), timeout=TIMEOUT)
        waited = time.monotonic() - start
    finally:
        adder.kill()
        adder.wait()
    assert TIMEOUT * 0.9 <= waited < TIMEOUT + SLACK, waited
    assert "GC" in info.value.msg and "network 'testnet'" in info.value.msg, info.value.msg
    assert [c["command"] for c in env.calls()] == ["ADD"], "GC ran beside an ADD"


def test_time_spent_waiting_for_a_lock_counts_against_the_timeout(env: Env) -> None:
    net = env.conflist(env.plugin(ADD={"sleep": 1.0, "passthrough": True}))
    with held_elsewhere(env.cache, "attachment", "testnet", "ctr1", "eth0") as holder:
        threading.Timer(0.6, let_go, (holder,)).start()
        start = time.monotonic()
        # 0.6s waiting for the lock + 1.0s of plugin > 1.2s.
        with pytest.raises(PluginTimeoutError):
            env.cni.add_network_list(net, env.rt, timeout=1.2)
        assert time.monotonic() - start < 1.2 + 0.3 + SLACK


# -- a child forked without exec does not keep the locks (item 9) --------------------

_RUNTIME = """
import multiprocessing, os, sys, threading, time
import libcni
plugins, cache, conf, record, how = sys.argv[1:6]
cni = libcni.CNIConfig([plugins], cache_dir=cache)
net = libcni.conf_list_from_bytes(conf.encode())
rt = libcni.RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0")
threading.Thread(target=cni.add_network_list, args=(net, rt), daemon=True).start()
while not (os.path.exists(record) and os.path.getsize(record)):  # the plugin runs: locks held
    time.sleep(0.01)
if how == "fork":
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
else:
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    worker.start()
    pid = worker.pid
print(pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["fork", "multiprocessing"])
def test_child_forked_without_exec_does_not_keep_the_runtime_locks(env: Env, how: str) -> None:
    net = env.conflist(env.plugin(ADD={"sleep": 60, "passthrough": True}), version="1.1.0")
    runtime = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _RUNTIME,
            str(env.plugins),
            str(env.cache),
            net.bytes.decode(),
            str(env.record),
            how,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    child = 0
    try:
        assert runtime.stdout is not None
        child = int(runtime.stdout.readline())
        cache = ResultCache(env.cache)
        assert cache.try_lock("testnet", "ctr1", "eth0") is None  # the runtime's ADD holds it
        runtime.send_signal(signal.SIGKILL)
        runtime.wait()
        assert not wait_gone([runtime.pid]), "the runtime survived SIGKILL"
        # The orphaned plugin holds the attachment lock while it runs (behaviour §4.3,
        # inherited as descriptor 3): end it. The forked child alone must keep nothing.
        for call in env.calls():
            if "pid" in call:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(call["pid"], signal.SIGKILL)
        assert wait_gone([child], 0.0) == [child], "the forked child is gone"
        end = time.monotonic() + 3.0
        lock = cache.try_lock("testnet", "ctr1", "eth0")
        while lock is None and time.monotonic() < end:
            time.sleep(0.05)
            lock = cache.try_lock("testnet", "ctr1", "eth0")
        assert lock is not None, "the forked child keeps the dead runtime's attachment lock"
        lock.release()
        gc_lock = cache.try_network_lock("testnet", exclusive=True)
        assert gc_lock is not None, "the forked child keeps the dead runtime's network lock"
        gc_lock.release()
        # A restarted runtime DELs promptly.
        start = time.monotonic()
        env.cni.del_network_list(net, env.rt, timeout=10)
        assert time.monotonic() - start < 5
    finally:
        runtime.kill()
        runtime.wait()
        if child:
            kill_quietly([child])


def test_fork_closes_only_the_childs_copies_of_held_locks(env: Env) -> None:
    """In the child the parent's locks are not held (and releasing them is harmless);
    in the parent they stay held."""
    cache = ResultCache(env.cache)
    lock = cache.lock("net", "c1", "eth0")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ok = not lock.held
            lock.release()  # the parent's: must not unlock it
            other = cache.try_lock("net", "c1", "eth0")
            ok = ok and other is None
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1", "the child saw the parent's lock as its own"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert lock.held
    assert cache.try_lock("net", "c1", "eth0") is None
    lock.release()


# -- lock files do not accumulate; exclusion holds (item 13) --------------------------


def wait_for_flock_waiter(path: Path, timeout: float = 10.0) -> None:
    """Wait until someone is blocked in ``flock()`` on ``path``.

    The kernel's ``/proc/locks`` lists a waiter (``->``) on the file's inode:
    a barrier, not a guess at how long starting the wait takes.
    """
    needle = f":{os.stat(path).st_ino} "
    end = time.monotonic() + timeout
    while not any(
        "->" in ln and needle in ln for ln in Path("/proc/locks").read_text().splitlines()
    ):
        assert time.monotonic() < end, f"nobody waits for the lock of {path}"
        time.sleep(0.005)


def lock_files(env: Env) -> list[str]:
    locks = env.cache / "locks"
    return sorted(p.name for p in locks.iterdir() if p.is_file()) if locks.exists() else []


@pytest.mark.parametrize("api", ["sync", "async"])
def test_lock_files_go_away_with_their_entries(env: Env, api: str) -> None:
    net = env.conflist(version="1.1.0")

    def rt(cid: str) -> RuntimeConf:
        return RuntimeConf(cid, f"/var/run/netns/{cid}", "eth0")

    run(env, api, "ADD", net, rt("ctr1"))
    assert lock_files(env) == ["testnet-ctr1-eth0"]
    run(env, api, "DEL", net, rt("ctr1"))
    assert lock_files(env) == []

    failing = env.conflist(env.plugin(ADD={"error": {"code": 11, "msg": "no"}}), version="1.1.0")
    with pytest.raises(PluginError):
        run(env, api, "ADD", failing, rt("failed"))
    run(env, api, "DEL", net, rt("unknown"))
    run(env, api, "CHECK", net, rt("unchecked"))
    assert lock_files(env) == []

    for cid in ("stale", "valid"):
        run(env, api, "ADD", net, rt(cid))
    gc(env, api, net, GCArgs([GCAttachment("valid", "eth0")]))
    assert lock_files(env) == ["testnet-valid-eth0"]


def test_gc_removes_the_lock_files_no_one_holds_that_have_no_entry(env: Env) -> None:
    net = env.conflist(version="1.1.0")
    env.cni.add_network_list(net, env.rt)
    env.cni.add_network_list(env.conflist(name="othernet"), env.rt)
    locks = env.cache / "locks"
    for name in ("testnet-old-eth0", "gonenet-x-eth0", "networks/gonenet"):
        (locks / name).touch(mode=0o600)
    with held_elsewhere(env.cache, "attachment", "testnet", "held", "eth0") as holder:
        env.cni.gc_network_list(net, GCArgs([GCAttachment("ctr1", "eth0")]))
        kept = lock_files(env)
        networks = sorted(os.listdir(locks / "networks"))
        assert kept == ["othernet-ctr1-eth0", "testnet-ctr1-eth0", "testnet-held-eth0"], kept
        assert networks == ["othernet", "testnet"], networks
        holder.kill()  # dies holding it: the file stays, unheld
        holder.wait()
    assert "testnet-held-eth0" in lock_files(env)
    env.cni.gc_network_list(net, GCArgs([GCAttachment("ctr1", "eth0")]))
    assert lock_files(env) == ["othernet-ctr1-eth0", "testnet-ctr1-eth0"]


def test_waiter_on_a_removed_lock_file_retries_on_the_one_at_the_path(env: Env) -> None:
    cache = ResultCache(env.cache)
    got = threading.Event()
    done = threading.Event()
    waiter_lock: list[Any] = []

    def wait_for_it() -> None:
        lk = cache.lock("net", "c1", "eth0")
        waiter_lock.append(lk)
        got.set()
        done.wait(10)
        lk.release()

    with held_elsewhere(env.cache, "attachment", "net", "c1", "eth0") as holder:
        waiter = threading.Thread(target=wait_for_it, daemon=True)
        waiter.start()
        wait_for_flock_waiter(env.cache / "locks" / "net-c1-eth0")  # the waiter is in flock()
        assert not got.is_set()
        shutil.rmtree(env.cache / "locks")  # an operator cleans up by hand
        newcomer = cache.try_lock("net", "c1", "eth0")
        assert newcomer is not None  # on the new file at the path
        let_go(holder)  # the waiter gets the removed file...
        time.sleep(0.5)
        assert not got.is_set(), "two holders: the waiter took a removed lock file"
        newcomer.release()  # ...and waits for the one at the path
        assert got.wait(5), "the waiter never got the lock"
    lk = waiter_lock[0]
    assert os.stat(lk.path).st_ino == os.fstat(lk._fd).st_ino
    done.set()
    waiter.join(5)


def test_exclusion_holds_while_lock_files_are_removed_and_swept(env: Env) -> None:
    seconds = 2.0
    cache_dir = str(env.cache)
    os.makedirs(cache_dir, mode=0o700)
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "lock_worker.py"), cache_dir, str(seconds), str(seed)],
            stdout=subprocess.PIPE,
            text=True,
            env=python_env(),
        )
        for seed in (1, 2)
    ]
    overlaps: list[int] = []
    stop = threading.Event()

    def sweep() -> None:  # GC's sweep, as often as it can
        cache = ResultCache(cache_dir)
        while not stop.is_set():
            cache.cleanup.remove_orphan_locks()

    threads = [
        threading.Thread(target=lambda s=s: overlaps.append(hammer(cache_dir, seconds, s)))
        for s in (3, 4, 5)
    ]
    sweeper = threading.Thread(target=sweep)
    for t in [*threads, sweeper]:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    stop.set()
    sweeper.join(10)
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 30)
        assert p.returncode == 0
        overlaps.append(int(out))
    assert len(overlaps) == 5
    assert sum(overlaps) == 0, f"two holders of one lock at once {sum(overlaps)} times"


# -- planted directories are refused (item 14) -------------------------------------


@pytest.mark.parametrize("how", ["other-owner", "writable-by-others"])
@pytest.mark.parametrize("where", ["results", "locks", "locks/networks"])
def test_directories_planted_by_another_user_are_refused(env: Env, where: str, how: str) -> None:
    if how == "other-owner":
        require_root()
    env.cache.mkdir()
    env.cache.chmod(0o777)  # a cache directory others can write into
    planted = env.cache / where
    planted.mkdir(parents=True)
    if how == "other-owner":
        os.chown(planted, 65534, 65534)  # nobody
        planted.chmod(0o700)
    else:
        planted.chmod(0o777)
    net = env.conflist(version="1.1.0")
    calls: list[tuple[str, Any]] = [
        ("ADD", lambda: env.cni.add_network_list(net, env.rt)),
        ("DEL", lambda: env.cni.del_network_list(net, env.rt)),
        ("async ADD", lambda: asyncio.run(aio(env).add_network_list(net, env.rt))),
        ("GC", lambda: env.cni.gc_network_list(net)),
    ]
    if where != "locks/networks":  # CHECK takes no network lock
        calls.append(("CHECK", lambda: env.cni.check_network_list(net, env.rt)))
    if where == "results":
        calls.append(("get_cached_attachments", env.cni.get_cached_attachments))
        calls.append(("cached result", lambda: env.cni.get_network_list_cached_result(net, env.rt)))
    for what, call in calls:
        with pytest.raises((CacheError, GCError)) as info:
            call()
        assert str(planted) in str(info.value), (what, str(info.value))
    assert os.listdir(planted) == [], "something was written into the planted directory"
    assert not any(c["command"] in ("DEL", "CHECK", "GC") for c in env.calls())


def test_own_directories_with_safe_modes_are_accepted(env: Env) -> None:
    """The refusal is no false alarm: 0755 directories of our own are fine (Go makes 0700)."""
    for d in ("results", "locks", "locks/networks"):
        (env.cache / d).mkdir(parents=True, mode=0o755)
        (env.cache / d).chmod(0o755)
    net = env.conflist()
    env.cni.add_network_list(net, env.rt)
    env.cni.del_network_list(net, env.rt)
    assert env.cni.get_cached_attachments() == []
