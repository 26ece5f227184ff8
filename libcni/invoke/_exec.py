"""The default :class:`~libcni.invoke.Exec`: ``_raw``'s runs, waited for with ``select.poll``
(``exec_plugin``) or on the event loop (``aexec_plugin``, :mod:`._async`)."""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Mapping, Sequence

from libcni._deadline import Deadline
from libcni.invoke._find import find_in_path
from libcni.invoke._raw import _MAX_WAIT, TICK, _Run, _Start

__all__ = ["RawExec"]


class RawExec:
    """The default :class:`~libcni.invoke.Exec`: runs plugin binaries as child processes.

    Each call starts the binary (no arguments, ``env`` the complete environment, default
    signal state) as the leader of a new process group and collects its output without
    blocking; when the leader exits, what remains of its group is killed with SIGKILL.
    On timeout the group gets SIGTERM, then SIGKILL after ``grace`` seconds:
    :class:`~libcni.errors.PluginTimeoutError`. Standard error goes to the
    ``libcni.invoke`` logger, one record per line (DEBUG on success, WARNING on failure).
    """

    def __init__(self, grace: float = 1.0) -> None:
        self.grace = grace

    def __repr__(self) -> str:
        return f"RawExec(grace={self.grace!r})"

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        """See :func:`libcni.invoke.find_in_path`."""
        return find_in_path(plugin, paths)

    def exec_plugin(
        self,
        path: str,
        stdin: bytes,
        env: Mapping[str, str],
        timeout: float | None,
        *,
        pass_fd: int | None = None,
    ) -> bytes:
        """Run the plugin at ``path``; return its standard output if it exits 0.

        A failing plugin raises :class:`~libcni.errors.PluginError` with its CNI error
        object's code, message and details (code 999 when it printed none), ``plugin``,
        ``exit_code`` or ``signal``, and the tail of ``stderr``; a binary that cannot be
        started, ``PluginError`` code 5. ``timeout`` (seconds, ``None``: no limit) bounds
        the whole call: :class:`~libcni.errors.PluginTimeoutError`. ``pass_fd``: a
        descriptor the plugin and its children inherit (an ADD's attachment lock).
        """
        deadline = Deadline(timeout)
        start = _Start(path, env, stdin, pass_fd, deadline)
        while not isinstance(run := start.once(), _Run):
            time.sleep(run)
        try:
            try:
                exited = self._wait(run, deadline)
            except (KeyboardInterrupt, SystemExit):  # a signal handler raised: as a timeout
                self._terminate(run)
                raise
            if not exited:
                self._terminate(run)
                raise run.timeout_error(deadline)
            return run.result()
        finally:
            run.close()

    def _terminate(self, run: _Run) -> None:
        """SIGTERM to the group, ``grace`` seconds, then SIGKILL (timeout, interrupt)."""
        run.kill(signal.SIGTERM)
        if not self._wait(run, Deadline(self.grace)):
            run.kill(signal.SIGKILL)
            self._wait(run, Deadline(None))

    @staticmethod
    def _wait(run: _Run, deadline: Deadline) -> bool:
        """Serve ``run`` until its leader exited (True) or ``deadline`` passed (False)."""
        poller = run.poller
        if poller is None:
            poller = run.poller = select.poll()
            run.unwatch = poller.unregister
            for fd, write in run.watched():
                poller.register(fd, select.POLLOUT if write else select.POLLIN)
        tick = _MAX_WAIT if run.pidfd is not None else TICK
        while not run.exited():
            left = deadline.left()
            if left is not None and left <= 0:
                return False
            wait = tick if left is None else min(left, tick)
            for fd, _ in poller.poll(max(1, int(wait * 1000 + 0.999))):
                run.ready(fd)
        return True

    async def aexec_plugin(
        self,
        path: str,
        stdin: bytes,
        env: Mapping[str, str],
        timeout: float | None,
        *,
        pass_fd: int | None = None,
    ) -> bytes:
        """:meth:`exec_plugin` as a coroutine, on the running event loop.

        Cancelling it terminates the plugin's process group (SIGTERM, then
        SIGKILL after ``grace`` seconds), reaps it, and re-raises
        :class:`asyncio.CancelledError`.
        """
        from libcni.invoke._async import aexec  # asyncio: not at ``import libcni``

        return await aexec(self, path, stdin, env, timeout, pass_fd)
