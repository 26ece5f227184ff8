"""AsyncCNIConfig, and the concurrency guarantees of both APIs, with real concurrent calls.

- every operation works as a coroutine and never blocks the event loop;
- cancelling a task kills the plugin's whole process group;
- different attachments run in parallel, the same attachment one at a time
  (across threads, tasks and processes);
- GC excludes ADD and DEL on its network while it runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from harness import Env, ThreadOnlyExec, wait_gone

import libcni
from libcni import (
    AsyncCNIConfig,
    GCArgs,
    GCAttachment,
    PluginError,
    PluginTimeoutError,
    RuntimeConf,
)
from libcni.cache import ResultCache

SLOW = 0.4  # seconds a "slow" plugin call takes


def is_del(record: dict[str, Any]) -> bool:
    return record.get("command") == "DEL"


def rt(cid: str, ifname: str = "eth0") -> RuntimeConf:
    return RuntimeConf(cid, f"/ns/{cid}", ifname)


# -- the async API -------------------------------------------------------------


def test_async_operations_mirror_the_sync_ones(env: Env) -> None:
    async def main() -> None:
        cni = env.aio()
        net = env.chain({}, {}, version="1.1.0")
        result = await cni.add_network_list(net, rt("c1"))
        assert result.to_dict()["ips"][0]["address"] == "10.1.2.3/24"
        cached = await cni.get_network_list_cached_result(net, rt("c1"))
        assert cached is not None and cached.to_dict() == result.to_dict()
        got = await cni.get_network_list_cached_config(net, rt("c1"))
        assert got is not None and got[0] == net.bytes
        assert [a.container_id for a in await cni.get_cached_attachments()] == ["c1"]
        await cni.check_network_list(net, rt("c1"))
        await cni.get_status_network_list(net)
        assert await cni.validate_network_list(net) == []
        assert "1.1.0" in (await cni.get_version_info("p1")).supported_versions
        await cni.del_network_list(net, rt("c1"))
        await cni.add_network_list(net, rt("c2"))
        await cni.gc_network_list(net, GCArgs())
        assert await cni.get_cached_attachments() == []

        single = libcni.conf_from_bytes(
            json.dumps(
                {"type": "p1", "name": "solo", "cniVersion": "1.0.0", "record": str(env.record)}
            )
        )
        await cni.add_network(single, rt("c3"))
        assert await cni.get_network_cached_result(single, rt("c3")) is not None
        assert await cni.get_network_cached_config(single, rt("c3")) is not None
        await cni.check_network(single, rt("c3"))
        assert await cni.validate_network(single) == []
        await cni.del_network(single, rt("c3"))

    asyncio.run(main())
    commands = [c["command"] for c in env.calls()]
    assert commands[:6] == ["ADD", "ADD", "CHECK", "CHECK", "STATUS", "STATUS"]
    assert "GC" in commands
    assert commands[-3:] == ["ADD", "CHECK", "DEL"]


def test_async_errors_carry_the_plugin_context(env: Env) -> None:
    net = env.chain({"ADD": {"error": {"code": 120, "msg": "boom"}}})

    async def main() -> None:
        with pytest.raises(PluginError) as info:
            await env.aio().add_network_list(net, rt("c1"))
        assert (info.value.code, info.value.plugin, info.value.command, info.value.network) == (
            120,
            "p1",
            "ADD",
            "net",
        )

    asyncio.run(main())


def test_a_running_plugin_never_blocks_the_event_loop(env: Env) -> None:
    net = env.chain({"ADD": {"sleep": SLOW, "passthrough": True}})
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        await env.aio().add_network_list(net, rt("c1"))
        stop.set()
        await task

    asyncio.run(main())
    assert ticks >= SLOW / 0.01 / 2  # the loop kept turning while the plugin slept


def test_cancelling_the_task_kills_the_plugin_group_and_reraises(env: Env) -> None:
    net = env.chain({"ADD": {"spawnChild": 60, "ignoreTerm": True, "sleep": 60}})

    async def main() -> None:
        task = asyncio.create_task(env.aio().add_network_list(net, rt("c1")))
        await env.await_call(lambda r: "child" in r)  # the plugin and its child run
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    pids = [c["pid"] for c in env.calls() if "pid" in c] + [
        c["child"] for c in env.calls() if "child" in c
    ]
    assert len(pids) == 2
    assert not wait_gone(pids, 5.0), "plugin or its child survived the cancellation"
    assert not (env.cache / "results" / "net-c1-eth0").exists()


def test_async_timeout(env: Env) -> None:
    net = env.chain({"ADD": {"sleep": 30}})

    async def main() -> None:
        with pytest.raises(PluginTimeoutError):
            await env.aio(timeout=0.3).add_network_list(net, rt("c1"))

    start = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - start < 10


def test_async_with_a_blocking_exec_uses_a_worker_thread(env: Env) -> None:
    exec_ = ThreadOnlyExec()
    net = env.chain({})

    async def main() -> None:
        cni = AsyncCNIConfig([env.plugins], cache_dir=env.cache, exec=exec_)
        await cni.add_network_list(net, rt("c1"))

    asyncio.run(main())
    assert exec_.threads and threading.main_thread().name not in exec_.threads


# -- parallelism and serialisation ---------------------------------------------


def test_threads_on_different_attachments_run_in_parallel(env: Env) -> None:
    net = env.chain({"ADD": {"sleep": SLOW, "passthrough": True}})
    cni = env.sync()
    start = time.monotonic()
    threads = [
        threading.Thread(target=cni.add_network_list, args=(net, rt(f"c{i}"))) for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert len(cni.get_cached_attachments()) == 4
    assert elapsed < 4 * SLOW * 0.75, f"4 slow ADDs took {elapsed:.2f}s: they did not overlap"


def test_tasks_on_different_attachments_run_concurrently(env: Env) -> None:
    net = env.chain({"ADD": {"sleep": SLOW, "passthrough": True}})

    async def main() -> float:
        cni = env.aio()
        start = time.monotonic()
        await asyncio.gather(*(cni.add_network_list(net, rt(f"c{i}")) for i in range(4)))
        assert len(await cni.get_cached_attachments()) == 4
        return time.monotonic() - start

    elapsed = asyncio.run(main())
    assert elapsed < 4 * SLOW * 0.75, f"4 slow ADDs took {elapsed:.2f}s: they did not overlap"


def test_threads_on_the_same_attachment_run_one_at_a_time(env: Env) -> None:
    net = env.chain({"ADD": {"sleep": SLOW, "passthrough": True}, "DEL": {"sleep": SLOW}})
    cni = env.sync()
    same = rt("c1")
    start = time.monotonic()
    threads = [
        threading.Thread(target=cni.add_network_list, args=(net, same)),
        threading.Thread(target=cni.del_network_list, args=(net, same)),
        threading.Thread(target=cni.add_network_list, args=(net, same)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start >= 3 * SLOW * 0.95


def test_tasks_on_the_same_attachment_run_one_at_a_time(env: Env) -> None:
    net = env.chain({"ADD": {"sleep": SLOW, "passthrough": True}})

    async def main() -> float:
        cni = env.aio()
        start = time.monotonic()
        await asyncio.gather(*(cni.add_network_list(net, rt("c1")) for _ in range(3)))
        return time.monotonic() - start

    assert asyncio.run(main()) >= 3 * SLOW * 0.95


def test_the_attachment_lock_holds_across_processes(env: Env) -> None:
    net = env.chain({})
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from libcni.cache import ResultCache\n"
            f"lock = ResultCache({str(env.cache)!r}).lock('net', 'c1', 'eth0')\n"
            "print('held', flush=True); time.sleep(1.0); lock.release()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    start = time.monotonic()
    env.sync().add_network_list(net, rt("c1"))
    waited = time.monotonic() - start
    holder.wait(timeout=10)
    assert waited >= 0.5, "ADD ran while another process held the attachment's lock"

    # A different attachment of the same network is not held up.
    lock = ResultCache(env.cache).lock("net", "c1", "eth0")
    try:
        start = time.monotonic()
        env.sync().add_network_list(net, rt("c2"))
        assert time.monotonic() - start < 0.5 + 0.5  # plugin start time only
    finally:
        lock.release()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_gc_excludes_add_and_del_on_its_network(env: Env, api: str) -> None:
    net = env.chain({"DEL": {"sleep": SLOW}}, version="1.1.0")
    cni_sync = env.sync()
    for cid in ("stale1", "stale2"):
        cni_sync.add_network_list(net, rt(cid))
    env.record.unlink()

    if api == "sync":
        gc = threading.Thread(
            target=cni_sync.gc_network_list, args=(net, GCArgs([GCAttachment("new", "eth0")]))
        )
        gc.start()
        env.wait_for_call(is_del)  # GC is now deleting the first stale attachment
        cni_sync.add_network_list(net, rt("new"))
        gc.join()
    else:

        async def main() -> None:
            cni = env.aio()
            gc = asyncio.create_task(
                cni.gc_network_list(net, GCArgs([GCAttachment("new", "eth0")]))
            )
            await env.await_call(is_del)  # GC is now deleting the first stale attachment
            await cni.add_network_list(net, rt("new"))
            await gc

        asyncio.run(main())

    commands = [(c["command"], c["env"]["CNI_CONTAINERID"]) for c in env.calls() if "command" in c]
    assert commands == [("DEL", "stale1"), ("DEL", "stale2"), ("GC", ""), ("ADD", "new")]
    assert [a.container_id for a in cni_sync.get_cached_attachments()] == ["new"]


def test_gc_of_one_network_does_not_hold_up_another(env: Env) -> None:
    slow = env.chain({"DEL": {"sleep": 2 * SLOW}}, version="1.1.0")
    other = libcni.conf_list_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": "p2"}]})
    )
    cni = env.sync()
    cni.add_network_list(slow, rt("stale"))
    gc = threading.Thread(target=cni.gc_network_list, args=(slow,))
    gc.start()
    env.wait_for_call(is_del)  # GC is now deleting the stale attachment, its network locked
    start = time.monotonic()
    cni.add_network_list(other, rt("x"))
    took = time.monotonic() - start
    gc.join()
    assert took < 2 * SLOW, "ADD on another network waited for GC"


def test_eight_async_workers_keep_every_entry(env: Env) -> None:
    net = env.chain({}, {})

    async def main() -> None:
        cni = env.aio()
        await asyncio.gather(*(cni.add_network_list(net, rt(f"c{i}")) for i in range(8)))
        assert sorted(a.container_id for a in await cni.get_cached_attachments()) == [
            f"c{i}" for i in range(8)
        ]
        await asyncio.gather(*(cni.del_network_list(net, rt(f"c{i}")) for i in range(8)))
        assert await cni.get_cached_attachments() == []

    asyncio.run(main())


def test_import_libcni_does_not_import_asyncio() -> None:
    code = "import sys, libcni; print('asyncio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert out.stdout.strip() == "False"
