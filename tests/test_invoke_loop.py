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
        self.fd = self._ep.fileno()
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
    monkeypatch.setattr(select, "epoll", _CountingEpoll)
    return made


def test_runs_at_once_share_one_descriptor_on_the_loop(
    tmp_path: Path, counting_epoll: list[_CountingEpoll], monkeypatch: pytest.MonkeyPatch
) -> None:
    """32 runs at once: the loop watches one descriptor (the hub's epoll instance), each
    run registers its pidfd and two output pipes there (stdin, written at once, not)."""
    plugin = _script(tmp_path, "fast", FAST)
    readers: list[int] = []

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        real_add = loop.add_reader

        def add_reader(fd: Any, callback: Any, *args: Any) -> None:
            readers.append(fd)
            real_add(fd, callback, *args)

        monkeypatch.setattr(loop, "add_reader", add_reader)
        ex = RawExec()
        env = dict(os.environ)
        return await asyncio.gather(*(ex.aexec_plugin(plugin, b"{}", env, 60) for _ in range(32)))

    outs = asyncio.run(main())
    assert outs == [b'{"cniVersion": "1.0.0"}\n'] * 32
    assert len(counting_epoll) == 1
    assert readers == [counting_epoll[0].fd]
    # The pidfd and the output pipes of each run; a starting thread's exec-error pipe
    # for each start made off the loop (all but the first).
    assert 3 * 32 <= counting_epoll[0].registered <= 4 * 32


def test_a_pipe_is_read_once_per_readiness_and_its_end_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin that writes a line to stdout and to stderr costs three reads: the two
    lines and the exec-error pipe's end; not the end of stdout or stderr (hung up)."""
    plugin = _script(tmp_path, "fast", FAST)
    reads: list[int] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        reads.append(fd)
        return real_read(fd, n)

    ex = RawExec()
    ex.exec_plugin(plugin, b"{}", dict(os.environ), 60)  # imports, caches
    for _ in range(5):
        monkeypatch.setattr(os, "read", read)
        out = ex.exec_plugin(plugin, b"{}", dict(os.environ), 60)
        monkeypatch.setattr(os, "read", real_read)
        assert out == b'{"cniVersion": "1.0.0"}\n'
    assert len(reads) == 5 * 3


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


def _marking(tmp_path: Path, name: str, log: Path, sleep: float) -> str:
    """A plugin that appends ``start <pid>`` to ``log``, sleeps, then ``end <pid>``."""
    return _script(
        tmp_path,
        name,
        "#!/bin/sh\ncat >/dev/null\n"
        f'echo "start $$" >>{log}\nsleep {sleep}\necho "end $$" >>{log}\n'
        'echo \'{"cniVersion": "1.0.0"}\'\n',
    )


def _most_at_once(log: Path) -> int:
    now = most = 0
    for line in log.read_text().splitlines():
        now += 1 if line.startswith("start") else -1
        most = max(most, now)
    return most


def test_no_more_young_runs_at_once_than_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plugins that work for a while (as bridge does) never run more than SLOTS at once
    # while they are young: the loop's thread keeps a CPU (the heartbeat's lag).
    monkeypatch.setattr(_loop, "AGE", 60.0)  # every run stays young until it is over
    log = tmp_path / "log"
    plugin = _marking(tmp_path, "busy", log, 0.3)

    async def main() -> None:
        raw = RawExec()
        env = {"CNI_COMMAND": "VERSION", "CNI_PATH": str(tmp_path)}
        await asyncio.gather(
            *(raw.aexec_plugin(plugin, b"{}", env, 30) for _ in range(3 * _loop.SLOTS))
        )

    asyncio.run(main())
    assert len(log.read_text().splitlines()) == 6 * _loop.SLOTS
    assert _most_at_once(log) == _loop.SLOTS


def test_a_run_that_lasts_stops_holding_its_slot_after_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SLOTS plugins that wait (for a DHCP lease, say) do not hold a further start back
    # once they are AGE old: it starts, and ends, while they still wait.
    monkeypatch.setattr(_loop, "AGE", 0.05)
    log = tmp_path / "log"
    waiting = _marking(tmp_path, "waiting", log, 3)
    quick = _marking(tmp_path, "quick", log, 0)

    async def main() -> None:
        raw = RawExec()
        env = {"CNI_COMMAND": "VERSION", "CNI_PATH": str(tmp_path)}
        slow = [
            asyncio.ensure_future(raw.aexec_plugin(waiting, b"{}", env, 30))
            for _ in range(_loop.SLOTS)
        ]
        for _ in range(1000):  # until every waiting one has started (at most 10 s)
            if log.exists() and len(log.read_text().splitlines()) == _loop.SLOTS:
                break
            await asyncio.sleep(0.01)
        await raw.aexec_plugin(quick, b"{}", env, 30)
        assert not any(t.done() for t in slow)
        await asyncio.gather(*slow)

    asyncio.run(main())
    lines = log.read_text().splitlines()
    assert _most_at_once(log) == _loop.SLOTS + 1
    assert lines.index(next(x for x in lines if x.startswith("end"))) == _loop.SLOTS + 1
