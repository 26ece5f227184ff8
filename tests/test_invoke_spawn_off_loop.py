"""The asynchronous path starts plugins off the event loop (issue 23, item 5).

Starting a plugin blocks the calling thread until the child has called
``exec``; on the loop that stalls every other task. With other plugin runs in
flight the start happens in a ``libcni-spawn`` thread; a task cancelled
meanwhile kills and reaps what it started. A start is made slow on purpose (a
real start after a pause, in the thread) so that the loop can be watched
meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from libcni.invoke import RawExec, _raw

SCRIPT = "#!/bin/sh\ncat >/dev/null\nsleep 0.2\necho '{}'\n"


@pytest.fixture
def plugin(tmp_path: Path) -> str:
    p = tmp_path / "plugin"
    p.write_text(SCRIPT)
    p.chmod(0o755)
    return str(p)


@pytest.fixture
def slow_start(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The start (``_Launch.spawn``: until the child's ``exec``) made 0.3 s slower;
    records the thread of each start and the pid it started."""
    real = _raw._Launch.spawn
    seen: list[tuple[str, int]] = []

    def spawn(self: Any) -> None:
        time.sleep(0.3)
        real(self)
        seen.append((threading.current_thread().name, self.pid))

    monkeypatch.setattr(_raw._Launch, "spawn", spawn)
    return seen


def test_starts_run_off_the_loop_while_others_are_in_flight(
    plugin: str, slow_start: list[tuple[str, int]]
) -> None:
    async def main() -> int:
        ticks = 0
        stop = False

        async def heartbeat() -> None:
            nonlocal ticks
            while not stop:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        ex = RawExec()
        env = dict(os.environ)
        outs = await asyncio.gather(*(ex.aexec_plugin(plugin, b"{}", env, 10) for _ in range(4)))
        stop = True
        await beat
        assert outs == [b"{}\n"] * 4
        return ticks

    ticks = asyncio.run(main())
    loop_thread = threading.main_thread().name
    threads = [name for name, _ in slow_start]
    # The first start is alone (inline); the others find it in flight: off the loop.
    assert threads.count(loop_thread) <= 1
    assert sum(name.startswith("libcni-spawn") for name in threads) >= 3
    # The loop kept running during the slow starts (0.3 s each, 10 ms ticks); inline
    # starts would have held it for about a second.
    assert ticks >= 40


def test_a_task_cancelled_while_its_plugin_starts_reaps_it(
    plugin: str, slow_start: list[tuple[str, int]]
) -> None:
    async def main() -> None:
        ex = RawExec()
        env = dict(os.environ)
        first = asyncio.ensure_future(ex.aexec_plugin(plugin, b"{}", env, 10))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(ex.aexec_plugin(plugin, b"{}", env, 10))
        await asyncio.sleep(0.1)  # the second start is under way in a worker
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert await first == b"{}\n"

    asyncio.run(main())
    offloop = [pid for name, pid in slow_start if name.startswith("libcni-spawn")]
    assert offloop, "the second start did not run off the loop"
    for pid in offloop:
        with pytest.raises(ProcessLookupError):  # killed and reaped (a zombie would answer)
            os.kill(pid, 0)
