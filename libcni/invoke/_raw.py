"""Running a plugin binary as a child process: one call is one :class:`_Run`, which never
waits; the drivers (:mod:`._exec`'s ``select.poll``, :mod:`._async`'s event loop) tell it
which descriptor is ready, so both share every rule."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from libcni import _log as logging  # logging, imported at first use
from libcni._deadline import BUSY_BINARY, Deadline, plugin_timed_out
from libcni.errors import CODE_INTERNAL, CODE_INVALID_ENV, CODE_IO, PluginError, PluginTimeoutError
from libcni.invoke._errobj import decode_error_object as _decode_error_object

log = logging.getLogger("libcni.invoke")

#: The descriptor number a plugin finds ``pass_fd`` at (after stdin, stdout, stderr).
_PASSED_FD = 3
_CHUNK = 1 << 16  # the default pipe capacity
_STDERR_KEEP = 1 << 20  # stderr kept for logging; older bytes are dropped
_STDOUT_MAX = 16 << 20  # more stdout than this: "output too large", the group is killed
_STDERR_TAIL = 4096  # stderr attached to errors
_EXCERPT = 1024  # invalid error output quoted in errors
_DRAIN_READS = 16  # reads per stream once the leader exited (more than a pipe holds)
#: How often the leader's exit is checked without a pidfd (Linux before 5.3).
TICK = 0.02
_MAX_WAIT = 86400.0  # the longest single poll (it takes a C int of milliseconds)
_UNKNOWN_STATUS = -1  # wait status placeholder when the child was reaped by someone else
#: Every signal a plugin starts with at its default disposition, as Go starts it.
_DEFAULT_SIGNALS = tuple(sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}))


def _status_text(status: int | None) -> str:
    if status is None or status == _UNKNOWN_STATUS:
        return "unknown exit status"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by signal {name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _excerpt(data: bytes) -> str:
    text = data[:_EXCERPT].decode("utf-8", errors="replace")
    return text + f"... ({len(data)} bytes)" if len(data) > _EXCERPT else text


def _inherited(low: int) -> list[tuple[int, int]]:
    """The close actions of the runtime's inheritable descriptors from ``low`` up."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    out = []
    for name in names:
        fd = int(name)
        try:
            if fd >= low and os.get_inheritable(fd):
                out.append((os.POSIX_SPAWN_CLOSE, fd))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return out


#: SIGPIPE and SIGXFSZ: Python ignores them, ``restore_signals`` resets them in the child.
_RESET = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
#: A new process group (3.10 has no ``process_group``; a new session is a new group too).
_NEW_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
)


def _signals_clean() -> bool:
    """Whether this thread blocks and ignores nothing ``restore_signals`` does not reset:
    then a ``subprocess`` child gets Go's signal state (``/proc/thread-self/status``)."""
    try:
        with open("/proc/thread-self/status", "rb") as f:
            text = f.read()
        i, j = text.index(b"SigBlk:\t") + 8, text.index(b"SigIgn:\t") + 8
        return not int(text[i : i + 16], 16) and not int(text[j : j + 16], 16) & ~_RESET
    except (OSError, ValueError):
        return False


#: The leaders of this process's plugin runs in flight (a start alone takes ``posix_spawn``).
_LIVE: set[int] = set()
os.register_at_fork(after_in_child=_LIVE.clear)
#: ``posix_spawn``'s own close-from action (Python 3.13+), else the descriptors are listed.
_CLOSEFROM: int | None = getattr(os, "POSIX_SPAWN_CLOSEFROM", None)
#: A start whose pipes got a descriptor number this high lists many to close: ``subprocess``.
_MANY_FDS = 64


def _spawn(
    path: str, env: Mapping[str, str], stdio: list[int], pass_fd: int | None, hold_gil: bool
) -> int:
    """Start ``path`` as the leader of a new process group, as Go starts it: ``stdio`` as its
    descriptors 0 to 2, ``pass_fd`` as 3, nothing else inherited, signals at their defaults.
    ``os.posix_spawn`` (60 µs faster, but it holds the GIL until the child's ``exec``) when
    ``hold_gil`` and no other plugin of the process is in flight, or when the signal state
    asks for it; else ``subprocess`` (docs/performance.md, "A start alone")."""
    lone = hold_gil and not _LIVE and (_CLOSEFROM is not None or max(stdio) < _MANY_FDS)
    if not lone and _signals_clean():
        import subprocess  # here: about 2 ms to import, and only plugin runs need it

        child = subprocess.Popen(
            [path], executable=path, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], env=env,
            close_fds=True, pass_fds=() if pass_fd is None else (pass_fd,), restore_signals=True,
            **_NEW_GROUP,
        )  # fmt: skip
        child.returncode = 0  # waited for and reaped here (pidfd, waitpid), never by Popen
        return child.pid
    sources = stdio if pass_fd is None else [*stdio, pass_fd]
    if any(fd <= i for i, fd in enumerate(sources)):
        # A source at or below its target (the runtime's stdio is closed and a pipe took
        # its number, or fd 3 itself): a dup2 would clobber it or keep close-on-exec.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _PASSED_FD + 1) for fd in sources]
        try:
            return _spawn_clean(path, env, high)
        finally:
            for fd in high:
                os.close(fd)
    return _spawn_clean(path, env, sources)


def _spawn_clean(path: str, env: Mapping[str, str], sources: list[int]) -> int:
    """``os.posix_spawn`` with ``sources`` as descriptors 0, 1, 2 (and 3), the signal state reset."""
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(sources)]
    actions += [(_CLOSEFROM, len(sources))] if _CLOSEFROM is not None else _inherited(len(sources))
    return os.posix_spawn(
        path, [path], env, file_actions=actions, setpgroup=0, setsigmask=(),
        setsigdef=_DEFAULT_SIGNALS,
    )  # fmt: skip


def _pidfd(pid: int) -> int | None:
    """A descriptor readable once ``pid`` exits; ``None`` before Linux 5.3 (then polled)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class _Run:
    """One running plugin: its pipes and pidfd, the output collected, the decoded outcome.
    Starting it raises ``OSError`` or ``ValueError`` (a NUL), leaving nothing open."""

    # Set by the driver: stop watching a descriptor; called once the leader was reaped.
    unwatch: Callable[[int], None] = staticmethod(lambda fd: None)
    on_exit: Callable[[], None] = staticmethod(lambda: None)

    def __init__(
        self, path: str, env: Mapping[str, str], stdin: bytes, pass_fd: int | None, hold_gil: bool
    ) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.status: int | None = None  # wait status once reaped
        self._out: list[bytes] = []
        self._out_size = 0
        self.too_large = False  # stdout passed _STDOUT_MAX: the group was killed
        self._err = bytearray()
        self._err_dropped = 0
        self._logged = False
        self.poller: select.poll | None = None  # the synchronous driver's, once made
        ours: list[int] = []
        theirs: list[int] = []
        try:
            for _ in range(3):
                r, w = os.pipe2(os.O_CLOEXEC)
                ours.append(w if not theirs else r)
                theirs.append(r if not theirs else w)
            self.pid = _spawn(path, env, theirs, pass_fd, hold_gil)
            _LIVE.add(self.pid)
        except BaseException:
            for fd in ours + theirs:
                os.close(fd)
            raise
        for fd in theirs:
            os.close(fd)
        for fd in ours:
            os.set_blocking(fd, False)
        self.stdin_fd: int | None = ours[0]
        self.stdout_fd: int | None = ours[1]
        self.stderr_fd: int | None = ours[2]
        self.pidfd = _pidfd(self.pid)
        self._stdin = memoryview(stdin)
        self.write_stdin()

    def watched(self) -> list[tuple[int, bool]]:
        """The open descriptors as ``(fd, wants_write)``."""
        out = [(self.stdin_fd, True)] if self.stdin_fd is not None else []
        readers = (self.stdout_fd, self.stderr_fd, self.pidfd)
        return out + [(fd, False) for fd in readers if fd is not None]

    def ready(self, fd: int) -> None:
        """The driver saw ``fd`` ready (readable, writable, hung up or in error)."""
        if fd == self.pidfd:
            self.leader_exited()
        elif fd == self.stdin_fd:
            self.write_stdin()
        elif fd == self.stdout_fd or fd == self.stderr_fd:  # (not one closed meanwhile)
            self._read(fd)

    def _close(self, fd: int) -> None:
        if fd == self.stdin_fd:
            self.stdin_fd = None
        elif fd == self.stdout_fd:
            self.stdout_fd = None
        elif fd == self.stderr_fd:
            self.stderr_fd = None
        elif fd == self.pidfd:
            self.pidfd = None
        self.unwatch(fd)
        os.close(fd)

    def write_stdin(self) -> None:
        """Write what the pipe takes now; close it once all is written or the plugin left."""
        fd = self.stdin_fd
        if fd is None:
            return
        try:
            while self._stdin:
                self._stdin = self._stdin[os.write(fd, self._stdin) :]
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the plugin does not read (all of) its input
            pass
        self._close(fd)

    def _read(self, fd: int) -> bool:
        """Read ``fd`` once; close it at its end. Whether there may be more now."""
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close(fd)
            return False
        if fd == self.stderr_fd:
            self._err += data
            excess = len(self._err) - _STDERR_KEEP
            if excess > 0:
                del self._err[:excess]
                self._err_dropped += excess
            return True
        self._out_size += len(data)
        if self._out_size > _STDOUT_MAX:
            # Flooding: stop reading and kill the group; memory stays bounded.
            self.too_large = True
            self._out.clear()
            self.kill(signal.SIGKILL)
            self._close(fd)
            return False
        self._out.append(data)
        return True

    def _drain(self) -> None:
        """Read what the pipes hold now; bounded: a survivor that keeps writing must not keep us."""
        for fd in (self.stdout_fd, self.stderr_fd):
            for _ in range(_DRAIN_READS):
                if fd is None or not self._read(fd):
                    break

    def kill(self, sig: int) -> None:
        """Send ``sig`` to the plugin's whole process group.

        Only while the leader is not reaped: its zombie keeps the group ID from
        being reused, so the signal cannot reach an unrelated group.
        """
        if self.status is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def exited(self) -> bool:
        """Whether the leader has exited (and then was reaped, its group killed)."""
        if self.status is None and self.pidfd is None:
            # No pidfd: look without reaping (WNOWAIT), so the group ID stays ours.
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    self.leader_exited()
            except ChildProcessError:
                self.leader_exited()
        return self.status is not None

    def leader_exited(self) -> None:
        """The leader is gone: keep what it wrote, kill what remains of its group, reap."""
        if self.status is not None:
            return
        self._drain()
        self.kill(signal.SIGKILL)
        self._drain()
        try:
            self.status = os.waitpid(self.pid, 0)[1]
        except ChildProcessError:  # reaped by someone else (SIGCHLD ignored...)
            self.status = _UNKNOWN_STATUS
        _LIVE.discard(self.pid)
        self.close()
        self.on_exit()

    def close(self) -> None:
        """Release everything; a leader still running is killed with its group and reaped."""
        if self.status is None:
            self.kill(signal.SIGKILL)
            self.leader_exited()
            return
        for fd in (self.stdin_fd, self.stdout_fd, self.stderr_fd, self.pidfd):
            if fd is not None:
                self._close(fd)

    def _stderr_tail(self) -> str:
        return bytes(self._err[-_STDERR_TAIL:]).decode("utf-8", errors="replace")

    def _log_stderr(self, level: int) -> None:
        if self._logged or not self._err or not log.isEnabledFor(level):
            return
        self._logged = True
        if self._err_dropped:
            log.log(level, "%s: (%d earlier bytes of stderr dropped)", self.name, self._err_dropped)
        for line in self._err.decode("utf-8", errors="replace").splitlines():
            log.log(level, "%s: %s", self.name, line)

    def _context(self) -> dict[str, Any]:
        status = self.status
        exit_code = sig = None
        if status is not None and status != _UNKNOWN_STATUS:
            if os.WIFEXITED(status):
                exit_code = os.WEXITSTATUS(status)
            elif os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
        return dict(plugin=self.name, exit_code=exit_code, signal=sig, stderr=self._stderr_tail())

    def result(self) -> bytes:
        """Standard output if the plugin exited 0, else the :class:`PluginError` it reported."""
        if self.too_large:
            self._log_stderr(logging.WARNING)
            raise PluginError(
                f'plugin "{self.name}" failed: output too large',
                f"more than {_STDOUT_MAX >> 20} MiB on stdout; its process group was killed"
                f" ({_status_text(self.status)})",
                code=CODE_INTERNAL,
                **self._context(),
            )
        if self.status == 0:
            self._log_stderr(logging.DEBUG)
            return b"".join(self._out)
        self._log_stderr(logging.WARNING)
        raise self._failure()

    def _failure(self) -> PluginError:
        stdout = b"".join(self._out)
        ctx = self._context()
        status = _status_text(self.status)
        if not stdout.strip():
            details = status + (f"; stderr: {ctx['stderr']}" if ctx["stderr"] else "")
            return PluginError(
                f'plugin "{self.name}" failed with no error message',
                details,
                code=CODE_INTERNAL,
                **ctx,
            )
        decoded = _decode_error_object(stdout)
        if isinstance(decoded, str):
            return PluginError(
                f'plugin "{self.name}" failed ({status}) and its output is not a valid'
                f" CNI error object: {decoded}",
                _excerpt(stdout),
                code=CODE_INTERNAL,
                **ctx,
            )
        code, msg, details = decoded
        return PluginError(msg, details, code=code, **ctx)

    def timeout_error(self, deadline: Deadline) -> PluginTimeoutError:
        self._log_stderr(logging.WARNING)
        return PluginTimeoutError(
            plugin_timed_out(self.name, deadline.limit),
            f"its process group was killed ({_status_text(self.status)})",
            **self._context(),
        )


class _Start:
    """The start of one plugin run: :meth:`once` gives the :class:`_Run`, or the pause before
    trying again (ETXTBSY only, at :data:`~libcni._deadline.BUSY_BINARY`'s pace). Else
    ``PluginError`` code 5 (code 4 for a NUL), or ``PluginTimeoutError``."""

    def __init__(
        self,
        path: str,
        env: Mapping[str, str],
        stdin: bytes,
        pass_fd: int | None,
        deadline: Deadline,
        *,
        hold_gil: bool = True,
    ) -> None:
        self.path = path
        self.args = (path, env, stdin, pass_fd, hold_gil)
        self.deadline = deadline
        self.busy = Deadline(BUSY_BINARY.budget)
        self.pauses = BUSY_BINARY.pauses(deadline, self.busy, whole=True)

    def once(self) -> _Run | float:
        """Try to start the plugin (in a ``libcni-spawn`` thread for the async driver)."""
        try:
            return _Run(*self.args)
        except (OSError, ValueError) as e:
            return self._after(e)

    def _after(self, err: Exception) -> float:
        name = os.path.basename(self.path)
        if not isinstance(err, OSError):  # ValueError: NUL in the environment or the path
            raise PluginError(
                f'cannot run plugin "{self.path}": invalid environment or path',
                str(err),
                code=CODE_INVALID_ENV,
                plugin=name,
            ) from err
        code = err.errno or 0
        desc = f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
        if code == errno.ETXTBSY:
            pause = next(self.pauses, None)
            if pause is not None:
                return pause
            left, busy = self.deadline.left(), self.busy.left()
            if left is not None and (busy is None or left <= busy):  # the call's time ran out
                raise PluginTimeoutError(
                    plugin_timed_out(name, self.deadline.limit),
                    f"{self.path} stayed busy: {desc}",
                    plugin=name,
                ) from err
            desc += f", for {BUSY_BINARY.budget:g}s"
        raise PluginError(
            f'failed to execute plugin "{self.path}"', desc, code=CODE_IO, plugin=name
        ) from err
