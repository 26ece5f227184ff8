"""The asynchronous plugin runs of :class:`~libcni.invoke.RawExec` (``aexec_plugin``).

Imported by the first ``aexec_plugin`` (``import libcni`` imports no asyncio).
The rules of a run (its pipes, its process group, its outcome) are
``_raw``'s; this module only waits for them on an event loop. Each loop that
runs plugins has one :class:`_Hub` while it does:

- **One descriptor on the loop.** The pipes and the pidfd of every run of the
  loop are registered in one epoll instance, the hub's, and only that one is
  registered with the loop: a run costs a few ``epoll_ctl`` calls instead of
  three ``add_reader``/``remove_reader`` pairs and their handles, and one turn
  of the loop serves every run that is ready.
- **Plugin starts in the order of operations.** At most :data:`SLOTS` runs
  are *young* at once (started less than :data:`AGE` seconds ago and not
  over); a further start waits, and the waiting ones start in the order their
  operations began (:data:`ORDER`). With 128 containers set up at once the
  first ones are ready first, as with threads, instead of all 128 advancing a
  step at a time and being ready together at the end; a run that lasts (a
  plugin waiting on the network) stops counting once it is :data:`AGE` old,
  so slow plugins never hold the others back for long.
- **Starts off the loop.** Starting a plugin waits until the child has called
  ``exec``. While other runs of the loop are in flight that wait happens in a
  ``libcni-spawn`` thread, which does nothing else (the pipes and the pidfd are
  made on the loop's thread): the loop never waits for a child's ``exec``, and
  the thread takes the GIL twice per start.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import os
import queue
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import PluginTimeoutError
from ._raw import _deadline, _Launch, _remaining, _Retry, _Run, _terminating, _timed_out

if TYPE_CHECKING:
    from ._raw import RawExec

__all__ = [
    "AGE",
    "ORDER",
    "SLOTS",
    "STEPS",
    "aexec",
    "operation_ended",
    "operation_started",
    "step",
]

#: Runs that may be young at once (twice the CPUs: enough to keep them busy).
SLOTS = max(2, 2 * (os.cpu_count() or 1))
#: Seconds after which a run no longer counts against :data:`SLOTS`: longer than what real
#: plugins take (bridge with its iptables calls: 20 to 60 ms here), so that no more of
#: them run at once than keep the CPUs busy, and the loop's own thread still gets one
#: (with 128 containers of the reference plugins set up at once, a 10 ms heartbeat on
#: the loop lagged 130 to 280 ms with 20 ms, 15 to 33 ms with 100 ms); short enough that
#: a plugin that waits (for a DHCP lease) holds the others back for no longer.
AGE = 0.1
#: Steps of operations (to their next plugin start, lock, local read) run per turn of the
#: loop when more are ready: a turn stays short however many operations are in flight.
STEPS = 8
#: Threads that wait for the children's ``exec`` instead of the event loop. Two keep
#: the loop free while one child is slow to ``exec``; more only add GIL hand-offs
#: (each start in a thread costs the loop two of them: see docs/performance.md).
SPAWN_THREADS = 2

#: The position of the running operation in the order of starts (0: none yet).
ORDER: contextvars.ContextVar[int] = contextvars.ContextVar("libcni_order", default=0)
_orders = itertools.count(1)


def operation_started() -> contextvars.Token[int] | None:
    """Give the operation that starts in this context its place in the order of starts.

    Nothing when it is part of an operation that has one (a manager's setup
    calling ``AsyncCNIConfig``, the tasks of a parallel setup): its plugins
    keep the place of the whole. Returns what :func:`operation_ended` takes.
    """
    if ORDER.get():
        return None
    return ORDER.set(next(_orders))


def operation_ended(token: contextvars.Token[int] | None) -> None:
    """Undo :func:`operation_started`."""
    if token is not None:
        ORDER.reset(token)


# -- the turns of a loop ------------------------------------------------------------------


class _Turns:
    """Which operations take a step in this turn of a loop: at most :data:`STEPS`, oldest first.

    Without it every operation ready at once (128 containers set up together)
    would run a step in the same turn: no timer, no other task, no
    runtime's API would run for the whole of it, and the operations would
    advance in lockstep and all finish at the end.
    """

    __slots__ = ("passed", "scheduled", "seq", "waiting")

    def __init__(self) -> None:
        self.passed = 0
        self.scheduled = False
        self.waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self.seq = itertools.count()

    def through(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None] | None:
        """``None``: go on now; else the future to await before going on."""
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self._next, loop)
        if self.passed < STEPS and not self.waiting:
            self.passed += 1
            return None
        waiter: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self.waiting, (ORDER.get() or next(_orders), next(self.seq), waiter))
        return waiter

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        """The next turn: let the oldest waiting operations go on."""
        self.passed = 0
        waiting = self.waiting
        while waiting and self.passed < STEPS:
            waiter = heapq.heappop(waiting)[2]
            if not waiter.done():
                waiter.set_result(None)
                self.passed += 1
        if waiting or self.passed:
            loop.call_soon(self._next, loop)
        else:
            self.scheduled = False


_turns: Any = weakref.WeakKeyDictionary()


async def step() -> None:
    """Wait until this operation may take a step (at once unless many are ready).

    The drivers call it before each effect that does work on the loop's
    thread (a lock, a local read, a plugin start), so that one turn of the
    loop runs at most :data:`STEPS` of them, those of the oldest operations
    first (:data:`ORDER`).
    """
    loop = asyncio.get_running_loop()
    turns: _Turns | None = _turns.get(loop)
    if turns is None:
        turns = _Turns()
        with contextlib.suppress(TypeError):  # a loop without weak references: no state kept
            _turns[loop] = turns
    waiter = turns.through(loop)
    if waiter is not None:
        await waiter


# -- the starting threads ------------------------------------------------------------


def _gil_held_close() -> Any:
    """``close(2)`` called without releasing the GIL (``os.close`` releases it), or ``os.close``.

    A starting thread's last step: releasing the GIL there would hand it to
    the loop's thread and back once more per start.
    """
    try:
        import ctypes  # here: only the starting threads need it

        close = ctypes.PyDLL(None).close
        close.argtypes = [ctypes.c_int]
        close.restype = ctypes.c_int
        return close
    except (ImportError, OSError, AttributeError):  # pragma: no cover - no ctypes, no libc
        return os.close


class _Job:
    """A start handed to a ``libcni-spawn`` thread.

    The thread runs ``launch.spawn()``, then closes the runtime's end of the
    exec-error pipe (which the child closes by its ``exec``): the pipe's hang-up,
    in the hub's epoll, tells the loop the start is over. So the thread takes
    the GIL only twice (to begin, and when the child has called ``exec``) and
    never wakes the loop itself.
    """

    __slots__ = ("done", "error", "launch", "waiter")

    def __init__(self, launch: _Launch, waiter: asyncio.Future[None]) -> None:
        self.launch = launch
        self.waiter = waiter
        self.error: BaseException | None = None
        self.done = False

    def run(self, close: Any) -> None:
        """In the thread."""
        launch = self.launch
        try:
            launch.spawn()
        except BaseException as e:  # handed to the task
            self.error = e
        fd, launch.fds[7] = launch.fds[7], -1  # before the close: then the loop may act
        close(fd)

    def finished(self) -> None:
        """On the loop: the exec-error pipe hung up (the thread is done with the start)."""
        self.done = True
        if not self.waiter.done():
            self.waiter.set_result(None)


class _Spawner:
    """The process's ``libcni-spawn`` threads (made at the first use, again after a fork)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        close = _gil_held_close()
        for i in range(SPAWN_THREADS):
            threading.Thread(
                target=self._work, args=(close,), name=f"libcni-spawn-{i}", daemon=True
            ).start()

    def _work(self, close: Any) -> None:
        get = self.jobs.get
        while True:
            get().run(close)


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def _spawn_threads() -> _Spawner:
    global _spawner
    spawner = _spawner
    if spawner is None or spawner.pid != os.getpid():
        with _spawner_lock:
            spawner = _spawner
            if spawner is None or spawner.pid != os.getpid():
                spawner = _spawner = _Spawner()
    return spawner


# -- the hub of a loop -----------------------------------------------------------------


class _Hub:
    """What a loop's plugin runs share: one epoll instance, the admission of starts."""

    __slots__ = (
        "closing",
        "ep",
        "fd",
        "pid",
        "runs",
        "seq",
        "slots",
        "timer",
        "users",
        "waiting",
        "young",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ep = select.epoll()
        self.fd = self.ep.fileno()
        self.pid = os.getpid()
        self.runs: dict[int, Any] = {}  # descriptor -> its run (or start, off the loop)
        self.users = 0  # aexec calls of the loop in progress
        self.closing = False
        # Admission: the slots taken, in order ([taken at, still young]), the waiting starts.
        self.young = 0
        self.slots: deque[list[Any]] = deque()
        self.waiting: list[tuple[int, int, asyncio.Future[list[Any] | None]]] = []
        self.seq = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        try:
            loop.add_reader(self.fd, self.ready)
        except BaseException:
            self.ep.close()
            raise

    # -- descriptors

    def ready(self) -> None:
        """The loop saw the epoll instance readable: serve every run that is ready."""
        runs = self.runs
        for fd, events in self.ep.poll(0):
            run = runs.get(fd)
            if run is None:
                continue
            if type(run) is _Job:
                del runs[fd]
                self.ep.unregister(fd)
                run.finished()
            else:
                run.ready(fd, events)

    async def off_loop(self, loop: asyncio.AbstractEventLoop, launch: _Launch) -> None:
        """``launch.spawn()`` in a ``libcni-spawn`` thread.

        A task cancelled meanwhile waits for the start to be over, kills and
        reaps what started (``launch.abort()``), then re-raises.
        """
        job = _Job(launch, loop.create_future())
        fd = launch.fds[6]
        self.ep.register(fd, 0)  # woken by the hang-up alone, not by an error message
        self.runs[fd] = job
        _spawn_threads().jobs.put(job)
        try:
            await job.waiter
        except asyncio.CancelledError:
            while not job.done:
                job.waiter = loop.create_future()
                with contextlib.suppress(asyncio.CancelledError):
                    await job.waiter
            launch.abort()
            raise
        if job.error is not None:
            raise job.error

    def watch(self, run: _Run) -> None:
        register, runs = self.ep.register, self.runs
        for fd, write in run.watched():
            register(fd, select.EPOLLOUT if write else select.EPOLLIN)
            runs[fd] = run
        run.unwatch = self.unwatch

    def unwatch(self, fd: int) -> None:
        """Before ``fd`` is closed (so that no stale registration outlives it)."""
        if self.runs.pop(fd, None) is not None:
            self.ep.unregister(fd)

    # -- admission

    def _age(self, now: float) -> None:
        slots, limit = self.slots, now - AGE
        while slots and (not slots[0][1] or slots[0][0] <= limit):
            slot = slots.popleft()
            if slot[1]:
                slot[1] = False
                self.young -= 1

    def _take(self, now: float) -> list[Any]:
        slot = [now, True]
        self.slots.append(slot)
        self.young += 1
        return slot

    def admit(
        self, loop: asyncio.AbstractEventLoop, order: int
    ) -> tuple[list[Any] | None, asyncio.Future[list[Any] | None] | None]:
        """A slot now, or the future that gets one (``None`` if it expires first)."""
        if not self.waiting:
            if self.young >= SLOTS:
                self._age(loop.time())
            if self.young < SLOTS:
                return self._take(loop.time()), None
        waiter: asyncio.Future[list[Any] | None] = loop.create_future()
        heapq.heappush(self.waiting, (order, next(self.seq), waiter))
        self._admit_waiting(loop)
        if waiter.done():
            return waiter.result(), None
        return None, waiter

    def release(self, loop: asyncio.AbstractEventLoop, slot: list[Any]) -> None:
        if slot[1]:
            slot[1] = False
            self.young -= 1
        slots = self.slots
        while slots and not slots[0][1]:
            slots.popleft()
        if self.waiting:
            self._admit_waiting(loop)

    def _admit_waiting(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self._age(now)
        waiting = self.waiting
        while waiting and self.young < SLOTS:
            waiter = heapq.heappop(waiting)[2]
            if not waiter.done():
                waiter.set_result(self._take(now))
        if waiting and self.timer is None and self.slots:
            self.timer = loop.call_at(self.slots[0][0] + AGE, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer = None
        self._admit_waiting(loop)

    # -- life

    def leave(self, loop: asyncio.AbstractEventLoop) -> None:
        self.users -= 1
        if self.users == 0 and not self.closing:
            self.closing = True
            loop.call_soon(self._close_if_idle, loop)

    def _close_if_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Closed once a turn of the loop passed with no run: a loop that is closed
        later leaves no descriptor behind, and a chain of runs keeps its hub."""
        self.closing = False
        if self.users:
            return
        if _hubs.get(loop) is self:
            del _hubs[loop]
        if self.timer is not None:
            self.timer.cancel()
        with contextlib.suppress(Exception):
            loop.remove_reader(self.fd)
        self.ep.close()


_hubs: Any = weakref.WeakKeyDictionary()


def _hub(loop: asyncio.AbstractEventLoop) -> _Hub:
    global _hubs
    hub: _Hub | None = _hubs.get(loop)
    if hub is None or hub.pid != os.getpid() or hub.ep.closed:
        hub = _Hub(loop)
        try:
            _hubs[loop] = hub
        except TypeError:  # a loop without weak references: remembered until the hub closes
            _hubs = {**_hubs, loop: hub}
    hub.users += 1
    return hub


# -- one run ---------------------------------------------------------------------------


async def _admitted(
    loop: asyncio.AbstractEventLoop,
    hub: _Hub,
    path: str,
    deadline: float | None,
    timeout: float | None,
) -> list[Any]:
    slot, waiter = hub.admit(loop, ORDER.get() or next(_orders))
    if waiter is None:
        assert slot is not None
        return slot
    timer = None
    if deadline is not None:
        timer = loop.call_later(max(0.0, deadline - time.monotonic()), _expire, waiter)
    try:
        slot = await waiter
    except asyncio.CancelledError:
        given = None if not waiter.done() or waiter.cancelled() else waiter.result()
        if given is not None:
            hub.release(loop, given)  # given a slot as it was cancelled
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if slot is None:
        name = os.path.basename(path)
        raise PluginTimeoutError(
            _timed_out(name, timeout),
            f"it was still waiting for its turn to start ({len(hub.waiting)} waiting, "
            f"{hub.young} starting)",
            plugin=name,
        )
    return slot


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _start(
    loop: asyncio.AbstractEventLoop,
    hub: _Hub,
    path: str,
    env: Mapping[str, str],
    stdin: bytes,
    deadline: float | None,
    timeout: float | None,
) -> _Run:
    """``_raw._starting`` for the event loop; the start is inline only when no other run is in flight."""
    retry = None
    while True:
        try:
            launch = _Launch(path, env)
            try:
                if hub.users <= 1:
                    launch.spawn()
                else:
                    await hub.off_loop(loop, launch)
            except BaseException:
                launch.abort()
                raise
            return launch.finish(stdin)
        except (OSError, ValueError) as e:
            retry = retry or _Retry(path, deadline, timeout)
            await asyncio.sleep(retry.after(e))


async def _await(loop: asyncio.AbstractEventLoop, run: _Run, deadline: float | None) -> bool:
    """Wait until ``run``'s leader exited (True) or ``deadline`` passed (False)."""
    if run.exited:
        return True
    done: asyncio.Future[bool] = loop.create_future()

    def settle(value: bool) -> None:
        if not done.done():
            done.set_result(value)

    run.on_exit = lambda: settle(True)
    left = _remaining(deadline)
    timer = None if left is None else loop.call_later(max(left, 0), settle, False)
    try:
        return await done
    finally:
        del run.on_exit
        if timer is not None:
            timer.cancel()


async def _terminate(loop: asyncio.AbstractEventLoop, run: _Run, grace: float) -> None:
    steps = _terminating(run, grace)
    with contextlib.suppress(StopIteration):
        until = next(steps)
        while True:
            until = steps.send(await _await(loop, run, until))


async def aexec(
    exec_: RawExec, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
) -> bytes:
    """:meth:`RawExec.aexec_plugin`."""
    loop = asyncio.get_running_loop()
    deadline = _deadline(timeout)
    hub = _hub(loop)
    try:
        await step()
        slot = await _admitted(loop, hub, path, deadline, timeout)
        try:
            run = await _start(loop, hub, path, env, stdin, deadline, timeout)
            try:
                hub.watch(run)
                try:
                    exited = await _await(loop, run, deadline)
                except asyncio.CancelledError:
                    await _terminate(loop, run, exec_.grace)
                    raise
                if not exited:
                    await _terminate(loop, run, exec_.grace)
                    raise run.timeout_error(timeout)
                return run.result()
            finally:
                run.close()
        finally:
            hub.release(loop, slot)
    finally:
        hub.leave(loop)
