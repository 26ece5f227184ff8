"""Time limits, written once: a :class:`Deadline`, the back-off of every wait, the wording.

Every wait goes through here: an operation's timeout shared by its plugin runs, a setup's
by its ADDs, the waits for a busy cache lock, blocking or awaited (the same pauses, the
one :func:`lock_timeout` error). Neutral: it imports nothing of libcni but ``errors``.
The clock and the sleeps (``_clock``, ``_sleep``, ``_asleep``) are read at each call:
tests replace them to count tries without timing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from .errors import LockTimeoutError

__all__ = [
    "NO_LIMIT",
    "POLL_FIRST",
    "POLL_MAX",
    "Deadline",
    "apoll",
    "backoff",
    "check_timeout",
    "lock_timeout",
    "poll",
    "timeout_message",
]

_T = TypeVar("_T")

#: Timeouts longer than this (about three years; ``math.inf``, ``1e9``) mean no
#: practical limit: no end is computed, so nothing can overflow.
NO_LIMIT = 1e8

#: The first pause between two tries of a busy lock (seconds), then doubling up to POLL_MAX.
POLL_FIRST = 0.001
POLL_MAX = 0.02

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
    """The end of a time limit that starts now: ``Deadline(2.0)``, ``Deadline(None)`` (none);
    ``limit`` is its timeout (for messages). Over :data:`NO_LIMIT` it has no end, as ``None``."""

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


def backoff(deadline: Deadline) -> Iterator[float]:
    """The pauses between the tries of something busy: :data:`POLL_FIRST`, doubling up
    to :data:`POLL_MAX`, each cut to the time left; it ends when ``deadline`` has passed."""
    pause = POLL_FIRST
    while (left := deadline.left()) is None or left > 0:
        yield pause if left is None else min(pause, left)
        pause = min(pause * 2, POLL_MAX)


def poll(attempt: Callable[[], _T | None], deadline: Deadline) -> _T | None:
    """``attempt()`` until it gives something, pausing as :func:`backoff` says (blocking);
    ``None`` when ``deadline`` passed first."""
    pauses = backoff(deadline)
    while (got := attempt()) is None:
        pause = next(pauses, None)
        if pause is None:
            return None
        _sleep(pause)
    return got


async def apoll(attempt: Callable[[], _T | None], deadline: Deadline) -> _T | None:
    """:func:`poll` without blocking the event loop: the same tries, the same pauses."""
    pauses = backoff(deadline)
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


def lock_timeout(what: str, path: str, limit: float | None, command: str = "") -> LockTimeoutError:
    """The one error of a wait for a cache lock that outlasted its time: ``what`` names the
    lock (``network 'n'``...), ``path`` is its file (the details), ``command`` the operation."""
    return LockTimeoutError(
        timeout_message(command, limit, f"the cache lock of {what} was not free")
        + "; another operation holds it",
        path,
    )
