"""``RawExec.aexec_plugin``: ``_raw``'s runs, the plugin's pipes and pidfd watched by the loop.

Starts run in :data:`SPAWN_THREADS` ``libcni-spawn`` threads, never holding the GIL (the loop
never waits for an ``exec``). At most :data:`SLOTS` plugins of a loop are *young* at once
(started less than :data:`AGE` seconds ago, still running); a further start waits, the oldest
task's first: 128 plugins started at once on two CPUs would starve the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import os
import queue
import signal
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._deadline import Deadline, plugin_timed_out
from ..errors import PluginTimeoutError
from ._raw import TICK, _Run, _Start

if TYPE_CHECKING:
    from ._exec import RawExec

__all__ = ["AGE", "SLOTS", "aexec"]

#: Plugins of a loop that may be young at once: three per CPU, enough to keep the CPUs busy
#: while some wait (for the iptables lock, netlink), few enough that the loop's thread still
#: gets a CPU soon (docs/performance.md: 2 per CPU held 8 tasks to 0.85x Go).
SLOTS = max(2, 3 * (os.cpu_count() or 1))
#: Seconds after which a plugin no longer counts against :data:`SLOTS` (most take 20-60 ms).
AGE = 0.1


class _Slots:
    """The young plugins of one loop (:data:`SLOTS`, :data:`AGE`)."""

    def __init__(self) -> None:
        self.free = SLOTS
        self.waiting: list[tuple[int, int, asyncio.Future[bool]]] = []  # a heap

    async def take(
        self, loop: asyncio.AbstractEventLoop, deadline: Deadline, name: str
    ) -> Callable[[], None]:
        """Wait for a slot (until ``deadline``); the function that gives it back (at most once)."""
        order = _ORDER.get()
        if not order:  # the task's first plugin: its place for all its plugins
            order = next(_orders)
            _ORDER.set(order)
        if self.free and not self.waiting:
            self.free -= 1
        else:
            waiter: asyncio.Future[bool] = loop.create_future()
            heapq.heappush(self.waiting, (order, next(_orders), waiter))
            left = deadline.left()
            timer = None if left is None else loop.call_later(max(left, 0), _settle, waiter, False)
            try:
                given = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.result():
                    self._give()  # handed a slot as it was cancelled
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if not given:
                raise PluginTimeoutError(
                    plugin_timed_out(name, deadline.limit),
                    f"it was still waiting for its turn to start ({len(self.waiting)} waiting)",
                    plugin=name,
                )
        age: asyncio.TimerHandle | None = None

        def give() -> None:
            nonlocal age
            if age is not None:
                age.cancel()
                age = None
                self._give()

        age = loop.call_later(AGE, give)
        return give

    def _give(self) -> None:
        while self.waiting:
            waiter = heapq.heappop(self.waiting)[2]
            if not waiter.done():
                waiter.set_result(True)
                return
        self.free += 1


#: The place of a task in the order of starts: its first plugin's (0: none yet).
_ORDER: contextvars.ContextVar[int] = contextvars.ContextVar("libcni_order", default=0)
_orders = itertools.count(1)


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


_slots: Any = weakref.WeakKeyDictionary()


def _slots_of(loop: asyncio.AbstractEventLoop) -> _Slots:
    slots: _Slots | None = _slots.get(loop)
    if slots is None:
        slots = _Slots()
        with contextlib.suppress(TypeError):  # a loop without weak references: no shared limit
            _slots[loop] = slots
    return slots


#: Threads that start plugins for the loops of this process (made again in a forked child).
SPAWN_THREADS = 2
#: Their queue of starts, ``(loop, future, start)``, and the process that made them.
_starts: tuple[int, queue.SimpleQueue[Any]] | None = None


def _start_queue() -> queue.SimpleQueue[Any]:
    global _starts
    if _starts is None or _starts[0] != os.getpid():
        q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(SPAWN_THREADS):
            threading.Thread(target=_serve, args=(q,), name="libcni-spawn", daemon=True).start()
        _starts = (os.getpid(), q)
    return _starts[1]


def _serve(starts: queue.SimpleQueue[Any]) -> None:
    """A ``libcni-spawn`` thread: blocks no signal (the ``subprocess`` path's condition), runs
    each start and hands its outcome to its loop (one wake-up, no executor futures)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    while True:
        loop, done, start = starts.get()
        try:
            outcome: Any = start.once()
        except BaseException as e:  # PluginError...: raised in the task
            outcome = e
        try:
            loop.call_soon_threadsafe(_deliver, done, outcome)
        except RuntimeError:  # the loop was closed meanwhile
            _deliver(done, outcome, cancelled=True)


def _deliver(done: asyncio.Future[Any], outcome: Any, *, cancelled: bool = False) -> None:
    """On the loop: the outcome to its task; a run whose task was cancelled is ended."""
    if cancelled or done.done():
        if isinstance(outcome, _Run):
            outcome.close()
    elif isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)


async def _start(loop: asyncio.AbstractEventLoop, start: _Start) -> _Run:
    """Start the plugin in a ``libcni-spawn`` thread (again after a busy binary's pauses);
    if the task is cancelled meanwhile, what the thread started is killed and reaped."""
    while True:
        done: asyncio.Future[_Run | float] = loop.create_future()
        _start_queue().put((loop, done, start))
        run = await done
        if isinstance(run, _Run):
            return run
        await asyncio.sleep(run)


def _watch(loop: asyncio.AbstractEventLoop, run: _Run) -> None:
    for fd, write in run.watched():
        (loop.add_writer if write else loop.add_reader)(fd, run.ready, fd)

    def unwatch(fd: int) -> None:
        if not loop.remove_reader(fd):
            loop.remove_writer(fd)

    run.unwatch = unwatch


async def _exited(loop: asyncio.AbstractEventLoop, run: _Run, deadline: Deadline) -> bool:
    """Wait until ``run``'s leader exited (True) or ``deadline`` passed (False)."""
    if run.status is not None:
        return True
    done: asyncio.Future[bool] = loop.create_future()
    run.on_exit = lambda: _settle(done, True)
    left = deadline.left()
    timers = [] if left is None else [loop.call_later(max(left, 0), _settle, done, False)]

    def tick() -> None:  # no pidfd: look now and then
        if not run.exited():
            timers.append(loop.call_later(TICK, tick))

    if run.pidfd is None:
        tick()
    try:
        return await done
    finally:
        del run.on_exit
        for timer in timers:
            timer.cancel()


async def _terminate(loop: asyncio.AbstractEventLoop, run: _Run, grace: float) -> None:
    """SIGTERM to the group, ``grace`` seconds, then SIGKILL (timeout, cancellation)."""
    run.kill(signal.SIGTERM)
    if not await _exited(loop, run, Deadline(grace)):
        run.kill(signal.SIGKILL)
        await _exited(loop, run, Deadline(None))


async def aexec(
    exec_: RawExec,
    path: str,
    stdin: bytes,
    env: Mapping[str, str],
    timeout: float | None,
    pass_fd: int | None = None,
) -> bytes:
    """:meth:`RawExec.aexec_plugin`."""
    loop = asyncio.get_running_loop()
    deadline = Deadline(timeout)
    give = await _slots_of(loop).take(loop, deadline, os.path.basename(path))
    try:
        run = await _start(loop, _Start(path, env, stdin, pass_fd, deadline, hold_gil=False))
        try:
            _watch(loop, run)
            try:
                exited = await _exited(loop, run, deadline)
            except asyncio.CancelledError:
                await _terminate(loop, run, exec_.grace)
                raise
            if not exited:
                await _terminate(loop, run, exec_.grace)
                raise run.timeout_error(deadline)
            return run.result()
        finally:
            run.close()
    finally:
        give()
