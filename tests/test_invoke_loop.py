"""Plugin runs on an event loop (issue 29, item 2): what they cost the loop, and the one limit.

The loop reads each plugin's pipes and learns of its exit from its pidfd; the
start runs in a ``libcni-spawn`` thread; no scheduler above ``invoke`` is awaited. The plugins
are real (``/bin/sh`` scripts); the starts are counted by wrapping ``_raw._spawn``, never faked.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from libcni.errors import PluginTimeoutError
from libcni.invoke import RawExec, _async, _raw

FAST = "#!/bin/sh\ncat >/dev/null\necho '{}'\necho note >&2\n"
SLOW = "#!/bin/sh\ncat >/dev/null\nsleep {}\necho '{{}}'\n"
#: Its leader exits at once; its child would hold the pipes open for 30 s.
LEAVER = "#!/bin/sh\ncat >/dev/null\nsleep 30 &\necho '{}'\n"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "ADD"}


def _script(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    p.chmod(0o755)
    return str(p)


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids started, in order (``_raw._spawn`` wrapped, still real)."""
    started: list[int] = []
    real = _raw._spawn

    def spawn(*args: Any) -> int:
        pid = real(*args)
        started.append(pid)
        return pid

    monkeypatch.setattr(_raw, "_spawn", spawn)
    return started


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_loop_keeps_turning_while_slow_plugins_run(tmp_path: Path) -> None:
    slow = _script(tmp_path, "slow", SLOW.format(0.5))

    async def main() -> tuple[int, float]:
        ticks, worst, stop = 0, 0.0, False

        async def heartbeat() -> None:
            nonlocal ticks, worst
            while not stop:
                t = time.monotonic()
                await asyncio.sleep(0.01)
                worst = max(worst, time.monotonic() - t - 0.01)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        outs = await asyncio.gather(
            *(RawExec().aexec_plugin(slow, b"{}", ENV, 10) for _ in range(8))
        )
        stop = True
        await beat
        assert outs == [b"{}\n"] * 8
        return ticks, worst

    ticks, worst = asyncio.run(main())
    # 8 plugins of 0.5 s (at most two rounds of SLOTS): the loop ran
    # throughout, never held for long by a start or a read.
    assert ticks >= 25, ticks
    assert worst < 0.4, worst  # less than one plugin's run: never waited for one


def test_at_most_slots_plugins_start_in_one_turn_of_the_loop(
    tmp_path: Path, starts: list[int]
) -> None:
    fast = _script(tmp_path, "fast", FAST)
    per_turn: list[int] = []

    async def main() -> None:
        done = False

        async def turns() -> None:  # one resumption per turn of the loop
            seen = 0
            while not done:
                await asyncio.sleep(0)
                per_turn.append(len(starts) - seen)
                seen = len(starts)

        counter = asyncio.ensure_future(turns())
        ex = RawExec()
        outs = await asyncio.gather(*(ex.aexec_plugin(fast, b"{}", ENV, 20) for _ in range(64)))
        done = True
        await counter
        assert outs == [b"{}\n"] * 64

    asyncio.run(main())
    assert len(starts) == 64
    assert max(per_turn) <= _async.SLOTS, per_turn


def test_a_plugin_that_lasts_stops_holding_its_slot_after_age(tmp_path: Path) -> None:
    slow = _script(tmp_path, "slow", SLOW.format(3))
    fast = _script(tmp_path, "fast", FAST)

    async def main() -> float:
        ex = RawExec(grace=0.1)
        long = [
            asyncio.ensure_future(ex.aexec_plugin(slow, b"{}", ENV, 10))
            for _ in range(_async.SLOTS)
        ]
        await asyncio.sleep(0)
        start = time.monotonic()
        assert await ex.aexec_plugin(fast, b"{}", ENV, 10) == b"{}\n"
        took = time.monotonic() - start
        for task in long:
            task.cancel()
        await asyncio.gather(*long, return_exceptions=True)
        return took

    assert asyncio.run(main()) < 1.5


def test_a_start_waiting_for_its_turn_honours_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starts: list[int]
) -> None:
    monkeypatch.setattr(_async, "AGE", 30.0)
    slow = _script(tmp_path, "slow", SLOW.format(30))

    async def main() -> None:
        ex = RawExec(grace=0.1)
        long = [
            asyncio.ensure_future(ex.aexec_plugin(slow, b"{}", ENV, None))
            for _ in range(_async.SLOTS)
        ]
        await asyncio.sleep(0.05)
        with pytest.raises(PluginTimeoutError, match="waiting for its turn"):
            await ex.aexec_plugin(slow, b"{}", ENV, 0.3)
        for task in long:
            task.cancel()
        await asyncio.gather(*long, return_exceptions=True)

    asyncio.run(main())
    assert len(starts) == _async.SLOTS  # the one that timed out never started
    assert all(_gone(pid) for pid in starts)  # the cancelled ones were killed and reaped


def test_a_task_cancelled_while_waiting_for_its_turn_takes_no_slot_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_async, "SLOTS", 1)
    monkeypatch.setattr(_async, "AGE", 30.0)
    slow = _script(tmp_path, "slow", SLOW.format(0.3))

    async def main() -> int:
        ex = RawExec()
        first = asyncio.ensure_future(ex.aexec_plugin(slow, b"{}", ENV, 10))
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(ex.aexec_plugin(slow, b"{}", ENV, 10))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await first == b"{}\n"
        assert await ex.aexec_plugin(slow, b"{}", ENV, 10) == b"{}\n"
        return int(_async._slots_of(asyncio.get_running_loop()).free)

    assert asyncio.run(main()) == 1


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_megabyte_goes_through_stdin_and_back_on_stdout(tmp_path: Path, api: str) -> None:
    echo = _script(tmp_path, "echo", "#!/bin/sh\ncat\n")
    data = os.urandom(1 << 20)
    ex = RawExec()
    if api == "sync":
        out = ex.exec_plugin(echo, data, ENV, 10)
    else:
        out = asyncio.run(ex.aexec_plugin(echo, data, ENV, 10))
    assert out == data


@pytest.mark.parametrize("api", ["sync", "async"])
def test_without_a_pidfd_the_exit_is_still_seen_and_the_group_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starts: list[int], api: str
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open")  # Linux before 5.3

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    leaver = _script(tmp_path, "leaver", LEAVER)
    ex = RawExec()
    start = time.monotonic()
    if api == "sync":
        out = ex.exec_plugin(leaver, b"{}", ENV, 10)
    else:
        out = asyncio.run(ex.aexec_plugin(leaver, b"{}", ENV, 10))
    assert out == b"{}\n"
    assert time.monotonic() - start < 3  # not the 30 s of the child holding the pipes
    assert _gone(starts[0])


def test_waiting_starts_go_in_the_order_their_tasks_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_async, "SLOTS", 1)
    monkeypatch.setattr(_async, "AGE", 30.0)
    started: list[str] = []
    real = _raw._spawn

    def spawn(path: str, *args: Any) -> int:
        started.append(os.path.basename(path))
        return real(path, *args)

    monkeypatch.setattr(_raw, "_spawn", spawn)
    scripts = {name: _script(tmp_path, name, SLOW.format(0.05)) for name in "abc"}

    async def main() -> None:
        async def operation(name: str) -> None:  # two plugins, one after the other
            for _ in range(2):
                await RawExec().aexec_plugin(scripts[name], b"{}", ENV, 10)

        tasks = []
        for name in "abc":
            tasks.append(asyncio.ensure_future(operation(name)))
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    # The oldest task first: a's and b's second plugins go before c's first (in the
    # order of arrival, a b c a b c, every operation would end last).
    assert started == ["a", "b", "a", "b", "c", "c"]


@pytest.fixture
def slow_start(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each start made 0.3 s slower (a child slow to ``exec``: a busy machine, a slow file
    system), still real; records the thread of each start and the pid it started."""
    real = _raw._spawn
    seen: list[tuple[str, int]] = []

    def spawn(*args: Any) -> int:
        time.sleep(0.3)
        pid = real(*args)
        seen.append((threading.current_thread().name, pid))
        return pid

    monkeypatch.setattr(_raw, "_spawn", spawn)
    return seen


def test_the_loop_keeps_turning_while_a_start_is_slow(
    tmp_path: Path, slow_start: list[tuple[str, int]]
) -> None:
    fast = _script(tmp_path, "fast", FAST)

    async def main() -> int:
        ticks, stop = 0, False

        async def heartbeat() -> None:
            nonlocal ticks
            while not stop:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        outs = await asyncio.gather(
            *(RawExec().aexec_plugin(fast, b"{}", ENV, 10) for _ in range(4))
        )
        stop = True
        await beat
        assert outs == [b"{}\n"] * 4
        return ticks

    ticks = asyncio.run(main())
    assert all(name.startswith("libcni-spawn") for name, _ in slow_start), slow_start
    assert ticks >= 20  # 0.6 s of starts (two threads): inline, the loop would not have turned


def test_a_plugin_started_after_its_loop_closed_is_killed_and_reaped(
    tmp_path: Path, slow_start: list[tuple[str, int]]
) -> None:
    # The loop ends (asyncio.run cancels the task and closes it) while the start runs in its
    # thread: the thread cannot hand the run to the loop any more, and ends it itself.
    slow = _script(tmp_path, "slow", SLOW.format(30))

    tasks = []

    async def main() -> None:
        tasks.append(asyncio.ensure_future(RawExec().aexec_plugin(slow, b"{}", ENV, 60)))
        await asyncio.sleep(0.1)  # the start is under way in its thread

    asyncio.run(main())
    assert tasks[0].cancelled()
    deadline = time.monotonic() + 5
    while not (slow_start and _gone(slow_start[0][1])):
        assert time.monotonic() < deadline, "the plugin started for a closed loop lives on"
        time.sleep(0.02)


def test_a_task_cancelled_while_its_plugin_starts_gets_it_killed_and_reaped(
    tmp_path: Path, slow_start: list[tuple[str, int]]
) -> None:
    slow = _script(tmp_path, "slow", SLOW.format(30))

    async def main() -> None:
        task = asyncio.ensure_future(RawExec().aexec_plugin(slow, b"{}", ENV, 60))
        await asyncio.sleep(0.1)  # the start is under way in its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 5
        while not (slow_start and _gone(slow_start[0][1])):
            assert time.monotonic() < deadline, "the plugin started for a cancelled task lives on"
            await asyncio.sleep(0.02)

    asyncio.run(main())
