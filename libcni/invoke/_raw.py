"""Running a plugin binary as a child process.

One call is one :class:`_Run`: a small state machine over the child's three
pipes and its pidfd. It does no waiting of its own; the synchronous driver
(``select.poll``) and the asynchronous one (``_loop``: an epoll per event loop) only tell it
which descriptor is ready, so both share every rule: how output is collected,
how the process group is killed and reaped, and how the outcome is decoded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from libcni import _log as logging  # logging, imported at first use
from libcni._deadline import NO_LIMIT, check_timeout
from libcni._env import Environment, encode_env
from libcni.errors import CODE_INTERNAL, CODE_INVALID_ENV, CODE_IO, PluginError, PluginTimeoutError
from libcni.invoke._errobj import decode_error_object as _decode_error_object
from libcni.invoke._find import find_in_path

__all__ = ["RawExec"]

log = logging.getLogger("libcni.invoke")

_CHUNK = 1 << 16  # the default pipe capacity
_STDERR_KEEP = 1 << 20  # stderr kept for logging; older bytes are dropped
_STDOUT_MAX = 16 << 20  # more stdout than this: "output too large", the group is killed
_STDERR_TAIL = 4096  # stderr attached to errors
_EXCERPT = 1024  # invalid error output quoted in errors
_DRAIN_READS = 16  # reads per stream once the leader exited (more than a pipe holds)
_HUP = select.POLLHUP  # the same bit for poll and epoll
_BUSY_BUDGET = 5.0  # seconds of retrying ETXTBSY
_BUSY_FIRST_DELAY = 0.005
_BUSY_MAX_DELAY = 0.5
#: Start the plugin as the leader of a new process group (3.10 has no
#: ``process_group``; a new session is also a new group there).
_NEW_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
)
_UNKNOWN_STATUS = -1  # wait status placeholder when the child was reaped by someone else
#: The longest single wait (seconds): ``poll`` takes a C int of milliseconds.
_MAX_WAIT = 86400.0
#: Signals whose disposition a plugin must not inherit. SIGPIPE and SIGXFSZ,
#: which Python itself ignores, are reset by ``restore_signals``; SIGKILL and
#: SIGSTOP cannot be caught, blocked or ignored.
_CHECKED_SIGNALS = tuple(
    int(sig)
    for sig in sorted(
        set(signal.valid_signals())
        - {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, getattr(signal, "SIGXFSZ", 0)}
    )
)
_getsignal: Callable[[int], Any]
try:  # the C function: signal.getsignal makes an enum of every answer, 10 times slower
    _getsignal = importlib.import_module("_signal").getsignal
except (ImportError, AttributeError):  # pragma: no cover - another Python
    _getsignal = signal.getsignal
_IGNORED = int(signal.SIG_IGN)
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


def _timed_out(name: str, timeout: float | None) -> str:
    """The message of a call that outlasted its timeout (an operation rewords it: ``_ops._run``)."""
    return f'plugin "{name}" timed out after {timeout or 0.0:.3g}s'


def _excerpt(data: bytes) -> str:
    text = data[:_EXCERPT].decode("utf-8", errors="replace")
    return text + f"... ({len(data)} bytes)" if len(data) > _EXCERPT else text


def _nonblocking(fd: int) -> None:
    # A fresh pipe end has no status flags, so one F_SETFL is enough.
    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class _Run:
    """One running plugin: pipes, pidfd, collected output, and the final decoding."""

    # Set by the driver: stop watching a descriptor (called before it is closed).
    unwatch: Callable[[int], None] = staticmethod(lambda fd: None)
    # Set by the driver: called once when the leader has exited and was reaped.
    on_exit: Callable[[], None] = staticmethod(lambda: None)

    def __init__(
        self, path: str, pid: int, pidfd: int, stdin: bytes, stdio: tuple[int | None, int, int]
    ) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.pid = pid
        self.status: int | None = None  # wait status once reaped
        self.pidfd: int | None = pidfd
        self.stdin_fd: int | None = stdio[0]
        self.stdout_fd: int | None = stdio[1]
        self.stderr_fd: int | None = stdio[2]
        self._stdin = memoryview(stdin)
        self._out: list[bytes] = []
        self._out_size = 0
        self.too_large = False  # stdout passed _STDOUT_MAX: the group was killed
        self._err = bytearray()
        self._err_dropped = 0
        self._logged = False
        self.poller: select.poll | None = None  # the synchronous driver's, once made
        self._write_stdin()

    # -- what the driver watches -------------------------------------------------

    def watched(self) -> list[tuple[int, bool]]:
        """The open descriptors as ``(fd, wants_write)``."""
        out = [(self.stdin_fd, True)] if self.stdin_fd is not None else []
        readers = (self.stdout_fd, self.stderr_fd, self.pidfd)
        out += [(fd, False) for fd in readers if fd is not None]
        return out

    @property
    def exited(self) -> bool:
        return self.status is not None

    def pipes(self) -> list[int]:
        """The output pipes still open."""
        return [fd for fd in (self.stdout_fd, self.stderr_fd) if fd is not None]

    def ready(self, fd: int, events: int = 0) -> None:
        """The driver saw ``fd`` ready (readable, writable, hung up or in error).

        ``events`` (``poll``'s or ``epoll``'s bits, when the driver has them)
        saves a read at the end of an output pipe: hung up and read to its end.
        """
        if fd == self.stdout_fd or fd == self.stderr_fd:
            self._read(fd, events)
        elif fd == self.pidfd:
            self._leader_exited()
        elif fd == self.stdin_fd:
            self._write_stdin()

    # -- I/O -----------------------------------------------------------------------

    def _close(self, fd: int | None) -> None:
        if fd is None:
            return
        if fd == self.stdin_fd:
            self.stdin_fd = None
        elif fd == self.stdout_fd:
            self.stdout_fd = None
        elif fd == self.stderr_fd:
            self.stderr_fd = None
        elif fd == self.pidfd:
            self.pidfd = None
        self.unwatch(fd)
        os.close(fd)  # ours, open, closed once: cannot fail

    def _write_stdin(self) -> None:
        fd = self.stdin_fd
        if fd is None:
            return
        try:
            while self._stdin:
                n = os.write(fd, self._stdin)
                self._stdin = self._stdin[n:]
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the plugin does not read (all of) its input
            pass
        self._stdin = memoryview(b"")
        self._close(fd)

    def _read(self, fd: int, events: int = 0) -> None:
        """Read ``fd`` once (the driver saw it readable, so this cannot block); close it at EOF.

        The read ends stay blocking: one read per readiness is enough (the pipe
        holds 64 KiB, the size of a read) and saves a system call per pipe.
        A pipe that hung up (no writer left) is at its end once a read returns
        less than asked, or at once when it has nothing to read: no read of
        the EOF then.
        """
        if events & _HUP and not events & select.POLLIN:
            self._close(fd)
            return
        try:
            data = os.read(fd, _CHUNK)
        except OSError:
            data = b""
        if not data:
            self._close(fd)
            return
        self._keep(fd, data)
        if events & _HUP and len(data) < _CHUNK and (fd == self.stdout_fd or fd == self.stderr_fd):
            self._close(fd)

    def _keep(self, fd: int, data: bytes) -> None:
        if fd == self.stdout_fd:
            self._out_size += len(data)
            if self._out_size > _STDOUT_MAX:
                # Flooding: stop reading and kill the group; memory stays bounded.
                self.too_large = True
                self._out.clear()
                self.kill(signal.SIGKILL)
                self._close(fd)
                return
            self._out.append(data)
            return
        self._err += data
        excess = len(self._err) - _STDERR_KEEP
        if excess > 0:
            del self._err[:excess]
            self._err_dropped += excess

    def _drain(self) -> None:
        """Read what the pipes hold now, without waiting for writers that are still alive.

        One ``poll`` without waiting says which pipes have data or hung up;
        bounded: a surviving child that keeps writing must not keep us here.
        """
        for _ in range(_DRAIN_READS):
            fds = self.pipes()
            if not fds:
                return
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            ready = poller.poll(0)
            if not ready:
                return
            for fd, events in ready:
                if fd == self.stdout_fd or fd == self.stderr_fd:
                    self._read(fd, events)

    # -- process group ---------------------------------------------------------------

    def kill(self, sig: int) -> None:
        """Send ``sig`` to the plugin's whole process group.

        Only while the leader is not reaped: its zombie keeps the group ID from
        being reused, so the signal cannot reach an unrelated group.
        """
        if self.status is not None:
            return
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return

    def _reap(self) -> None:
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped by someone else (SIGCHLD ignored...)
            status = _UNKNOWN_STATUS
        self.status = status

    def _leader_exited(self) -> None:
        """The leader is gone: keep what it wrote, kill what remains of its group, reap."""
        if self.status is not None:
            return
        if self.stdout_fd is not None or self.stderr_fd is not None:
            self._drain()
        self.kill(signal.SIGKILL)
        if self.stdout_fd is not None or self.stderr_fd is not None:
            self._drain()
        self._reap()
        self.close()
        self.on_exit()

    def close(self) -> None:
        """Release everything; a leader still running is killed with its group and reaped."""
        if self.status is None:
            self.kill(signal.SIGKILL)
            self._reap()
        for fd in (self.stdin_fd, self.stdout_fd, self.stderr_fd, self.pidfd):
            if fd is not None:
                self._close(fd)

    # -- outcome -----------------------------------------------------------------------

    @property
    def succeeded(self) -> bool:
        return self.status == 0

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
        return {
            "plugin": self.name,
            "exit_code": exit_code,
            "signal": sig,
            "stderr": self._stderr_tail(),
        }

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
        if self.succeeded:
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

    def timeout_error(self, timeout: float | None) -> PluginTimeoutError:
        self._log_stderr(logging.WARNING)
        return PluginTimeoutError(
            _timed_out(self.name, timeout),
            f"its process group was killed ({_status_text(self.status)})",
            **self._context(),
        )


def _signals_clean() -> bool:
    """Whether a child ``vfork``-ed from this thread starts with Go's signal state.

    It inherits the calling thread's signal mask and every ignored
    disposition (``restore_signals`` resets only SIGPIPE and SIGXFSZ, which
    Python ignores; handlers are reset by the exec). So: nothing blocked in
    this thread, nothing else ignored as the :mod:`signal` module knows it
    (dispositions set through it, and those the process inherited). About
    2 µs; reading the kernel's view from ``/proc`` costs 15 to 60 µs.
    """
    if signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        return False
    return _IGNORED not in map(_getsignal, _CHECKED_SIGNALS)


#: ``_posixsubprocess.fork_exec``'s arguments after ``restore_signals`` (new
#: process group, no uid/gid/umask change, no preexec_fn, vfork allowed), for
#: the Python versions whose signature is known; others go through ``Popen``.
_FORK_EXEC_TAIL: tuple[Any, ...] | None = {
    (3, 10): (
        True,
        None,
        None,
        None,
        -1,
        None,
    ),  # start_new_session, gid, gids, uid, umask, preexec
    (3, 11): (False, 0, None, None, None, -1, None, True),  # ..., process_group=0, ..., allow_vfork
    (3, 12): (False, 0, None, None, None, -1, None, True),
    (3, 13): (False, 0, None, None, None, -1, None, True),
}.get(sys.version_info[:2])
_fork_exec: Any = getattr(importlib.import_module("_posixsubprocess"), "fork_exec", None)
if _fork_exec is None:  # pragma: no cover - another Python
    _FORK_EXEC_TAIL = None


def _exec_failure(failure: bytes, path: str) -> OSError:
    """The ``OSError`` a vfork child reported on its exec-error pipe (``OSError:<hex errno>:...``)."""
    _, _, hex_errno = failure.partition(b":")
    try:
        code = int(hex_errno.partition(b":")[0], 16)
    except ValueError:
        code = errno.EIO
    return OSError(code or errno.EIO, os.strerror(code or errno.EIO), path)


def _spawn_popen(path: str, env: Mapping[str, str], stdin: int, stdout: int, stderr: int) -> int:
    """Start ``path`` through ``Popen`` (a Python whose ``fork_exec`` signature is unknown)."""
    # Not os.posix_spawn: both start the child in its own process group with
    # the pipes as its stdio and SIGPIPE/SIGXFSZ reset, but posix_spawn holds
    # the GIL until the child has exec'd, so threads starting plugins at once
    # queue behind each other (8 threads reached 1.25x the throughput of one,
    # against 1.86x this way).
    import subprocess  # here: only this fallback needs it (about 2 ms to import)

    child = subprocess.Popen(
        [path],
        executable=path,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=env,
        close_fds=True,
        restore_signals=True,  # Python ignores SIGPIPE and SIGXFSZ; exec keeps that
        **_NEW_GROUP,
    )
    # We wait for and reap the child ourselves (pidfd, waitpid); a Popen
    # that believes it already finished never waits for, or reaps, a pid.
    child.returncode = 0
    return child.pid


def _spawn_clean(path: str, env: Mapping[str, str], stdin: int, stdout: int, stderr: int) -> int:
    """Start ``path`` with an empty signal mask and every disposition at its default.

    For a calling thread that blocks signals, or a process that ignores some
    (a plugin must see the SIGTERM of a timeout). The
    vfork child would inherit both; ``posix_spawn`` resets them in the child,
    without ever unblocking anything in the runtime.
    """
    if min(stdin, stdout, stderr) < 3:
        # Our own stdio is closed and a pipe took its number: the child's
        # dup2 onto 0-2 would clobber it (subprocess's vfork path copes).
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in (stdin, stdout, stderr)]
        try:
            return _spawn_clean(path, env, *high)
        finally:
            _close_all(high)
    actions: list[tuple[int, ...]] = [
        (os.POSIX_SPAWN_DUP2, stdin, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    # No descriptor of the runtime but those three (subprocess's close_fds).
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2 and fd not in (stdin, stdout, stderr):
                with contextlib.suppress(OSError):
                    if os.get_inheritable(fd):
                        actions.append((os.POSIX_SPAWN_CLOSE, fd))
    return os.posix_spawn(
        path,
        [path],
        env,
        file_actions=actions,
        setpgroup=0,
        setsigmask=(),
        setsigdef=_DEFAULT_SIGNALS,
    )


class _Launch:
    """One start of a plugin, in three steps, so that the blocking one can run in another thread.

    ``__init__`` (the caller's thread): the three pipes, and the exec-error
    pipe of the vfork path. :meth:`spawn` (any thread): the start itself,
    which waits until the child has called ``exec``; the vfork path when that
    thread blocks no signal and nothing is ignored (:func:`_signals_clean`),
    else ``os.posix_spawn`` (:func:`_spawn_clean`). :meth:`finish` (the
    caller's thread): the outcome of the ``exec`` (``OSError`` when it
    failed: ETXTBSY, EACCES...), the child's ends closed, ``stdin`` written,
    the pidfd: the :class:`_Run`. :meth:`abort` undoes whatever was done.
    """

    __slots__ = ("env", "fds", "path", "pid", "vforked")

    def __init__(self, path: str, env: Mapping[str, str]) -> None:
        self.path = path
        self.env = env
        self.pid = -1
        self.vforked = False
        fds: list[int] = []
        try:
            for _ in range(4):  # stdin, stdout, stderr; the exec-error pipe (vfork path)
                fds += os.pipe2(os.O_CLOEXEC)
            if fds[7] < 3:  # our stdio is closed: the child's dup2 onto 0-2 must not hit it
                fds[7] = fcntl.fcntl(low := fds[7], fcntl.F_DUPFD_CLOEXEC, 3)
                os.close(low)
        except BaseException:
            _close_all(fds)
            raise
        self.fds = fds

    def spawn(self) -> None:
        """Start the child; return once it has called ``exec`` (or failed to).

        Touches nothing but this object: safe in a thread of its own.
        """
        in_r, _, _, out_w, _, err_w, fail_r, fail_w = self.fds
        env = self.env
        clean = _signals_clean()
        if clean and _FORK_EXEC_TAIL is not None:
            exe = os.fsencode(self.path)
            envb = env.encoded() if isinstance(env, Environment) else encode_env(env)
            self.vforked = True
            self.pid = _fork_exec(
                (exe,), (exe,), True, (fail_w,), None, envb,
                in_r, -1, -1, out_w, -1, err_w, fail_r, fail_w,
                True, *_FORK_EXEC_TAIL,
            )  # fmt: skip
        elif clean:
            self.pid = _spawn_popen(self.path, env, in_r, out_w, err_w)
        else:
            self.pid = _spawn_clean(self.path, env, in_r, out_w, err_w)

    def finish(self, stdin: bytes) -> _Run:
        """The started plugin as a :class:`_Run`; ``OSError`` if its ``exec`` failed.

        Either way nothing is left to :meth:`abort`.
        """
        fds = self.fds
        in_r, in_w, out_r, out_w, err_r, err_w, fail_r, fail_w = fds
        pid = self.pid
        try:
            if fail_w >= 0:  # (a starting thread closed it already)
                os.close(fail_w)
                fds[7] = -1
            # EOF: the exec closed the child's copy (close-on-exec).
            failure = os.read(fail_r, 50000) if self.vforked else b""
            os.close(fail_r)
            fds[6] = -1
            if failure:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                self.pid = -1
                raise _exec_failure(failure, self.path)
            os.close(in_r)
            fds[0] = -1
            os.close(out_w)
            fds[3] = -1
            os.close(err_w)
            fds[5] = -1
            if len(stdin) > select.PIPE_BUF:
                _nonblocking(in_w)  # written as the plugin reads it
            else:
                # At most PIPE_BUF bytes always fit in a fresh pipe: write them now.
                try:
                    if stdin:
                        os.write(in_w, stdin)
                except BrokenPipeError:  # the plugin exited already
                    pass
                os.close(in_w)
                fds[1] = -1
                stdin = b""
            pidfd = os.pidfd_open(pid)
        except BaseException:
            self.abort()
            raise
        return _Run(self.path, pid, pidfd, stdin, (in_w if stdin else None, out_r, err_r))

    def abort(self) -> None:
        """Close every descriptor left; a started child is killed with its group and reaped."""
        _close_all([fd for fd in self.fds if fd >= 0])
        self.fds = [-1] * 8
        if self.pid > 0:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = -1


def _start(path: str, env: Mapping[str, str], stdin: bytes) -> _Run:
    """Start the plugin once, in this thread; ``OSError`` from starting it (ETXTBSY, EACCES...) propagates.

    ``env`` as an :class:`Environment` is encoded once for all the plugins
    of an operation.
    """
    launch = _Launch(path, env)
    try:
        launch.spawn()
    except BaseException:
        launch.abort()
        raise
    return launch.finish(stdin)


class _Retry:
    """Whether and when to start again after starting the plugin failed (created at the first failure).

    Only "text file busy" (the binary is being written) is retried, with a
    fresh process each time and a growing back-off, for about 5 seconds and
    never past the call's deadline. :meth:`after` returns how long to sleep,
    or raises the error for a binary that cannot be started: ``PluginError``
    code 5 naming the path and the OS error (code 4 for a NUL in the path or
    the environment), or ``PluginTimeoutError``.
    """

    def __init__(self, path: str, deadline: float | None, timeout: float | None) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.deadline = deadline
        self.timeout = timeout
        self.busy_until = _deadline(_BUSY_BUDGET)
        self.delay = _BUSY_FIRST_DELAY

    def after(self, err: Exception) -> float:
        if not isinstance(err, OSError):  # ValueError: NUL in the environment or the path
            raise PluginError(
                f'cannot run plugin "{self.path}": invalid environment or path',
                str(err),
                code=CODE_INVALID_ENV,
                plugin=self.name,
            ) from err
        code = err.errno or 0
        desc = f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
        if code == errno.ETXTBSY:
            left, busy = _remaining(self.deadline), _remaining(self.busy_until)
            if left is not None and self.delay >= left:
                raise PluginTimeoutError(
                    _timed_out(self.name, self.timeout),
                    f"{self.path} stayed busy: {desc}",
                    plugin=self.name,
                ) from err
            if busy is not None and self.delay < busy:
                delay = self.delay
                self.delay = min(self.delay * 2, _BUSY_MAX_DELAY)
                return delay
            desc += f", for {_BUSY_BUDGET:g}s"
        raise PluginError(
            f'failed to execute plugin "{self.path}"', desc, code=CODE_IO, plugin=self.name
        ) from err


def _starting(
    path: str, env: Mapping[str, str], stdin: bytes, deadline: float | None, timeout: float | None
) -> Generator[float, None, _Run]:
    """Start the plugin, yielding how long to sleep before each retry (the one retry loop).

    Driven by the synchronous path (``time.sleep``); the asynchronous one is
    ``_loop._start`` (which starts off the event loop); :class:`_Retry` decides.
    """
    retry = None
    while True:
        try:
            return _start(path, env, stdin)
        except (OSError, ValueError) as e:
            retry = retry or _Retry(path, deadline, timeout)
            yield retry.after(e)


def _terminating(run: _Run, grace: float) -> Generator[float | None, bool, None]:
    """The one termination sequence: SIGTERM to the group, ``grace`` seconds, then SIGKILL.

    Yields the deadline of each wait for the leader to exit (``None``: as
    long as it takes) and is sent whether it did. Used on timeout,
    cancellation and ``KeyboardInterrupt`` alike, by both paths.
    """
    run.kill(signal.SIGTERM)
    if not (yield time.monotonic() + grace):
        run.kill(signal.SIGKILL)
        yield None


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _deadline(timeout: float | None) -> float | None:
    """The monotonic end of ``timeout`` seconds from now (``None``: no limit).

    The checks and the meaning of "no limit" are :mod:`libcni._deadline`'s
    (:func:`~libcni._deadline.check_timeout`, :data:`~libcni._deadline.NO_LIMIT`);
    the plugin runs keep the end as a bare number, which the event loop's
    timers and ``poll`` take as it is.
    """
    timeout = check_timeout(timeout)
    return None if timeout is None or timeout > NO_LIMIT else time.monotonic() + timeout


class RawExec:
    """The default :class:`~libcni.invoke.Exec`: runs plugin binaries as child processes.

    Each call starts the binary (``vfork`` and ``exec`` through
    :mod:`subprocess`, which releases the GIL meanwhile; no arguments,
    ``argv[0]`` is the path, ``env`` is the complete environment) as the
    leader of a new process group, feeds it ``stdin`` and collects standard output and
    standard error without ever blocking on one of them. When the leader
    exits, what remains of its process group is killed with SIGKILL, so
    neither a leftover child nor one holding the output pipes open survives or
    delays the call.

    On timeout (a deadline over the whole call) the group receives SIGTERM,
    then SIGKILL after ``grace`` seconds, and
    :class:`~libcni.errors.PluginTimeoutError` is raised. Standard error goes
    to the ``libcni.invoke`` logger, one record per line (DEBUG when the plugin
    succeeded, WARNING when it failed).
    """

    def __init__(self, grace: float = 1.0) -> None:
        self.grace = grace

    def __repr__(self) -> str:
        return f"RawExec(grace={self.grace!r})"

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        """See :func:`libcni.invoke.find_in_path`."""
        return find_in_path(plugin, paths)

    # -- synchronous ------------------------------------------------------------------

    def exec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        """Run the plugin at ``path``; return its standard output if it exits 0.

        A plugin that exits non-zero (or is killed by a signal) raises
        :class:`~libcni.errors.PluginError` with the code, message and details
        of the CNI error object it printed; one that printed nothing, or not a
        valid error object, raises ``PluginError`` code 999 saying so. Every
        such error carries ``plugin`` (the file name), ``exit_code`` or
        ``signal``, and the tail of ``stderr``. A binary that cannot be started
        (not executable, vanished, still busy being written after ~5 s of
        retries) raises ``PluginError`` code 5. ``timeout`` (seconds, ``None``:
        no limit) bounds the whole call: :class:`~libcni.errors.PluginTimeoutError`.
        """
        deadline = _deadline(timeout)
        starting = _starting(path, env, stdin, deadline, timeout)
        while True:
            try:
                time.sleep(next(starting))
            except StopIteration as started:
                run: _Run = started.value
                break
        try:
            try:
                exited = self._wait(run, deadline)
            except (
                KeyboardInterrupt,
                SystemExit,
            ):  # a signal handler raised: end it as a timeout does
                self._terminate(run)
                raise
            if not exited:
                self._terminate(run)
                raise run.timeout_error(timeout)
            return run.result()
        finally:
            run.close()

    def _terminate(self, run: _Run) -> None:
        steps = _terminating(run, self.grace)
        with contextlib.suppress(StopIteration):
            until = next(steps)
            while True:
                until = steps.send(self._wait(run, until))

    @staticmethod
    def _wait(run: _Run, deadline: float | None) -> bool:
        """Serve ``run`` until its leader exited (True) or ``deadline`` passed (False)."""
        poller = run.poller
        if poller is None:
            poller = run.poller = select.poll()
            run.unwatch = poller.unregister
            for fd, write in run.watched():
                poller.register(fd, select.POLLOUT if write else select.POLLIN)
        while not run.exited:
            left = _remaining(deadline)
            if left is not None and left <= 0:
                return False
            ms = -1 if left is None else max(1, int(min(left, _MAX_WAIT) * 1000 + 0.999))
            for fd, events in poller.poll(ms):
                run.ready(fd, events)
        return True

    # -- asynchronous -----------------------------------------------------------------

    async def aexec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        """:meth:`exec_plugin` as a coroutine, on the running event loop.

        Cancelling it terminates the plugin's process group (SIGTERM, then
        SIGKILL after ``grace`` seconds), reaps it, and re-raises
        :class:`asyncio.CancelledError`. How the runs of a loop share it:
        ``libcni.invoke._loop``.
        """
        from libcni.invoke._loop import aexec  # asyncio: not at ``import libcni``

        return await aexec(self, path, stdin, env, timeout)
