"""libcni.netns: real network namespaces, created, pinned, entered and removed.

Run as root (they skip without it, and fail under ``LIBCNI_REQUIRE_NETNS=1``).
The namespaces are pinned in a temporary directory, never in the machine's
``/run/netns`` (one test uses it, to check ``ip -n``); the machine's own
network namespace is never entered. After every test the calling thread is
still in the namespace it started in (:func:`_thread_stays_home`), and every
mount the test made is gone.

Failures are provoked for real where the system can produce them: a
read-only directory, a name taken, a process that has exited, a user that is
not root, a user namespace allowed no network namespace
(``user.max_net_namespaces=0``). A fault injected into one system call covers
the one step no real condition reaches on demand (the bind mount failing or
interrupted after the file was made).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import harness
import pytest
from _require import unavailable

from libcni import NamespaceError, _nspath, netns
from libcni.netns import NetNS

SELF_NS = "/proc/thread-self/ns/net"


thread_ns = harness.thread_netns
mounts_under = harness.mounts_under
unmount_all = harness.unmount_under


def mount_line(path: Path | str) -> str | None:
    """The /proc/self/mountinfo line of the mount at ``path`` (the top one), if any."""
    root = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4] == root:
                found = line
    return found


def nsenter_readlink(path: str) -> str:
    """What a process started in the namespace at ``path`` (by nsenter) sees as its netns."""
    proc = subprocess.run(
        ["nsenter", f"--net={path}", "readlink", "/proc/self/ns/net"],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def root_ok() -> None:
    if os.geteuid() != 0:
        unavailable(f"network namespaces need root (running as uid {os.geteuid()})")
    if not os.path.exists(SELF_NS):
        unavailable(f"{SELF_NS} is missing (Linux >= 3.17 with /proc mounted)")
    for tool in ("nsenter", "ip", "unshare"):
        if shutil.which(tool, path=harness.SBIN_PATH) is None:
            unavailable(f"the {tool} command is missing")


@pytest.fixture
def d(tmp_path: Path, root_ok: None) -> Iterator[Path]:
    """A directory for the test's namespaces (made by the code under test); unmounted after."""
    try:
        yield tmp_path / "netns"
    finally:
        unmount_all(tmp_path)


@pytest.fixture(autouse=True)
def _thread_stays_home() -> Iterator[None]:
    """Whatever a test does, the calling thread ends in the namespace it started in."""
    before = thread_ns()
    yield
    assert thread_ns() == before, "the test's thread was left in another network namespace"


# -- create, remove ------------------------------------------------------------------


def test_create_pins_a_new_namespace_and_remove_leaves_nothing(d: Path) -> None:
    home = thread_ns()
    ns = netns.create("a", dir=d)
    try:
        assert ns.path == str(d / "a") and ns.name == "a"
        ino = os.stat(ns.path).st_ino
        assert ino != home
        # A process started in the pinned file is in that very namespace.
        assert nsenter_readlink(ns.path) == f"net:[{ino}]"
        # Pinned by a bind mount of nsfs, in a directory made a shared mount point.
        line = mount_line(ns.path)
        assert line is not None and f"net:[{ino}]" in line and " - nsfs " in line
        dir_line = mount_line(d)
        assert dir_line is not None and "shared:" in dir_line.split(" - ")[0]
        assert not ns.closed()
        assert thread_ns() == home
    finally:
        ns.remove()
    assert ns.closed()
    assert not (d / "a").exists()
    assert mounts_under(d) == [str(d)]  # the directory stays a mount point, as /run/netns
    ns.remove()  # idempotent
    assert "removed" in repr(ns)


def test_create_without_a_name_and_nested_directory(d: Path) -> None:
    nested = d / "x" / "y"
    one, two = netns.create(dir=nested), netns.create(dir=nested)
    try:
        for ns in (one, two):
            assert re.fullmatch(r"cni-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", ns.name)
            assert Path(ns.path).parent == nested
        assert one.name != two.name
        assert os.stat(one.path).st_ino != os.stat(two.path).st_ino
        assert (nested.stat().st_mode & 0o777) == 0o755
    finally:
        one.remove()
        two.remove()
    assert sorted(os.listdir(nested)) == []


def test_a_namespace_used_as_context_manager_is_removed(d: Path) -> None:
    with netns.create("cm", dir=d) as ns:
        assert not ns.closed()
    assert ns.closed() and not (d / "cm").exists()
    assert mounts_under(d) == [str(d)]


def test_create_from_many_threads_at_once(d: Path) -> None:
    made: list[NetNS] = []
    homes: list[bool] = []
    lock = threading.Lock()

    def work() -> None:
        home = thread_ns()
        for _ in range(4):
            ns = netns.create(dir=d)
            with lock:
                made.append(ns)
        with lock:
            homes.append(thread_ns() == home)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert homes == [True] * 6
        assert len({os.stat(ns.path).st_ino for ns in made}) == 24
    finally:
        for ns in made:
            ns.remove()
    assert os.listdir(d) == []
    assert mounts_under(d) == [str(d)]


def test_a_taken_name_is_refused_and_never_clobbered(d: Path) -> None:
    ns = netns.create("taken", dir=d)
    try:
        ino = os.stat(ns.path).st_ino
        with pytest.raises(NamespaceError, match="name is taken") as info:
            netns.create("taken", dir=d)
        assert str(d / "taken") in str(info.value)
        assert info.value.code == 8
        assert os.stat(ns.path).st_ino == ino and not ns.closed()
        (d / "file").write_text("keep me")
        with pytest.raises(NamespaceError, match="name is taken"):
            netns.create("file", dir=d)
        assert (d / "file").read_text() == "keep me"
        assert mounts_under(d) == [str(d), ns.path]
    finally:
        ns.remove()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\0b", "x" * 256, "\ud800"])
def test_bad_names_are_refused_before_anything(tmp_path: Path, name: str) -> None:
    with pytest.raises(NamespaceError, match="invalid network namespace name"):
        netns.create(name, dir=tmp_path / "never")
    with pytest.raises(NamespaceError, match="invalid network namespace name"):
        netns.from_pid(os.getpid(), name, dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_nul_in_a_path_is_a_namespace_error(tmp_path: Path) -> None:
    # behaviour.md §14: a NUL in a path is a NamespaceError, not os's ValueError.
    bad = f"{tmp_path}/never\0x"
    with pytest.raises(NamespaceError, match="NUL"):
        netns.create("n", dir=bad)
    with pytest.raises(NamespaceError, match="NUL"):
        netns.from_pid(os.getpid(), "n", dir=bad)
    with pytest.raises(NamespaceError, match="NUL"):
        NetNS(f"{bad}/n")
    assert os.listdir(tmp_path) == []


def test_argument_types_are_checked(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="name must be a str"):
        netns.create(5, dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pid must be an int"):
        netns.from_pid("1", dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pid must be an int"):
        netns.from_pid(True, dir=tmp_path)
    with pytest.raises(ValueError, match="pid must be positive"):
        netns.from_pid(0, dir=tmp_path)
    assert os.listdir(tmp_path) == []


# -- enter ---------------------------------------------------------------------------


def test_enter_moves_the_calling_thread_only_and_back(d: Path) -> None:
    home = thread_ns()
    seen_by_other: list[int] = []
    go, done = threading.Event(), threading.Event()

    def other() -> None:
        go.wait()
        seen_by_other.append(thread_ns())
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with netns.create("e", dir=d) as ns:
        ino = os.stat(ns.path).st_ino
        with ns.enter():
            assert thread_ns() == ino
            go.set()
            done.wait(10)
            # A process started here starts in the namespace: only lo, down.
            child = subprocess.run(
                ["sh", "-c", "readlink /proc/self/ns/net; ip -o link show"],
                capture_output=True,
                text=True,
                check=True,
            )
            lines = child.stdout.splitlines()
            assert lines[0] == f"net:[{ino}]"
            assert len(lines) == 2 and lines[1].split()[1] == "lo:", lines
        assert thread_ns() == home
    t.join()
    assert seen_by_other == [home]


def test_enter_returns_when_the_block_raises(d: Path) -> None:
    home = thread_ns()
    with netns.create(dir=d) as ns:
        with pytest.raises(RuntimeError, match="inside"), ns.enter():
            assert thread_ns() != home
            raise RuntimeError("inside")
        assert thread_ns() == home
        # Nested: back to the outer one, then home.
        with netns.create(dir=d) as inner, ns.enter():
            outer = thread_ns()
            with inner.enter():
                assert thread_ns() == os.stat(inner.path).st_ino
            assert thread_ns() == outer
    assert thread_ns() == home


def test_enter_refuses_a_removed_namespace(d: Path) -> None:
    ns = netns.create("gone", dir=d)
    stale = NetNS(ns.path)  # another handle on it
    ns.remove()
    with pytest.raises(NamespaceError, match="was removed"), ns.enter():
        pytest.fail("entered a removed namespace")
    # The stale handle's path now pins another namespace: not entered either.
    with netns.create("gone", dir=d):
        assert stale.closed()
        with pytest.raises(NamespaceError, match="no longer pinned"), stale.enter():
            pytest.fail("entered another namespace")


# -- from_pid ------------------------------------------------------------------------


def test_from_pid_pins_the_namespace_of_a_process_that_then_exits(d: Path) -> None:
    proc = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        # unshare runs, then execs sleep in its new namespace: wait for the exec.
        for _ in range(500):
            if os.readlink(f"/proc/{proc.pid}/exe").endswith("sleep"):
                break
            time.sleep(0.01)
        ino = os.stat(f"/proc/{proc.pid}/ns/net").st_ino
        assert ino != thread_ns()
        ns = netns.from_pid(proc.pid, "p", dir=d)
    finally:
        proc.kill()
        proc.wait()
    try:
        assert os.stat(ns.path).st_ino == ino  # it outlives the process
        assert nsenter_readlink(ns.path) == f"net:[{ino}]"
        assert not ns.closed()
    finally:
        ns.remove()
    assert os.listdir(d) == [] and mounts_under(d) == [str(d)]
    # Our own namespace too (a process's, by pid).
    with netns.from_pid(os.getpid(), dir=d) as me:
        assert os.stat(me.path).st_ino == os.stat(f"/proc/{os.getpid()}/ns/net").st_ino


def test_from_pid_of_no_process_leaves_nothing(d: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(NamespaceError, match=f"process {proc.pid}: no such process"):
        netns.from_pid(proc.pid, "x", dir=d)
    assert not d.exists()
    assert mounts_under(d) == []
    # A name taken (not an empty file: that is a stale pin, reused): the descriptor is
    # closed, nothing mounted, the file kept.
    d.mkdir()
    (d / "x").write_text("data")
    with pytest.raises(NamespaceError, match="name is taken"):
        netns.from_pid(os.getpid(), "x", dir=d)
    assert mounts_under(d) == []  # the mount point made for it is undone too
    assert (d / "x").read_text() == "data"


# -- NetNS(path), remove -----------------------------------------------------------------


def test_netns_opens_a_pinned_namespace_and_refuses_anything_else(d: Path) -> None:
    with netns.create("n", dir=d) as ns:
        same = NetNS(ns.path)
        assert not same.closed()
        same.remove()
        assert ns.closed() and same.closed()
        ns.remove()
    (d / "plain").write_text("")
    with pytest.raises(NamespaceError, match="not a network namespace"):
        NetNS(d / "plain")
    with pytest.raises(NamespaceError, match=r"cannot open network namespace .*No such file"):
        NetNS(d / "missing")
    with pytest.raises(NamespaceError, match="not a network namespace"):
        NetNS("/proc/self/ns/mnt")


def test_remove_leaves_another_namespace_at_the_same_path_alone(d: Path) -> None:
    first = netns.create("same", dir=d)
    NetNS(first.path).remove()  # removed by someone else
    second = netns.create("same", dir=d)
    try:
        assert first.closed() and not second.closed()
        first.remove()  # not its namespace any more: left alone
        assert not second.closed()
        assert mount_line(second.path) is not None
    finally:
        second.remove()
    # A file that is not an empty file made by create is not deleted either.
    third = netns.create("third", dir=d)
    subprocess.run(["umount", "-l", third.path], check=True)
    Path(third.path).write_text("someone's data")
    third.remove()
    assert Path(third.path).read_text() == "someone's data"


def test_remove_deletes_only_its_own_pin_after_the_pin_went(d: Path) -> None:
    # The pin went (unmounted by someone) and someone else put an empty file at the path
    # (as `ip netns add` of that name does before its mount): not removed.
    ns = netns.create("gone", dir=d)
    subprocess.run(["umount", "-l", ns.path], check=True)
    os.unlink(ns.path)
    Path(ns.path).write_text("")
    other = os.stat(ns.path).st_ino
    ns.remove()
    assert os.stat(ns.path).st_ino == other
    os.unlink(ns.path)
    # The pin went, and the empty file it left is still there: that one is removed.
    ns = netns.create("left", dir=d)
    subprocess.run(["umount", "-l", ns.path], check=True)
    ns.remove()
    assert not os.path.lexists(ns.path)
    # NetNS(path) of a pin: its mount and the empty file under it go.
    ns = netns.create("opened", dir=d)
    NetNS(ns.path).remove()
    assert not os.path.lexists(ns.path) and mounts_under(d) == [str(d)]


def test_create_reuses_a_stale_pin(d: Path) -> None:
    ns = netns.create("stale", dir=d)
    subprocess.run(["umount", "-l", ns.path], check=True)  # the mount was lost
    assert os.path.getsize(ns.path) == 0
    again = netns.create("stale", dir=d)
    try:
        assert not again.closed() and NetNS(again.path).path == again.path
        assert nsenter_readlink(again.path).startswith("net:[")
    finally:
        again.remove()
    assert not os.path.lexists(again.path) and mounts_under(d) == [str(d)]


def _returns_within(seconds: float, fn: object, unblock: str) -> BaseException | None:
    """Run ``fn()`` in a thread; fail the test if it is still running after ``seconds``
    (then open the FIFO ``unblock`` for writing, which frees an open() blocked on it)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()  # type: ignore[operator]
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        fd = os.open(unblock, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        pytest.fail(f"{fn} blocked on {unblock}")
    return outcome[0]


def test_paths_that_are_not_a_namespace_are_refused_at_once(tmp_path: Path, root_ok: None) -> None:
    import socket

    from libcni.netns import _loopback_up

    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    kinds = {
        fifo: "a FIFO",
        str(tmp_path / "sock"): "a socket",
        "/dev/null": "a character device",
        str(tmp_path): "a directory",
    }
    try:
        for path, kind in kinds.items():
            for call in (lambda p=path: NetNS(p), lambda p=path: _loopback_up(p)):
                error = _returns_within(5, call, fifo)
                assert isinstance(error, NamespaceError), (path, error)
                assert f"{path} is not a network namespace: it is {kind}" in str(error)
                assert error.code == 8
    finally:
        sock.close()


# -- failures half-way ---------------------------------------------------------------------


def test_a_read_only_directory_fails_with_nothing_left(tmp_path: Path, root_ok: None) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        before = mounts_under(tmp_path)
        # The directory cannot be made.
        with pytest.raises(NamespaceError, match=r"cannot make .*ro/netns.*Read-only"):
            netns.create(dir=ro / "netns")
        # It exists but the file cannot be made: after the namespace was (it is freed).
        with pytest.raises(NamespaceError, match="cannot create the file: Read-only"):
            netns.create("n", dir=ro)
        assert mounts_under(tmp_path) == before
        assert os.listdir(ro) == []
    finally:
        unmount_all(tmp_path)


def test_a_failed_bind_mount_removes_the_file(d: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _nspath._mount

    def failing(source: str, target: str, flags: int) -> None:
        if source.startswith("/proc/self/fd/"):
            raise OSError(errno.EPERM, "Operation not permitted")
        real(source, target, flags)

    monkeypatch.setattr(netns, "_mount", failing)
    with pytest.raises(NamespaceError, match="bind mount failed: Operation not permitted"):
        netns.create("f", dir=d)
    assert not d.exists() and mounts_under(d) == []  # the new directory undone too


def test_an_interrupt_after_the_bind_mount_undoes_it(
    d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _nspath._mount

    def interrupted(source: str, target: str, flags: int) -> None:
        real(source, target, flags)
        if source.startswith("/proc/self/fd/"):
            assert mount_line(target) is not None
            raise KeyboardInterrupt

    d.mkdir()
    monkeypatch.setattr(netns, "_mount", interrupted)
    with pytest.raises(KeyboardInterrupt):
        netns.create("k", dir=d)
    assert os.listdir(d) == []
    assert mounts_under(d) == []  # d existed, but its mount point was made for this


def _python(prefix: list[str]) -> str | None:
    """A Python >= 3.10 that runs under ``prefix`` (in a user namespace, files of unmapped
    owners are read as "others": this interpreter may be out of reach there)."""
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(
            [*prefix, python, "-c", "import sys; assert sys.version_info >= (3, 10)"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return python
    return None


def _run_python(
    code: str, prefix: list[str], extra_path: str = "", python: str = sys.executable
) -> dict[str, object]:
    env = harness.python_env()
    if extra_path:
        env["PYTHONPATH"] += os.pathsep + extra_path
    proc = subprocess.run(
        [*prefix, python, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


_CHILD = """
    import json, os, sys
    from libcni import NamespaceError, netns

    where = {where!r}

    def mounts():
        with open("/proc/self/mountinfo") as f:
            return [l.split()[4] for l in f if l.split()[4].startswith({base!r})]

    own = os.stat("/proc/thread-self/ns/net").st_ino
    out = {{"before": mounts()}}
    try:
        ns = netns.create(dir=where)
        out["created"] = os.path.exists(ns.path)
        netns._loopback_up(ns.path)
        ns.remove()
        out["removed"] = not os.path.exists(ns.path)
    except NamespaceError as e:
        out["error"] = str(e)
    out["exists"] = os.path.exists(where)
    out["after"] = mounts()
    out["home"] = os.stat("/proc/thread-self/ns/net").st_ino == own
    print(json.dumps(out))
"""


def test_no_namespace_allowed_fails_half_way_with_nothing_left(
    tmp_path: Path, root_ok: None
) -> None:
    # In a user namespace allowed no network namespace, the directory is made and
    # made a mount point, then unshare fails (ENOSPC): both are undone.
    where = tmp_path / "limit" / "netns"
    code = _CHILD.format(where=str(where), base=str(tmp_path))
    script = 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"'
    prefix = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user namespace here: {probe.stderr.strip()}")
    out = _run_python(code, prefix)
    assert "No space left on device" in str(out["error"]), out
    assert out["before"] == [] and out["after"] == [], out
    assert out["exists"] is False and out["home"] is True, out


@pytest.fixture
def open_dir(root_ok: None) -> Iterator[Path]:
    """A directory any user may write to (pytest's tmp_path is root's only)."""
    where = Path(tempfile.mkdtemp(prefix="libcni-test-netns-"))
    try:
        os.chmod(where, 0o1777)
        yield where
    finally:
        unmount_all(where)
        shutil.rmtree(where, ignore_errors=True)


def test_not_root_is_told_so_and_rootless_works_in_a_user_namespace(open_dir: Path) -> None:
    prefix = harness.as_nobody()
    if prefix is None:
        pytest.skip("setpriv is missing: cannot drop privileges")
    base = tmp_path = open_dir
    code = _CHILD.format(where=str(base / "netns"), base=str(tmp_path))
    with harness.readable_deps() as deps:
        out = _run_python(code, prefix, deps)
        assert "not root" in str(out["error"]), out
        assert "cannot make" in str(out["error"]) and "shared mount point" in str(out["error"])
        assert out["exists"] is False and out["after"] == [] and out["home"] is True, out
        # Rootless: nobody in user and mount namespaces of its own creates, brings lo up
        # and removes namespaces in a directory it may write to.
        userns = [*prefix, "unshare", "--user", "--map-root-user", "--mount"]
        probe = subprocess.run([*userns, "true"], capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            pytest.skip(f"no unprivileged user namespace here: {probe.stderr.strip()}")
        python = _python(userns)
        if python is None:
            pytest.skip("no Python >= 3.10 that nobody may run in a user namespace")
        out = _run_python(code, userns, deps, python)
        assert "error" not in out, out
        assert out["created"] is True and out["removed"] is True and out["home"] is True, out
    assert os.listdir(base / "netns") == [] and mounts_under(tmp_path) == []


# -- /run/netns and ip ------------------------------------------------------------------


def test_default_directory_works_with_ip_netns(root_ok: None) -> None:
    ns = netns.create(f"libcni-test-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        assert ns.path == f"/run/netns/{ns.name}"
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert ns.name in listed.split()
        netns._loopback_up(ns.path)
        link = json.loads(
            subprocess.run(
                ["ip", "-j", "-n", ns.name, "link", "show", "lo"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )[0]
        assert "UP" in link["flags"]
    finally:
        ns.remove()
    assert not os.path.exists(ns.path)


def test_the_caller_stays_home_even_when_the_helper_cannot_return(
    d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The helper thread that makes a namespace cannot go back (setns fails): it
    # ends in the new namespace, which changes nothing for the caller.
    def no_setns(fd: int) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    home = thread_ns()
    monkeypatch.setattr(netns, "_setns", no_setns)
    monkeypatch.setattr(_nspath, "_setns", no_setns)
    with netns.create("h", dir=d) as ns:
        assert thread_ns() == home
        assert os.stat(ns.path).st_ino != home
        with pytest.raises(NamespaceError, match="cannot enter network namespace"), ns.enter():
            pytest.fail("entered")
    assert thread_ns() == home


def test_a_relative_directory_gives_an_absolute_path(
    d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(d.parent)
    with netns.create("r", dir="netns") as ns:
        assert ns.path == str(d / "r")
        monkeypatch.chdir("/")
        assert not ns.closed()  # the path still names it from elsewhere
