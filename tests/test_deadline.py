"""One deadline and one back-off for every wait (``libcni._deadline``).

The waits are checked by counting tries under a fake clock whose time moves
only when a wait sleeps: never by timing. The sync and async drivers try a
busy lock as often, pause as long, and raise the same error.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import math
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import libcni
from libcni import _deadline
from libcni._deadline import BUSY_BINARY, LOCK_WAIT, TRY_AGAIN, Backoff, Deadline, poll
from libcni.cache import ResultCache
from libcni.errors import LockTimeoutError
from libcni.manager import AsyncNetworkManager, NetworkManager

PLUGINS = str(Path(__file__).parent / "plugins")


class FakeTime:
    """A clock that moves only when something sleeps; the pauses slept, in order."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    t = FakeTime()
    monkeypatch.setattr(_deadline, "_clock", t.clock)
    monkeypatch.setattr(_deadline, "_sleep", t.sleep)
    monkeypatch.setattr(_deadline, "_asleep", t.asleep)
    return t


def test_deadline_left_and_expired(fake: FakeTime) -> None:
    d = Deadline(2.0)
    assert d.limit == 2.0 and d.left() == 2.0 and not d.expired
    fake.now += 1.5
    assert d.left() == pytest.approx(0.5) and not d.expired
    fake.now += 1.0
    assert d.left() == 0.0 and d.expired
    for unlimited in (None, math.inf, 1e9):
        d = Deadline(unlimited)
        fake.now += 1e6
        assert d.left() is None and not d.expired and d.limit == unlimited


def test_backoff_doubles_up_to_its_most_and_ends_with_the_time(fake: FakeTime) -> None:
    pauses = list(itertools.islice(LOCK_WAIT.pauses(Deadline(0.1)), 3))  # no time passes
    assert pauses == [0.001, 0.002, 0.004]
    gen = LOCK_WAIT.pauses(Deadline(0.1))
    got = []
    for pause in gen:
        got.append(pause)
        fake.sleep(pause)
    assert got[:6] == [0.001, 0.002, 0.004, 0.008, 0.016, 0.02]
    assert max(got) == LOCK_WAIT.cap and sum(got) == pytest.approx(0.1)
    unlimited = LOCK_WAIT.pauses(Deadline(None))
    assert [next(unlimited) for _ in range(8)][-3:] == [0.02, 0.02, 0.02]


def _slept(pauses: Iterator[float], fake: FakeTime) -> list[float]:
    got = []
    for pause in pauses:
        got.append(pause)
        fake.sleep(pause)
    return got


def test_every_retry_pace_is_a_named_backoff(
    fake: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Backoff(0.001, 0.02) == LOCK_WAIT
    # Code 11: 0.1 s doubling to 5 s, up to 20% shorter at random.
    monkeypatch.setattr(random, "random", lambda: 0.0)
    assert list(itertools.islice(TRY_AGAIN.pauses(Deadline(None)), 8)) == [
        0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0
    ]  # fmt: skip
    monkeypatch.setattr(random, "random", lambda: 1.0)
    assert next(TRY_AGAIN.pauses(Deadline(None))) == pytest.approx(0.08)
    # A retried plugin run needs time of its own: a pause that does not fit ends them.
    assert _slept(TRY_AGAIN.pauses(Deadline(0.5), whole=True), fake) == pytest.approx([0.08, 0.16])
    # A busy binary: 5 ms doubling to 0.5 s, for 5 s at most whatever the deadline.
    busy = _slept(BUSY_BINARY.pauses(Deadline(None), whole=True), fake)
    assert busy[:3] == [0.005, 0.01, 0.02] and max(busy) == 0.5
    assert 4.5 < sum(busy) <= 5.0


def test_poll_and_apoll_try_alike(fake: FakeTime) -> None:
    tries: list[str] = []

    def busy(kind: str) -> Callable[[], None]:
        def attempt() -> None:
            tries.append(kind)

        return attempt

    assert poll(busy("sync"), Deadline(0.1)) is None
    sync_pauses = list(fake.pauses)
    fake.pauses.clear()
    assert asyncio.run(_deadline.apoll(busy("async"), Deadline(0.1))) is None
    assert fake.pauses == sync_pauses
    assert tries.count("sync") == tries.count("async") == len(sync_pauses) + 1
    # A try that succeeds ends the wait at once; zero time means one try.
    assert poll(lambda: "got", Deadline(0.0)) == "got"
    tries.clear()
    assert poll(busy("once"), Deadline(0.0)) is None and tries == ["once"]


@pytest.fixture
def flock_tries(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How many times each lock file was tried without waiting (``LOCK_NB``), by path."""
    tries: dict[str, int] = {}
    real = fcntl.flock

    def counting(fd: Any, op: int) -> None:
        if op & fcntl.LOCK_NB:
            path = os.readlink(f"/proc/self/fd/{fd}")
            tries[path] = tries.get(path, 0) + 1
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", counting)
    yield tries


def _expected_tries(fake: FakeTime, timeout: float) -> int:
    """The tries of a wait that never gets the lock (what both drivers must make)."""
    before, fake.now = fake.now, 5000.0
    count = 0

    def attempt() -> None:
        nonlocal count
        count += 1

    poll(attempt, Deadline(timeout))
    fake.now = before
    return count


def test_setup_sync_and_async_wait_for_a_busy_container_alike(
    tmp_path: Path, fake: FakeTime, flock_tries: dict[str, int]
) -> None:
    net = libcni.conf_list_from_bytes(
        b'{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "testplugin"}]}'
    )
    kw: dict[str, Any] = {"networks": [net], "cache_dir": tmp_path, "loopback": False}
    cache = ResultCache(tmp_path)
    held = cache.container_lock("c1")
    path = os.path.join(cache.locks_dir, "containers", "c1")
    expected = _expected_tries(fake, 0.1)
    fake.pauses.clear()
    try:
        with pytest.raises(LockTimeoutError) as sync_error:
            NetworkManager(None, [PLUGINS], **kw).setup("c1", "/ns", timeout=0.1)
        sync_tries, sync_pauses = flock_tries.pop(path), list(fake.pauses)
        fake.pauses.clear()
        manager = AsyncNetworkManager(None, [PLUGINS], **kw)
        with pytest.raises(LockTimeoutError) as async_error:
            asyncio.run(manager.setup("c1", "/ns", timeout=0.1))
        async_tries = flock_tries.pop(path)
    finally:
        held.release()
    assert sync_tries == async_tries == expected > 5
    assert fake.pauses == sync_pauses
    assert str(sync_error.value) == str(async_error.value)
    assert sync_error.value.msg == (
        "setup timed out: the cache lock of container 'c1' was not free within the 0.1s "
        "timeout; another operation holds it"
    )
    assert sync_error.value.details == async_error.value.details == path


def test_add_sync_and_async_wait_for_a_busy_attachment_alike(
    tmp_path: Path, fake: FakeTime, flock_tries: dict[str, int]
) -> None:
    net = libcni.conf_list_from_bytes(
        b'{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "testplugin"}]}'
    )
    rt = libcni.RuntimeConf("c1", "/ns", "eth0")
    cache = ResultCache(tmp_path)
    held = cache.lock("n", "c1", "eth0")
    expected = _expected_tries(fake, 0.1)
    fake.pauses.clear()
    try:
        with pytest.raises(LockTimeoutError) as sync_error:
            libcni.CNIConfig([PLUGINS], cache_dir=tmp_path).add_network_list(net, rt, timeout=0.1)
        sync_tries, sync_pauses = flock_tries.pop(held.path), list(fake.pauses)
        fake.pauses.clear()
        acni = libcni.AsyncCNIConfig([PLUGINS], cache_dir=tmp_path)
        with pytest.raises(LockTimeoutError) as async_error:
            asyncio.run(acni.add_network_list(net, rt, timeout=0.1))
        async_tries = flock_tries.pop(held.path)
    finally:
        held.release()
    assert sync_tries == async_tries == expected > 5
    assert fake.pauses == sync_pauses
    assert str(sync_error.value) == str(async_error.value)
    assert sync_error.value.msg.startswith("ADD timed out: the cache lock of attachment")
    # The details name the file waited for, whichever driver waited.
    assert sync_error.value.details == async_error.value.details == held.path
    assert held.path == os.path.join(cache.locks_dir, "n-c1-eth0")


def test_a_timeout_is_validated_once_per_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At the public entry only: not again for the operation's deadline, nor per plugin run.
    import sys

    checked: list[object] = []

    check = _deadline.check_timeout

    def counted(timeout: float | None) -> float | None:
        checked.append(timeout)
        return check(timeout)

    cni = libcni.CNIConfig([PLUGINS], cache_dir=tmp_path)
    for name, module in list(sys.modules.items()):
        if name.startswith("libcni") and getattr(module, "check_timeout", None) is not None:
            monkeypatch.setattr(module, "check_timeout", counted)
    net = libcni.conf_list_from_bytes(
        b'{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "testplugin"},'
        b' {"type": "testplugin"}]}'
    )
    rt = libcni.RuntimeConf("c1", "/ns", "eth0")
    cni.add_network_list(net, rt, timeout=30)
    assert checked == [30]
