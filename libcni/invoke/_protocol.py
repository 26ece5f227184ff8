"""The seam between the operations and process execution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["AsyncExec", "Exec"]


class Exec(Protocol):
    """How the library runs plugins; :class:`~libcni.invoke.RawExec` is the default.

    Tests (and embedders with special needs) pass another implementation to
    ``CNIConfig`` to replace process execution without touching the algorithm.
    """

    def exec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        """Run the plugin at ``path`` with ``stdin`` and the complete environment ``env``.

        Returns its standard output on success. Raises
        :class:`~libcni.errors.PluginError` when the plugin fails (or cannot be
        started) and :class:`~libcni.errors.PluginTimeoutError` when it does not
        finish within ``timeout`` seconds (``None``: no limit).
        """
        ...

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        """Return the path of the binary for the plugin type ``plugin``.

        See :func:`libcni.invoke.find_in_path` for the rules.
        """
        ...


@runtime_checkable
class AsyncExec(Protocol):
    """An :class:`Exec` that also runs plugins on the event loop (``RawExec``, ``MockExec``):
    ``AsyncCNIConfig`` awaits its :meth:`aexec_plugin`, and runs any other ``Exec`` in a thread."""

    async def aexec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        """:meth:`Exec.exec_plugin` as a coroutine; cancelling it stops the plugin."""
        ...
