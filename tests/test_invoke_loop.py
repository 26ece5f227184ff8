"""What a plugin run costs the event loop, and in which order the runs start (issue 23, items 4-5).

Counted, never timed: the descriptors a run registers in its loop's epoll
instance, the times the loop is woken for it, the synchronous driver's
waits, the plugins started before the first operation of many is over, and
the starts the loop sees between two turns of another task. The plugins are
real (``/bin/sh`` scripts); only the counting wraps library internals.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
from pathlib import Path
from typing import Any

import pytest

from libcni import AsyncCNIConfig, RuntimeConf
from libcni.conf import conf_list_from_bytes
from libcni.invoke import RawExec, _loop, _raw

FAST = '#!/bin/sh\ncat >/dev/null\necho \'{"cniVersion": "1.0.0"}\'\necho note >&2\n'
#: 256 KiB on stdout: four times what a pipe holds, so it cannot exit before it is read.
LARGE = "#!/bin/sh\ncat >/dev/null\nhead -c 262144 /dev/zero | tr '\\0' x\n"


def _script(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    p.chmod(0o755)
    return str(p)


class _CountingEpoll:
    """``select.epoll`` that counts registrations and the polls that returned something."""

    made: list[_CountingEpoll] = []

    def __init__(self) -> None:
        self._ep = _REAL_EPOLL()
        self.registered = 0
        self.wakeups = 0
        self.made.append(self)

    def register(self, fd: int, events: int) -> None:
        self.registered += 1
        self._ep.register(fd, events)

    def unregister(self, fd: int) -> None:
        self._ep.unregister(fd)

    def poll(self, timeout: float = -1) -> list[tuple[int, int]]:
        ready = self._ep.poll(timeout)
        self.wakeups += bool(ready)
        return ready

    def fileno(self) -> int:
        return self._ep.fileno()

    def close(self) -> None:
        self._ep.close()

    @property
    def closed(self) -> bool:
        return self._ep.closed


_REAL_EPOLL = select.epoll


@pytest.fixture
def counting_epoll(monkeypatch: pytest.MonkeyPatch) -> list[_CountingEpoll]:
    """The hubs' epoll instances, counting (the loop's own selector is made before)."""
    made: list[_CountingEpoll] = []
    monkeypatch.setattr(_CountingEpoll, "made", made)
    monkeypatch.setattr(_loop.select, "epoll", _CountingEpoll)
    return made


def test_a_plugin_that_exits_soon_costs_the_loop_one_registration_and_one_wakeup(
    tmp_path: Path, counting_epoll: list[_CountingEpoll], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its exit is awaited alone (the pidfd) for its first wait; made long here so that
    # a loaded machine cannot make the plugin outlast it.
    monkeypatch.setattr(_raw, "_FIRST_WAIT", 30.0)
    plugin = _script(tmp_path, "fast", FAST)
    runs = 10

    async def main() -> list[bytes]:
        ex = RawExec()
        return [await ex.aexec_plugin(plugin, b"{}", dict(os.environ), 60) for _ in range(runs)]

    outs = asyncio.run(main())
    assert outs == [b'{"cniVersion": "1.0.0"}\n'] * runs  # stdout read in full all the same
    registered = sum(ep.registered for ep in counting_epoll)
    wakeups = sum(ep.wakeups for ep in counting_epoll)
    # The pidfd only: not its stdout and stderr (three registrations, a wakeup per pipe).
    assert registered == runs
    assert wakeups == runs


def test_a_plugin_that_outlasts_its_first_wait_has_its_pipes_watched_then(
    tmp_path: Path, counting_epoll: list[_CountingEpoll]
) -> None:
    plugin = _script(tmp_path, "large", LARGE)

    async def main() -> bytes:
        return await RawExec().aexec_plugin(plugin, b"{}", dict(os.environ), 60)

    assert asyncio.run(main()) == b"x" * 262144
    # The pidfd, then stdout and stderr once the first wait was over.
    assert sum(ep.registered for ep in counting_epoll) == 3


def test_the_synchronous_driver_waits_once_for_a_plugin_that_exits_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_raw, "_FIRST_WAIT", 30.0)
    waits: list[int] = []
    real_wait = _raw.RawExec._wait

    def counted(run: Any, deadline: float | None) -> bool:
        waits.append(1)
        return real_wait(run, deadline)

    monkeypatch.setattr(_raw.RawExec, "_wait", staticmethod(counted))
    ex = RawExec()
    plugin = _script(tmp_path, "fast", FAST)
    for _ in range(5):
        assert ex.exec_plugin(plugin, b"{}", dict(os.environ), 60) == b'{"cniVersion": "1.0.0"}\n'
    assert waits == []  # the pidfd's wait alone saw each exit; no poll over the pipes
    large = _script(tmp_path, "large", LARGE)
    monkeypatch.setattr(_raw, "_FIRST_WAIT", 0.001)
    assert ex.exec_plugin(large, b"{}", dict(os.environ), 60) == b"x" * 262144
    assert waits == [1]


def test_the_loop_turns_between_the_starts_of_64_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 plugins at once: all but the first start in ``libcni-spawn`` threads, and
    another task of the loop runs between the starts, a few starts per turn at most."""
    monkeypatch.setattr(_loop, "AGE", 60.0)  # a slot is free only when its run is over
    plugin = _script(tmp_path, "fast", FAST)
    threads: list[str] = []
    starts: list[int] = []  # the heartbeat's tick at each start (seen on the loop)
    real_spawn, real_finish = _raw._Launch.spawn, _raw._Launch.finish

    def spawn(self: Any) -> None:
        real_spawn(self)
        threads.append(threading.current_thread().name)

    monkeypatch.setattr(_raw._Launch, "spawn", spawn)

    async def main() -> int:
        ticks = 0
        done = False

        def finish(self: Any, stdin: bytes) -> Any:
            starts.append(ticks)
            return real_finish(self, stdin)

        monkeypatch.setattr(_raw._Launch, "finish", finish)

        async def heartbeat() -> None:
            nonlocal ticks
            while not done:
                await asyncio.sleep(0)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        ex = RawExec()
        env = dict(os.environ)
        outs = await asyncio.gather(*(ex.aexec_plugin(plugin, b"{}", env, 60) for _ in range(64)))
        done = True
        await beat
        assert outs == [b'{"cniVersion": "1.0.0"}\n'] * 64
        return ticks

    asyncio.run(main())
    assert len(starts) == 64
    assert threads.count(threading.main_thread().name) <= 1
    per_turn = max(starts.count(t) for t in set(starts))
    assert per_turn <= _loop.SLOTS  # never all 64 (or a thread's backlog) in one turn
    assert len(set(starts)) >= 64 // _loop.SLOTS


def test_plugins_start_in_the_order_their_operations_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 operations of 3 plugins each at once: the first ones are over before every
    operation started its first plugin (the first container is ready early)."""
    monkeypatch.setattr(_loop, "AGE", 60.0)  # a slot is free only when its run is over
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("p1", "p2", "p3"):
        _script(bindir, name, FAST)
    conflist = conf_list_from_bytes(
        b'{"cniVersion": "1.0.0", "name": "net", "plugins":'
        b' [{"type": "p1"}, {"type": "p2"}, {"type": "p3"}]}'
    )
    starts = 0
    done_after: list[int] = []  # the starts made when each operation was over
    real_finish = _raw._Launch.finish

    def finish(self: Any, stdin: bytes) -> Any:
        nonlocal starts
        starts += 1
        return real_finish(self, stdin)

    monkeypatch.setattr(_raw._Launch, "finish", finish)

    async def main() -> None:
        cni = AsyncCNIConfig([bindir], cache_dir=tmp_path / "cache")

        async def one(i: int) -> None:
            await cni.add_network_list(conflist, RuntimeConf(f"c{i}", "/x", "eth0"))
            done_after.append(starts)

        await asyncio.gather(*(one(i) for i in range(64)))

    asyncio.run(main())
    assert starts == 64 * 3
    # In start order the first operations are over after a few dozen starts (16 to 27
    # for the first five here); in arrival order the fifth waits until every operation
    # started its first two plugins (over 100 starts), the first for over 38.
    assert done_after[0] <= 32
    assert done_after[4] <= 64
