"""The drivers of effect generators, blocking and async; :func:`finish` outlasts a cancellation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

_R = TypeVar("_R")


def drive(op: Generator[Any, Any, _R], perform: Callable[[Any], Any]) -> _R:
    """Run ``op`` to its end: ``perform`` each effect it yields, send the outcome back in, or
    throw in the exception it raised (the operation may handle it: GC collects errors)."""
    outcome: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = op.send(outcome) if error is None else op.throw(error)
        except StopIteration as stop:
            value: _R = stop.value
            return value
        outcome, error = None, None
        try:
            outcome = perform(effect)
        except BaseException as e:  # handed to the operation, which may handle it
            error = e


async def adrive(op: Generator[Any, Any, _R], perform: Callable[[Any], Awaitable[Any]]) -> _R:
    """:func:`drive` for a coroutine: each effect is ``await perform(effect)`` (``AsyncCNIConfig``)."""
    outcome: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = op.send(outcome) if error is None else op.throw(error)
        except StopIteration as stop:
            value: _R = stop.value
            return value
        outcome, error = None, None
        try:
            outcome = await perform(effect)
        except BaseException as e:  # handed to the operation, which may handle it
            error = e


async def finish(future: asyncio.Future[Any]) -> asyncio.CancelledError | None:
    """Wait for ``future`` to finish, even if the waiting task is cancelled meanwhile: what
    cannot be stopped half-way (a worker thread, a rollback DEL) is waited for to its end.

    The first cancellation of the waiter meanwhile is returned (``None``: none), for the
    caller to raise once it has done what must follow.
    """
    import asyncio  # loaded already: only coroutines call this

    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    return cancelled


__all__ = ["adrive", "drive", "finish"]
