"""NetworkManager across threads, processes and tasks (behaviour.md §11.5), and the async API.

Real plugin processes (tests/plugins/testplugin), a real second Python
process, real asyncio concurrency.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_manager import Env, fail

from libcni import (
    AsyncNetworkManager,
    CNIConfig,
    NetworkRequest,
    RuntimeConf,
    SetupError,
    TeardownError,
)
from libcni.cache import ResultCache
from libcni.errors import AlreadyAttachedError, LockTimeoutError

pytestmark = pytest.mark.env(cls=Env)


SLOW_ADD = {"type": "testplugin", "test": {"ADD": {"sleep": 0.3, "passthrough": True}}}


def commands(e: Env) -> list[str]:
    return [c[0] for c in e.calls()]


def wait_for_add(e: Env, network: str, timeout: float = 20.0) -> None:
    """Wait until a plugin has started the ADD of ``network`` (it records before it sleeps).

    A barrier signalled by the plugin, not a guess at how long starting takes.
    """
    e.wait_for_call(
        lambda r: r.get("command") == "ADD" and r["stdin"].get("name") == network, timeout=timeout
    )


def test_setup_and_teardown_of_one_container_never_interleave_across_threads(env: Env) -> None:
    env.write("10-a.conflist", "a", SLOW_ADD)
    env.write("20-b.conflist", "b", SLOW_ADD)
    m = env.manager()
    t = threading.Thread(target=m.setup, args=("c1", "ns"))
    t.start()
    wait_for_add(env, "a")  # the setup holds the container now
    m.teardown("c1", "ns")
    t.join()
    assert commands(env) == ["ADD", "ADD", "ADD", "DEL", "DEL", "DEL"]
    assert env.cached() == []


def test_different_containers_proceed_in_parallel(env: Env) -> None:
    env.write(
        "10-a.conflist",
        "a",
        {"type": "testplugin", "test": {"ADD": {"sleep": 0.6, "passthrough": True}}},
    )
    m = env.manager(loopback=False)
    threads = [threading.Thread(target=m.setup, args=(f"c{i}", "ns")) for i in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start < 1.8  # one after the other: 2.4 s at least
    assert len(env.cached()) == 4


SECOND_PROCESS = textwrap.dedent(
    """
    import sys
    from libcni import NetworkManager
    conf, bindir, cache = sys.argv[1:4]
    m = NetworkManager(conf, [bindir], cache_dir=cache, max_networks=0)
    m.setup("c1", "ns")
    """
)


def test_setup_and_teardown_never_interleave_across_processes(env: Env) -> None:
    env.write("10-a.conflist", "a", SLOW_ADD)
    env.write("20-b.conflist", "b", SLOW_ADD)
    proc = subprocess.Popen(
        [sys.executable, "-c", SECOND_PROCESS, str(env.conf), str(env.bin), str(env.cache)]
    )
    try:
        # Wait until the other process is inside its setup (its first ADD ran).
        env.wait_for_call(lambda r: r.get("command") == "ADD")
        env.manager().teardown("c1", "ns")
    finally:
        assert proc.wait(timeout=30) == 0
    assert commands(env) == ["ADD", "ADD", "ADD", "DEL", "DEL", "DEL"]
    assert env.cached() == []


def test_container_lock_times_out_with_lock_timeout_error(env: Env) -> None:
    env.write("10-a.conflist", "a")
    cache = ResultCache(env.cache)
    held = cache.container_lock("c1")
    try:
        start = time.monotonic()
        with pytest.raises(LockTimeoutError):
            env.manager().setup("c1", "ns", timeout=0.3)
        assert 0.25 < time.monotonic() - start < 2
        assert env.runs() == []
        # Another container is not blocked by it.
        env.manager().setup("c2", "ns", timeout=5)
    finally:
        held.release()


def test_container_lock_names_cannot_collide_with_attachment_or_network_locks(env: Env) -> None:
    cache = ResultCache(env.cache)
    with (
        cache.container_lock("x"),
        cache.lock("net", "x", "eth0"),
        cache.network_lock("x", exclusive=True),
    ):
        assert cache.try_container_lock("x") is None
        other = cache.try_container_lock("y")
        assert other is not None
        other.release()
        assert (env.cache / "locks" / "containers" / "x").exists()
    # Container x holds nothing (no records): its lock file went with the lock.
    assert not (env.cache / "locks" / "containers" / "x").exists()


def test_reload_during_a_running_setup_does_not_block_it(env: Env) -> None:
    """A reload takes no lock: another thread sees a new file while a setup runs."""
    env.write(
        "10-a.conflist",
        "a",
        {"type": "testplugin", "test": {"ADD": {"sleep": 1.0, "passthrough": True}}},
    )
    m = env.manager()
    t = threading.Thread(target=m.setup, args=("c1", "ns"))
    t.start()
    wait_for_add(env, "a")  # the setup runs a's slow ADD
    env.write("20-b.conflist", "b")
    start = time.monotonic()
    assert "b" in m.networks().networks
    assert time.monotonic() - start < 0.5
    assert t.is_alive()
    t.join()


# -- async ---------------------------------------------------------------------------


def amanager(e: Env, **kw: Any) -> AsyncNetworkManager:
    kw.setdefault("cache_dir", e.cache)
    kw.setdefault("max_networks", 0)
    return AsyncNetworkManager(e.conf, [e.bin], **kw)


def test_async_many_containers_at_once(env: Env) -> None:
    env.write("10-a.conflist", "a", SLOW_ADD)
    env.write("20-b.conflist", "b", SLOW_ADD)
    m = amanager(env)

    async def main() -> float:
        start = time.monotonic()
        views = await asyncio.gather(
            *(m.setup(f"c{i}", "ns", parallel=bool(i % 2)) for i in range(8))
        )
        elapsed = time.monotonic() - start
        assert all([a.ifname for a in v.attachments] == ["lo", "eth0", "eth1"] for v in views)
        assert len(env.cached()) == 24
        seen = await m.inspect("c3")
        assert [a.network for a in seen.attachments] == ["cni-loopback", "a", "b"]
        await m.check("c3", "ns")
        await asyncio.gather(*(m.teardown(f"c{i}", "ns") for i in range(8)))
        return elapsed

    elapsed = asyncio.run(main())
    assert elapsed < 3.5  # 8 containers x 0.6 s one after the other: 4.8 s at least
    assert env.cached() == []


def test_async_failed_setup_rolls_back(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b", fail())
    m = amanager(env)

    async def main() -> None:
        with pytest.raises(SetupError) as info:
            await m.setup("c1", "ns", parallel=True)
        assert [a.network for a in info.value.partial] == ["cni-loopback", "a"]
        with pytest.raises(AlreadyAttachedError):
            await m.setup("c2", "ns", networks=["a"])
            await m.setup("c2", "ns", networks=["a"])

    asyncio.run(main())
    dels = [c for c in env.calls() if c[0] == "DEL"]
    assert dels == [("DEL", "b", "eth1"), ("DEL", "a", "eth0"), ("DEL", "cni-loopback", "lo")]
    assert env.cached() == ["a-c2-eth0", "cni-loopback-c2-lo"]


@pytest.mark.parametrize("parallel", [False, True])
def test_async_cancelled_setup_rolls_back_and_leaves_nothing_cached(
    env: Env, parallel: bool
) -> None:
    env.write("10-a.conflist", "a")
    env.write(
        "20-b.conflist",
        "b",
        {"type": "testplugin", "test": {"ADD": {"sleep": 30, "passthrough": True}}},
    )
    m = amanager(env)

    async def main() -> None:
        task = asyncio.create_task(m.setup("c1", "ns", parallel=parallel))
        await env.await_call(
            lambda r: (
                r.get("command") == "ADD"
                and (r["stdin"].get("name"), r["env"].get("CNI_IFNAME")) == ("b", "eth1")
            )
        )  # b's ADD (eth1) runs
        task.cancel()
        start = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - start < 10

    asyncio.run(main())
    assert env.cached() == []
    dels = [c for c in env.calls() if c[0] == "DEL"]
    assert dels == [("DEL", "b", "eth1"), ("DEL", "a", "eth0"), ("DEL", "cni-loopback", "lo")]


def test_async_teardown_and_gc(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("DEL", 7, "no"), version="1.1.0")
    env.write("20-b.conflist", "b", version="1.1.0")
    m = amanager(env)

    async def main() -> None:
        await m.setup("live", "ns", networks=[NetworkRequest("b")])
        await m.setup("dead", "ns", networks=["b"])
        await m.setup("c1", "ns")
        with pytest.raises(TeardownError) as info:
            await m.teardown("c1", "ns")
        assert [e.msg for e in info.value.errors] == ["no"]
        await m.gc(["live", "c1"])
        await m.status()
        assert list((await m.networks()).networks) == ["a", "b"]

    asyncio.run(main())
    assert env.cached() == ["a-c1-eth0", "b-live-eth0", "cni-loopback-live-lo"]


def test_async_setup_and_sync_teardown_serialised_across_threads(env: Env) -> None:
    env.write("10-a.conflist", "a", SLOW_ADD)
    m = amanager(env)
    sync = env.manager()
    t = threading.Thread(target=lambda: asyncio.run(m.setup("c1", "ns")))
    t.start()
    wait_for_add(env, "a")
    sync.teardown("c1")
    t.join()
    assert commands(env) == ["ADD", "ADD", "DEL", "DEL"]


def test_records_are_json(env: Env) -> None:
    """The helper reads what the plugin wrote (guards the other tests' assumptions)."""
    env.write("10-a.conflist", "a")
    env.manager().setup("c1", "ns")
    assert all(json.loads(line) for line in env.record.read_text().splitlines())
    assert Path(env.record).exists()


def test_gc_keeps_a_valid_container_being_set_up(env: Env) -> None:
    """GC runs while a valid container's setup is in its slow ADD: nothing of it is DELeted."""
    env.write("10-a.conflist", "a", SLOW_ADD)
    env.write("20-b.conflist", "b", SLOW_ADD)
    m = env.manager()
    t = threading.Thread(target=m.setup, args=("c1", "ns"))
    t.start()
    wait_for_add(env, "a")
    m.gc(["c1"])
    t.join()
    assert env.cached() == ["a-c1-eth0", "b-c1-eth1", "cni-loopback-c1-lo"]
    assert "DEL" not in commands(env)


def test_gc_keeps_what_a_valid_container_attached_while_gc_waited_for_the_network(
    env: Env,
) -> None:
    """Which attachments are a valid container's is decided under the network's GC lock.

    An ADD of valid container c1 (here made directly through CNIConfig, as another
    runtime or a second manager would) is running when GC starts: GC waits for the
    network, then must see c1's new entry as valid. Had it listed the attachments
    before taking the lock, it would DEL the entry as stale.
    """
    env.write("10-a.conflist", "a", SLOW_ADD)
    m = env.manager(loopback=False)
    net = m.networks().networks["a"]
    cni = CNIConfig([env.bin], cache_dir=env.cache)
    t = threading.Thread(target=cni.add_network_list, args=(net, RuntimeConf("c1", "ns", "eth0")))
    t.start()
    wait_for_add(env, "a")
    m.gc(["c1"])
    t.join()
    assert env.cached() == ["a-c1-eth0"]
    assert "DEL" not in commands(env)


def test_gc_removes_the_container_lock_files_no_one_holds(env: Env) -> None:
    """Container lock files carry no state: GC sweeps the unheld ones, never a held one."""
    env.write("10-a.conflist", "a")
    m = env.manager(loopback=False)
    for cid in ("c1", "c2", "c3"):
        m.setup(cid, "ns")
    m.teardown("c3")
    locks = env.cache / "locks" / "containers"
    # c3, torn down, left none; the lock files of c1 and c2, still attached, stay.
    assert sorted(p.name for p in locks.iterdir()) == ["c1", "c2"]
    held = ResultCache(env.cache).container_lock("c2")
    try:
        m.gc(["c1", "c2"])
        assert sorted(p.name for p in locks.iterdir()) == ["c2"]
    finally:
        held.release()
    assert env.cached() == ["a-c1-eth0", "a-c2-eth0"]
