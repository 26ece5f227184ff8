"""libcni.invoke: finding plugins and running them (behaviour.md §6), with real processes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import libcni
from libcni.errors import ConfigError, PluginError, PluginNotFoundError, PluginTimeoutError
from libcni.invoke import AsyncExec, Exec, RawExec, find_in_path

# The plugins start with "#!/usr/bin/env python3": keep PATH short so that no
# slow wrapper (pyenv shims...) is found first.
BASE_ENV = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": "ADD", "CNI_IFNAME": "eth0"}


# -- helpers -------------------------------------------------------------------------


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state, pgrp) of a process, None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[2])


def _live_in_group(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_state(int(name))
            if st is not None and st[1] == pgid and st[0] not in "ZX":
                out.append(int(name))
    return out


def assert_dead(*pids: int, wait: float = 2.0) -> None:
    """Every pid and every process of its group is gone (or a zombie: dead, unreaped by init)."""
    end = time.monotonic() + wait
    while True:
        alive = [p for p in pids if (st := _proc_state(p)) is not None and st[0] not in "ZX"]
        alive += [q for p in pids for q in _live_in_group(p)]
        if not alive:
            return
        assert time.monotonic() < end, f"still alive: {sorted(set(alive))}"
        time.sleep(0.01)


def _children() -> list[int]:
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == me:
                out.append(int(name))
    return out


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """No test leaves a child process (zombie or not) or an open descriptor behind."""
    fds = set(os.listdir("/proc/self/fd"))
    yield
    assert _children() == []
    leaked = set(os.listdir("/proc/self/fd")) - fds
    assert not leaked, {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in leaked}


@pytest.fixture
def testplugin(testplugin_dir: str) -> str:
    return os.path.join(testplugin_dir, "testplugin")


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "record.jsonl"


def request(behaviour: dict[str, Any] | None = None, **extra: Any) -> bytes:
    req: dict[str, Any] = {"cniVersion": "1.0.0", "name": "net", "type": "testplugin"}
    if behaviour is not None:
        req["test"] = {"*": behaviour}
    req.update(extra)
    return json.dumps(req).encode()


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_plugin(path: Path, text: str, mode: int = 0o755) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def run(path: str, stdin: bytes = b"{}", timeout: float | None = 10, **env: str) -> bytes:
    return RawExec().exec_plugin(path, stdin, {**BASE_ENV, **env}, timeout)


def failure(path: str, stdin: bytes = b"{}", **env: str) -> PluginError:
    with pytest.raises(PluginError) as info:
        run(path, stdin, timeout=10, **env)
    return info.value


# -- find_in_path ----------------------------------------------------------------------


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_plugin(path, "#!/bin/sh\n")
    return path


def test_find_first_directory_wins(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _exe(a / "p")
    _exe(b / "p")
    _exe(b / "q")
    assert find_in_path("p", [str(a), str(b)]) == str(a / "p")
    assert find_in_path("p", [str(b), str(a)]) == str(b / "p")
    assert find_in_path("q", [str(tmp_path / "missing"), str(a), str(b)]) == str(b / "q")


def test_find_follows_symlinks_and_returns_the_link(tmp_path: Path) -> None:
    target = _exe(tmp_path / "real" / "bin")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "p").symlink_to(target)
    assert find_in_path("p", [str(tmp_path / "d")]) == str(tmp_path / "d" / "p")


def test_find_skips_directories_and_dangling_symlinks(tmp_path: Path) -> None:
    (tmp_path / "a" / "p").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "p").symlink_to(tmp_path / "nowhere")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "p").symlink_to(tmp_path / "a" / "p")  # link to a directory
    _exe(tmp_path / "d" / "p")
    dirs = [str(tmp_path / x) for x in "abcd"]
    assert find_in_path("p", dirs) == str(tmp_path / "d" / "p")
    with pytest.raises(PluginNotFoundError):
        find_in_path("p", dirs[:3])


def test_find_exact_name_only(tmp_path: Path) -> None:
    _exe(tmp_path / "bridge.sh")
    _exe(tmp_path / "Bridge")
    with pytest.raises(PluginNotFoundError):
        find_in_path("bridge", [str(tmp_path)])


@pytest.mark.parametrize("name", ["a/b", "/bin/sh", "../sh", "sh/", ".", "..", "a\0b"])
def test_find_refuses_invalid_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        find_in_path(name, [str(tmp_path), "/bin"])
    assert info.value.msg == "invalid plugin name"
    assert info.value.details == name


def test_find_refuses_empty_name_and_no_paths() -> None:
    with pytest.raises(ConfigError, match="empty"):
        find_in_path("", ["/bin"])
    with pytest.raises(ConfigError, match="no plugin directories"):
        find_in_path("sh", [])


def test_find_not_found_names_plugin_and_every_directory(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "x"), str(tmp_path / "y")]
    with pytest.raises(PluginNotFoundError) as info:
        find_in_path("nope", dirs)
    err = info.value
    assert err.plugin == "nope"
    assert err.paths == dirs
    assert "nope" in str(err) and all(d in str(err) for d in dirs)


def test_rawexec_find_in_path_delegates(testplugin_dir: str) -> None:
    exec_: Exec = RawExec()
    assert exec_.find_in_path("testplugin", [testplugin_dir]) == os.path.join(
        testplugin_dir, "testplugin"
    )


# -- success -----------------------------------------------------------------------------


def test_success_returns_stdout_and_records_the_call(testplugin: str, record: Path) -> None:
    out = run(testplugin, request(record=str(record)), CNI_CONTAINERID="c1")
    assert json.loads(out) == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0"}],
        "ips": [{"address": "10.1.2.3/24", "interface": 0}],
    }
    (rec,) = records(record)
    assert rec["command"] == "ADD"
    assert rec["env"] == {"CNI_COMMAND": "ADD", "CNI_IFNAME": "eth0", "CNI_CONTAINERID": "c1"}
    assert rec["stdin"]["record"] == str(record)


def test_argv_env_and_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIBCNI_TEST_PARENT_ONLY", "1")
    plugin = write_plugin(
        tmp_path / "show",
        f"#!{sys.executable} -S\n"
        "import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv, 'env': dict(os.environ),\n"
        "                  'pgrp': os.getpgrp(), 'pid': os.getpid()}))\n",
    )
    got = json.loads(RawExec().exec_plugin(plugin, b"", {"FOO": "bar"}, 10))
    assert got["argv"] == [plugin]
    assert got["env"].get("FOO") == "bar"
    assert "LIBCNI_TEST_PARENT_ONLY" not in got["env"]
    assert got["pgrp"] == got["pid"]


#: Its signal state (grep's, inherited; the shell's own varies while it forks), then what it
#: holds (the shell becomes Python: the same process).
_STATE_REPORTER = """#!/bin/sh
cat >/dev/null
grep -E '^Sig(Blk|Ign):' /proc/self/status
exec {python} -S -c '
import os
print(os.getpgrp(), os.getpid())
for fd in os.listdir("/proc/self/fd"):
    try:
        print(fd, os.readlink(f"/proc/self/fd/{{fd}}"))
    except OSError:  # the descriptor of the listing, closed by now
        pass
'
"""


def _sigs(line: str) -> set[int]:
    mask = int(line.split()[1], 16)
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


@pytest.mark.parametrize("how", ["alone", "in flight", "async"])
def test_both_ways_to_start_give_the_plugin_the_same_state(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A start alone takes os.posix_spawn; one while another plugin of the process runs, and
    # every start of the async driver, take subprocess (its vfork releases the GIL). Either
    # way the plugin leads its own process group, with an empty signal mask, no signal
    # ignored and no descriptor of the runtime but 0 to 2 (behaviour §6.3).
    spawns: list[str] = []
    real_spawn = os.posix_spawn

    def spy(path: str, *args: Any, **kwargs: Any) -> int:
        spawns.append(os.path.basename(path))
        return real_spawn(path, *args, **kwargs)

    monkeypatch.setattr(os, "posix_spawn", spy)
    reporter = write_plugin(tmp_path / "report", _STATE_REPORTER.format(python=sys.executable))
    started = tmp_path / "started"
    slow = write_plugin(tmp_path / "slow", f"#!/bin/sh\ntouch {started}\nsleep 2\n")
    marker = tmp_path / "inheritable"
    marker.touch()
    leak = os.open(marker, os.O_RDONLY)
    os.set_inheritable(leak, True)
    other = threading.Thread(target=run, args=(slow,))
    try:
        if how == "in flight":
            other.start()
            while not started.exists():
                time.sleep(0.01)
        if how == "async":
            out = asyncio.run(RawExec().aexec_plugin(reporter, b"{}", BASE_ENV, 10))
        else:
            out = run(reporter)
    finally:
        os.close(leak)
        if other.is_alive():
            other.join()
    blocked, ignored, ids, *fds = out.decode().splitlines()
    pgid, pid = ids.split()
    assert pgid == pid
    assert _sigs(blocked) == set()
    # glibc's posix_spawn leaves its internal signals 32 and 33 ignored (handled by programs).
    assert _sigs(ignored) - {32, 33} == set()
    held = {int(n): target for n, _, target in (fd.partition(" ") for fd in fds)}
    assert sorted(held) == [0, 1, 2] and str(marker) not in held.values(), held
    assert spawns.count("report") == (1 if how == "alone" else 0), spawns


def test_a_start_alone_in_a_process_with_many_descriptors_takes_subprocess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before Python 3.13 posix_spawn is told each inheritable descriptor to close, which
    # means listing them all: with many open, subprocess closes them in the child instead.
    from libcni.invoke import _raw

    spawns: list[str] = []
    real_spawn = os.posix_spawn

    def spy(path: str, *args: Any, **kwargs: Any) -> int:
        spawns.append(path)
        return real_spawn(path, *args, **kwargs)

    monkeypatch.setattr(os, "posix_spawn", spy)
    plugin = write_plugin(tmp_path / "p", "#!/bin/sh\necho '{}'\n")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(_raw._MANY_FDS)]
    try:
        assert run(plugin) == b"{}\n"
    finally:
        for fd in held:
            os.close(fd)
    assert spawns == ([plugin] if _raw._CLOSEFROM is not None else [])
    assert run(plugin) == b"{}\n" and spawns[-1:] == [plugin]  # few open again: posix_spawn


def test_a_forked_child_does_not_count_its_parents_plugins_as_in_flight(tmp_path: Path) -> None:
    # The child's first start is alone (posix_spawn), whatever its parent was running.
    from libcni.invoke import _raw

    started = tmp_path / "started"
    slow = write_plugin(tmp_path / "slow", f"#!/bin/sh\ntouch {started}\nsleep 1\n")
    other = threading.Thread(target=run, args=(slow,))
    other.start()
    try:
        while not started.exists():
            time.sleep(0.01)
        assert _raw._LIVE
        pid = os.fork()
        if pid == 0:  # the child: only os._exit, whatever happens
            os._exit(0 if not _raw._LIVE else 1)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        other.join()
    assert not _raw._LIVE


def test_sigpipe_is_default_in_the_plugin(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path / "sig", "#!/bin/sh\ngrep SigIgn /proc/self/status\n")
    ignored = int(run(plugin).split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))


def test_empty_stdin_and_plugin_that_reads_none(tmp_path: Path) -> None:
    cat = write_plugin(tmp_path / "cat", "#!/bin/sh\nexec cat\n")
    assert run(cat, b"") == b""
    deaf = write_plugin(tmp_path / "deaf", "#!/bin/sh\necho ok\n")
    assert run(deaf, b"x" * (8 << 20)) == b"ok\n"


def test_large_stdin_and_stdout_at_once(tmp_path: Path) -> None:
    cat = write_plugin(tmp_path / "cat", "#!/bin/sh\nexec cat\n")
    data = os.urandom(8 << 20)
    assert run(cat, data) == data


def test_4mib_on_stdout_and_stderr_at_once(testplugin: str) -> None:
    n = 4 << 20
    out = run(testplugin, request({"stdoutBytes": n, "stderrBytes": n}))
    assert out == (b"o" * 63 + b"\n") * (n // 64)


def test_stderr_goes_to_the_logger_not_the_terminal(
    testplugin: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="libcni.invoke")
    run(testplugin, request({"stderr": "first\nsecond\n", "result": {}}))
    lines = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("libcni.invoke", logging.DEBUG, "testplugin: first"),
        ("libcni.invoke", logging.DEBUG, "testplugin: second"),
    ]
    caplog.clear()
    with pytest.raises(PluginError):
        run(testplugin, request({"stderr": "bad\n", "exitCode": 2}))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "testplugin: bad")
    ]
    assert capfd.readouterr() == ("", "")


def test_huge_stderr_is_bounded(testplugin: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="libcni.invoke")
    err = failure(testplugin, request({"stderrBytes": 3 << 20, "exitCode": 1}))
    assert len(err.stderr) == 4096 and err.stderr.endswith("e\n")
    assert "earlier bytes of stderr dropped" in caplog.records[0].getMessage()
    assert len(caplog.records) == 1 + (1 << 20) // 64


# -- failures ----------------------------------------------------------------------------


def test_error_object_is_decoded(testplugin: str) -> None:
    err = failure(
        testplugin,
        request(
            {
                "error": {"code": 7, "msg": "bad config", "details": "the detail", "extra": 1},
                "stderr": "some noise",
            }
        ),
    )
    assert type(err) is PluginError
    assert (err.code, err.msg, err.details) == (7, "bad config", "the detail")
    assert (err.plugin, err.exit_code, err.signal, err.stderr) == (
        "testplugin",
        1,
        None,
        "some noise",
    )


def test_error_object_without_details_and_custom_exit(testplugin: str) -> None:
    err = failure(testplugin, request({"error": {"code": 11, "msg": "later"}, "exitCode": 42}))
    assert (err.code, err.msg, err.details, err.exit_code) == (11, "later", "", 42)


def test_empty_stdout_reports_status_and_stderr(testplugin: str) -> None:
    err = failure(testplugin, request({"stderr": "it went wrong", "exitCode": 3}))
    assert err.code == 999
    assert "failed with no error message" in err.msg and "testplugin" in err.msg
    assert "exit status 3" in err.details and "it went wrong" in err.details
    assert (err.exit_code, err.signal, err.stderr) == (3, None, "it went wrong")


def test_killed_by_signal(testplugin: str) -> None:
    err = failure(testplugin, request({"killSelf": int(signal.SIGKILL)}))
    assert err.code == 999
    assert (err.exit_code, err.signal) == (None, signal.SIGKILL)
    assert "SIGKILL" in err.details
    err = failure(
        testplugin,
        request({"error": {"code": 5, "msg": "io"}, "killSelf": int(signal.SIGUSR1)}),
    )
    assert (err.code, err.msg, err.signal) == (5, "io", signal.SIGUSR1)


def test_garbage_output(testplugin: str) -> None:
    err = failure(testplugin, request({"stdout": "this is not json", "exitCode": 1}))
    assert err.code == 999
    assert "not a valid" in err.msg and "exit status 1" in err.msg
    assert err.details == "this is not json"


def test_garbage_output_excerpt_is_bounded(testplugin: str) -> None:
    err = failure(testplugin, request({"stdoutBytes": 100_000, "exitCode": 1}))
    assert len(err.details) < 2000 and "100000 bytes" in err.details


@pytest.mark.parametrize(
    "printed",
    [
        '{"code": "7", "msg": "x"}',
        '{"code": 7.0, "msg": "x"}',
        '{"code": true, "msg": "x"}',
        '{"msg": "x"}',
        '{"code": 7}',
        '{"code": 7, "msg": 5}',
        '{"code": 7, "msg": "x", "details": ["d"]}',
        "[1, 2]",
        "null",
        '"text"',
        "[" * 100_000,
        "\udcff",
    ],
)
def test_invalid_error_objects(tmp_path: Path, printed: str) -> None:
    out = tmp_path / "out"
    out.write_bytes(printed.encode(errors="surrogateescape"))
    plugin = write_plugin(tmp_path / "p", f"#!/bin/sh\ncat {out}\nexit 1\n")
    err = failure(plugin)
    assert err.code == 999
    assert "not a valid CNI error object" in err.msg
    assert err.plugin == "p" and err.exit_code == 1


def test_not_executable_directory_missing_and_bad_format(tmp_path: Path) -> None:
    cases = {
        "noexec": write_plugin(tmp_path / "noexec", "#!/bin/sh\n", mode=0o644),
        "adir": str(tmp_path / "adir"),
        "missing": str(tmp_path / "missing"),
        "garbage": write_plugin(tmp_path / "garbage", "\x01\x02 not a program"),
    }
    (tmp_path / "adir").mkdir()
    for name, path in cases.items():
        err = failure(path)
        assert err.code == 5, name
        assert path in err.msg and err.plugin == name
        assert err.details  # the OS error
    assert "EACCES" in failure(cases["noexec"]).details
    assert "ENOENT" in failure(cases["missing"]).details
    assert "ENOEXEC" in failure(cases["garbage"]).details


def test_nul_in_environment(testplugin: str) -> None:
    err = failure(testplugin, request(), FOO="a\0b")
    assert err.code == 4


# -- timeouts and leftover processes -------------------------------------------------------


def test_timeout_kills_a_plugin_ignoring_sigterm_and_its_children(
    testplugin: str, record: Path
) -> None:
    req = request(
        {"ignoreTerm": True, "spawnChild": 30, "stderr": "working on it", "sleep": 30},
        record=str(record),
    )
    start = time.monotonic()
    with pytest.raises(PluginTimeoutError) as info:
        RawExec(grace=0.3).exec_plugin(testplugin, req, BASE_ENV, 0.5)
    elapsed = time.monotonic() - start
    assert 0.75 < elapsed < 3
    err = info.value
    assert isinstance(err, TimeoutError) and err.code == 11
    assert err.msg == 'plugin "testplugin" timed out after 0.5s'
    assert (err.plugin, err.stderr, err.signal) == ("testplugin", "working on it", signal.SIGKILL)
    call, child = records(record)
    assert_dead(call["pid"], child["child"])


def test_timeout_plugin_that_honours_sigterm_is_not_waited_for(testplugin: str) -> None:
    start = time.monotonic()
    with pytest.raises(PluginTimeoutError) as info:
        RawExec(grace=5).exec_plugin(testplugin, request({"sleep": 30}), BASE_ENV, 0.3)
    assert time.monotonic() - start < 3
    assert info.value.signal == signal.SIGTERM


def test_child_outliving_the_plugin_is_killed_and_not_waited_for(
    testplugin: str, record: Path
) -> None:
    start = time.monotonic()
    out = run(testplugin, request({"spawnChild": 30, "result": {"ok": 1}}, record=str(record)))
    assert json.loads(out) == {"ok": 1}
    assert time.monotonic() - start < 3
    call, child = records(record)
    assert_dead(call["pid"], child["child"])


def test_child_flooding_stdout_after_the_leader_exits(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path / "flood", "#!/bin/sh\nyes &\necho $!\n")
    start = time.monotonic()
    out = run(plugin)
    assert time.monotonic() - start < 3
    child = next(int(line) for line in out.split(b"\n") if line.isdigit())
    assert_dead(child)


def test_text_file_busy_is_retried_with_a_fresh_process(testplugin: str, tmp_path: Path) -> None:
    copy = tmp_path / "busy"
    result: list[Any] = []
    with open(copy, "wb") as f:  # open for writing: exec fails with ETXTBSY
        f.write(Path(testplugin).read_bytes())
        f.flush()
        copy.chmod(0o755)
        thread = threading.Thread(target=lambda: result.append(run(str(copy), request())))
        start = time.monotonic()
        thread.start()
        time.sleep(0.3)
    thread.join(10)
    assert json.loads(result[0])["ips"]
    assert time.monotonic() - start >= 0.3


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_text_file_busy_gives_up(
    testplugin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    # Both drivers start through one retry (_raw._Start) at BUSY_BINARY's pace.
    import libcni.invoke._raw as raw
    from libcni import _deadline

    monkeypatch.setattr(raw, "BUSY_BINARY", _deadline.BUSY_BINARY._replace(budget=0.2))
    copy = tmp_path / "busy"
    shutil.copy(testplugin, copy)

    def call(timeout: float | None) -> bytes:
        if driver == "sync":
            return RawExec().exec_plugin(str(copy), b"", BASE_ENV, timeout)
        return asyncio.run(RawExec().aexec_plugin(str(copy), b"", BASE_ENV, timeout))

    with open(copy, "ab"):
        start = time.monotonic()
        with pytest.raises(PluginError) as info:
            call(10)
        err = info.value
        assert err.code == 5 and "ETXTBSY" in err.details and str(copy) in err.msg
        assert "for 0.2s" in err.details and 0.15 < time.monotonic() - start < 5
        with pytest.raises(PluginTimeoutError) as timed_out:
            call(0.05)
        assert timed_out.value.msg == 'plugin "busy" timed out after 0.05s'
        assert "stayed busy" in timed_out.value.details


def test_rawexec_and_mockexec_are_async_execs() -> None:
    # AsyncCNIConfig awaits the aexec_plugin of an AsyncExec, runs any other Exec in a thread.
    from harness import ThreadOnlyExec

    from libcni.testing import MockExec

    assert isinstance(RawExec(), AsyncExec)
    assert isinstance(MockExec(lambda call: {}), AsyncExec)
    assert not isinstance(ThreadOnlyExec(), AsyncExec)


def test_concurrent_calls_from_threads(testplugin: str) -> None:
    results: list[bytes] = []

    def one(i: int) -> None:
        results.append(run(testplugin, request({"result": {"i": i}})))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(json.loads(r)["i"] for r in results) == list(range(8))


@pytest.mark.parametrize(
    "start",
    [
        # Alone, or with a signal blocked: os.posix_spawn, whose dup2 onto 0-2 must not
        # clobber a pipe that took the number of a closed stdio descriptor.
        "",
        "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n",
        # Another plugin in flight: subprocess.
        "import threading, time\n"
        "from libcni.invoke import _raw\n"
        "slow = json.dumps({'test': {'*': {'sleep': 2}}}).encode()\n"
        "threading.Thread(target=RawExec().exec_plugin, args=(PLUGIN, slow, ENV, 10)).start()\n"
        "while not _raw._LIVE:\n"
        "    time.sleep(0.01)\n",
    ],
    ids=["posix_spawn", "posix_spawn-blocked-signal", "subprocess"],
)
def test_works_with_stdio_descriptors_closed(testplugin: str, start: str) -> None:
    code = (
        "import json, os, sys\n"
        "os.close(0); os.close(1)\n"
        "from libcni.invoke import RawExec\n"
        f"PLUGIN, ENV = {testplugin!r}, {BASE_ENV!r}\n"
        f"{start}"
        "out = RawExec().exec_plugin(PLUGIN, b'{}', ENV, 10)\n"
        "os.write(2, out)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr)["interfaces"] == [{"name": "eth0"}]


# -- asyncio -------------------------------------------------------------------------------


def test_async_success_and_error(testplugin: str) -> None:
    async def main() -> tuple[bytes, PluginError]:
        exec_ = RawExec()
        ok = await exec_.aexec_plugin(testplugin, request({"result": {"a": 1}}), BASE_ENV, 10)
        with pytest.raises(PluginError) as info:
            await exec_.aexec_plugin(
                testplugin, request({"error": {"code": 3, "msg": "gone"}}), BASE_ENV, 10
            )
        return ok, info.value

    ok, err = asyncio.run(main())
    assert json.loads(ok) == {"a": 1}
    assert (err.code, err.msg, err.exit_code) == (3, "gone", 1)


def test_async_large_io_and_concurrency(tmp_path: Path, testplugin: str) -> None:
    cat = write_plugin(tmp_path / "cat", "#!/bin/sh\nexec cat\n")
    data = os.urandom(4 << 20)

    async def main() -> list[bytes]:
        exec_ = RawExec()
        return await asyncio.gather(
            exec_.aexec_plugin(cat, data, BASE_ENV, 10),
            *(exec_.aexec_plugin(testplugin, request(), BASE_ENV, 10) for _ in range(4)),
        )

    out = asyncio.run(main())
    assert out[0] == data
    assert all(json.loads(o)["ips"] for o in out[1:])


def test_async_timeout(testplugin: str, record: Path) -> None:
    req = request({"ignoreTerm": True, "spawnChild": 30, "sleep": 30}, record=str(record))

    async def main() -> None:
        await RawExec(grace=0.2).aexec_plugin(testplugin, req, BASE_ENV, 0.3)

    start = time.monotonic()
    with pytest.raises(PluginTimeoutError) as info:
        asyncio.run(main())
    assert 0.45 < time.monotonic() - start < 3
    assert info.value.plugin == "testplugin"
    call, child = records(record)
    assert_dead(call["pid"], child["child"])


def test_async_cancellation_kills_the_group(testplugin: str, record: Path) -> None:
    req = request({"ignoreTerm": True, "spawnChild": 30, "sleep": 30}, record=str(record))

    async def main() -> None:
        task = asyncio.ensure_future(
            RawExec(grace=0.2).aexec_plugin(testplugin, req, BASE_ENV, None)
        )
        # The plugin records its call, then its child's pid once forked: both run.
        deadline = time.monotonic() + 20
        while not (record.exists() and len(records(record)) >= 2):
            assert time.monotonic() < deadline, "the plugin never started its child"
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    start = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - start < 3
    call, child = records(record)
    assert_dead(call["pid"], child["child"])


def test_async_child_outliving_the_plugin(testplugin: str, record: Path) -> None:
    req = request({"spawnChild": 30}, record=str(record))
    start = time.monotonic()
    assert asyncio.run(RawExec().aexec_plugin(testplugin, req, BASE_ENV, 10)) == b""
    assert time.monotonic() - start < 3
    call, child = records(record)
    assert_dead(call["pid"], child["child"])


def test_async_start_failure(tmp_path: Path) -> None:
    with pytest.raises(PluginError) as info:
        asyncio.run(RawExec().aexec_plugin(str(tmp_path / "missing"), b"", BASE_ENV, 1))
    assert info.value.code == 5


def test_keyboard_interrupt_ends_the_plugin_as_a_timeout_does(tmp_path: Path) -> None:
    # One termination sequence: SIGTERM first (the plugin may clean up), not SIGKILL at once.
    marker = tmp_path / "terminated"
    plugin = tmp_path / "trapper"
    plugin.write_text(
        f"#!/bin/sh\ntrap 'echo term > {marker}; exit 0' TERM\necho started >&2\nsleep 30 &\nwait\n"
    )
    plugin.chmod(0o755)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            RawExec(grace=5).exec_plugin(str(plugin), b"{}", BASE_ENV, 20)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert marker.read_text() == "term\n"


def test_an_operation_environment_is_read_only(testplugin: str) -> None:
    from libcni._env import Environment

    env = Environment(BASE_ENV)
    assert run(testplugin, request()) == RawExec().exec_plugin(testplugin, request(), env, 10)
    with pytest.raises(TypeError):
        env["X"] = "1"
    with pytest.raises(TypeError):
        env.update(X="1")


def test_no_cpython_private_call_starts_plugins() -> None:
    # Issue 29, item 1: one path on public APIs (os.posix_spawn), whatever the Python.
    root = Path(libcni.__file__).parent
    for source in root.rglob("*.py"):
        text = source.read_text()
        for private in ("_posixsubprocess", "fork_exec", 'import_module("_'):
            assert private not in text, f"{source}: {private}"
