"""Time limits, written once: a :class:`Deadline`, every retry pace (:class:`Backoff`), the
wordings. Tests replace ``_clock``, ``_sleep`` and ``_asleep`` to count tries without timing."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

from .errors import LockTimeoutError

_T = TypeVar("_T")

#: Timeouts longer than this (about three years, ``math.inf``) mean no limit: nothing overflows.
NO_LIMIT = 1e8

_clock = time.monotonic
_sleep = time.sleep


async def _asleep(seconds: float) -> None:
    import asyncio  # only the async drivers wait this way

    await asyncio.sleep(seconds)


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` if it is ``None`` or a number >= 0; ``ValueError`` for a negative or NaN one."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"timeout must be a number of seconds or None, not {type(timeout).__name__}"
        )
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
    return timeout


class Deadline:
    """The end of a time limit that starts now (``None`` or over :data:`NO_LIMIT`: no end);
    ``limit`` is its timeout, for messages."""

    __slots__ = ("_end", "limit")

    def __init__(self, timeout: float | None) -> None:
        self.limit = timeout
        self._end = None if timeout is None or timeout > NO_LIMIT else _clock() + timeout

    def left(self) -> float | None:
        """Seconds left, ``0.0`` once it passed; ``None`` when there is no end."""
        if self._end is None:
            return None
        return max(0.0, self._end - _clock())

    @property
    def expired(self) -> bool:
        """Whether the end has passed (never without an end)."""
        return self._end is not None and _clock() >= self._end


class Backoff(NamedTuple):
    """A pace of retries: from ``first`` seconds, doubling up to ``cap``, each pause up to
    ``jitter`` (a fraction) shorter at random, for ``budget`` seconds at most (``None``: no
    budget but the deadline)."""

    first: float
    cap: float
    budget: float | None = None
    jitter: float = 0.0

    def pauses(
        self, deadline: Deadline, budget: Deadline | None = None, *, whole: bool = False
    ) -> Iterator[float]:
        """The pauses until ``deadline`` or ``budget`` (default: from now) passed; one longer
        than the time left is cut to it, or ends them if ``whole`` (a try that takes time)."""
        budget = Deadline(self.budget) if budget is None else budget
        pause = self.first
        while True:
            left = min((t for t in (deadline.left(), budget.left()) if t is not None), default=None)
            shorter = pause * (1 - self.jitter * random.random()) if self.jitter else pause
            if left is not None and (left <= 0 or (whole and shorter >= left)):
                return
            yield shorter if left is None else min(shorter, left)
            pause = min(pause * 2, self.cap)


#: A busy cache lock (``poll``, ``apoll``), until the wait's deadline.
LOCK_WAIT = Backoff(0.001, 0.02)
#: A plugin binary still being written (``ETXTBSY``).
BUSY_BINARY = Backoff(0.005, 0.5, budget=5.0)
#: A setup's ADD that failed with code 11: the jitter spreads containers retrying together.
TRY_AGAIN = Backoff(0.1, 5.0, jitter=0.2)


def poll(attempt: Callable[[], _T | None], deadline: Deadline) -> _T | None:
    """``attempt()`` until it gives something, at :data:`LOCK_WAIT`'s pace; else ``None``."""
    pauses = LOCK_WAIT.pauses(deadline)
    while (got := attempt()) is None:
        pause = next(pauses, None)
        if pause is None:
            return None
        _sleep(pause)
    return got


async def apoll(attempt: Callable[[], _T | None], deadline: Deadline) -> _T | None:
    """:func:`poll` without blocking the event loop: the same tries, the same pauses."""
    pauses = LOCK_WAIT.pauses(deadline)
    while (got := attempt()) is None:
        pause = next(pauses, None)
        if pause is None:
            return None
        await _asleep(pause)
    return got


def timeout_message(command: str, limit: float | None, what: str) -> str:
    """The one wording of an operation that ran out of time: ``ADD timed out: plugin p1 did
    not finish within the 2s timeout`` (``limit``: the operation's timeout, not what was left)."""
    return f"{command or 'operation'} timed out: {what} within the {limit or 0.0:.3g}s timeout"


def plugin_timed_out(name: str, limit: float | None) -> str:
    """The wording of a bare ``Exec`` call out of time (an operation's: ``timeout_message``)."""
    return f'plugin "{name}" timed out after {limit or 0.0:.3g}s'


def lock_timeout(what: str, path: str, limit: float | None, command: str = "") -> LockTimeoutError:
    """The error of a cache lock wait out of time: ``what`` names the lock, ``path`` its file."""
    return LockTimeoutError(
        timeout_message(command, limit, f"the cache lock of {what} was not free")
        + "; another operation holds it",
        path,
    )
