"""The manager's configuration check and reload (behaviour.md §11.1): what it costs, and
that it misses nothing, with the kernel's change notification and with the stat scan.

Costs are counted, not timed: the files stat'ed, opened and parsed and the
directories listed by one check (``Counter``). Faults are real: the
notification queue really overflows, inotify instances and watches are really
exhausted (limits of a user namespace of a child process, or its
``RLIMIT_NOFILE``), a child is really forked.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter as Counts
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
from _require import unavailable

import libcni
from libcni import NetworkManager
from libcni.manager import _config, _notify

Env = harness.ManagerEnv
pytestmark = pytest.mark.env(cls=Env)


@pytest.fixture(params=["notify", "scan"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once with the kernel's notification and once with the stat scan."""
    monkeypatch.setattr(_config, "NOTIFY", request.param == "notify")
    return str(request.param)


class Counter:
    """Counts what the configuration check does: stats, listings, opens, parses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counts[str] = Counts()
        self.on = False
        for name in ("stat", "scandir", "listdir"):
            self._wrap(monkeypatch, os, name, name)
        self._wrap(monkeypatch, builtins, "open", "open")
        self._wrap(monkeypatch, _config, "_parse", "parse")
        self._wrap(monkeypatch, _config, "_complete", "complete")

    def _wrap(self, monkeypatch: pytest.MonkeyPatch, owner: Any, attr: str, key: str) -> None:
        real = getattr(owner, attr)

        def counted(*args: Any, **kw: Any) -> Any:
            if self.on:
                self.counts[key] += 1
            return real(*args, **kw)

        monkeypatch.setattr(owner, attr, counted)

    def __call__(self, m: NetworkManager) -> tuple[libcni.LoadedNetworks, Counts[str]]:
        """``m.networks()``, and what it did."""
        self.counts = Counts()
        self.on = True
        try:
            loaded = m.networks()
        finally:
            self.on = False
        return loaded, self.counts


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Counter:
    return Counter(monkeypatch)


def write(path: Path, name: str, plugin: str = "testplugin", pad: str = "") -> Path:
    path.write_text(
        json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": [{"type": plugin}], "p": pad})
    )
    return path


def age(*paths: Path) -> None:
    """Set modification times an hour back (past the stat scan's "recently modified")."""
    past = time.time() - 3600
    for p in paths:
        os.utime(p, (past, past), follow_symlinks=False)


def settle(m: NetworkManager, env: Env) -> libcni.LoadedNetworks:
    """Load, age every timestamp, load again: from now on nothing counts as recent."""
    m.networks()
    age(env.conf, *env.conf.rglob("*"), env.plugins)
    m.networks()
    return m.networks()


# -- cost -----------------------------------------------------------------------------


FILES = 300


def many(env: Env) -> None:
    for i in range(FILES):
        write(env.conf / f"{i:04d}.conflist", f"n{i}")


def test_check_with_nothing_changed_costs_nothing_per_file(
    env: Env, counter: Counter, mode: str
) -> None:
    """With the notification not one stat, listing, open or parse, whatever the files;
    with the scan one stat a file (conf_dir, each file, the plugin directory; absent
    drop-in directories are not stat'ed) and nothing else."""
    many(env)
    m = env.manager()
    first = settle(m, env)
    assert m._core.watcher.notified is (mode == "notify")
    loaded, counts = counter(m)
    assert loaded is first
    assert counts == (Counts() if mode == "notify" else Counts(stat=FILES + 2))


def test_a_reload_reads_and_parses_each_changed_file_once(
    env: Env, counter: Counter, mode: str
) -> None:
    many(env)
    m = env.manager()
    _, counts = counter(m)
    assert counts["parse"] == FILES and counts["open"] == FILES  # the first load: once each
    settle(m, env)
    write(env.conf / "0007.conflist", "seven")
    write(env.conf / "0100.conflist", "hundred")
    loaded, counts = counter(m)
    assert (
        "seven" in loaded.networks and "hundred" in loaded.networks and "n7" not in loaded.networks
    )
    assert counts["open"] == 2 and counts["parse"] == 2
    assert counts["scandir"] + counts["listdir"] <= 2  # conf_dir listed again, once
    assert list(loaded.networks)[:8] == ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "seven"]
    # Rewritten with the same bytes: read again, not parsed again.
    settle(m, env)
    (env.conf / "0008.conflist").write_bytes((env.conf / "0008.conflist").read_bytes())
    loaded2, counts = counter(m)
    assert counts["parse"] == 0 and counts["open"] == 1
    assert loaded2.networks["n8"] is loaded.networks["n8"]


def test_drop_ins_are_read_again_only_with_their_list_or_directory(
    env: Env, counter: Counter, mode: str
) -> None:
    for name in ("a", "b"):
        (env.conf / f"10-{name}.conflist").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": name})
        )
        (env.conf / name).mkdir()
        (env.conf / name / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 1}))
    m = env.manager()
    settle(m, env)
    (env.conf / "a" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 2}))
    loaded, counts = counter(m)
    assert loaded.networks["a"].plugins[0].raw["k"] == 2
    assert loaded.networks["b"].plugins[0].raw["k"] == 1
    assert counts["complete"] == 1 and counts["parse"] == 0  # a's drop-ins only


# -- nothing missed -------------------------------------------------------------------


def test_every_kind_of_change_is_seen(env: Env, mode: str) -> None:
    m = env.manager()
    assert m.networks().networks == {}
    assert m._core.watcher.notified is (mode == "notify")
    a = write(env.conf / "10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]  # created
    # Rewritten in place keeping the size, the modification time put back.
    st = a.stat()
    write(a, "b")
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert a.stat().st_size == st.st_size
    assert list(m.networks().networks) == ["b"]
    # Renamed over: a new file replaces it by rename.
    write(env.root / "new.conflist", "c")
    (env.root / "new.conflist").rename(a)
    assert list(m.networks().networks) == ["c"]
    # Renamed out, then in.
    a.rename(env.root / "away.conflist")
    assert m.networks().networks == {}
    (env.root / "away.conflist").rename(env.conf / "20-c.conflist")
    assert list(m.networks().networks) == ["c"]
    # Made unreadable as JSON by truncation, then deleted.
    os.truncate(env.conf / "20-c.conflist", 3)
    assert str(env.conf / "20-c.conflist") in m.networks().skipped
    (env.conf / "20-c.conflist").unlink()
    assert m.networks().networks == {} and m.networks().skipped == {}
    # conf_dir removed with everything in it, and made again.
    write(env.conf / "10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]
    shutil.rmtree(env.conf)
    assert m.networks().networks == {}
    env.conf.mkdir()
    write(env.conf / "10-d.conflist", "d")
    assert list(m.networks().networks) == ["d"]
    # conf_dir renamed away and another put in its place.
    env.conf.rename(env.root / "old.d")
    (env.root / "new.d").mkdir()
    write(env.root / "new.d" / "10-e.conflist", "e")
    (env.root / "new.d").rename(env.conf)
    assert list(m.networks().networks) == ["e"]
    write(env.root / "old.d" / "10-f.conflist", "f")  # the old directory is not watched
    write(env.conf / "20-g.conflist", "g")  # the new one is
    assert list(m.networks().networks) == ["e", "g"]


def test_conf_dir_reached_through_a_symlink_that_is_repointed(
    env: Env, mode: str, counter: Counter
) -> None:
    """As a deployment that switches its configuration by repointing a link: the link's
    target is stat'ed at each check, and the new directory is the one watched."""
    one, two = env.root / "one", env.root / "two"
    one.mkdir()
    two.mkdir()
    write(one / "10-a.conflist", "a")
    write(two / "10-b.conflist", "b")
    link = env.root / "link.d"
    link.symlink_to(one)
    m = NetworkManager(link, [env.plugins], cache_dir=env.cache, max_networks=0)
    assert list(m.networks().networks) == ["a"]
    (env.root / "new-link").symlink_to(two)
    (env.root / "new-link").rename(link)  # atomically repointed
    assert list(m.networks().networks) == ["b"]
    write(two / "20-c.conflist", "c")
    assert list(m.networks().networks) == ["b", "c"]
    write(one / "20-x.conflist", "x")  # the old directory no longer counts
    assert list(m.networks().networks) == ["b", "c"]
    age(two, *two.iterdir())
    m.networks()
    loaded, counts = counter(m)  # settled: nothing read again
    assert list(loaded.networks) == ["b", "c"] and counts["open"] == 0


def test_conf_dir_created_after_the_manager(env: Env, mode: str) -> None:
    shutil.rmtree(env.conf)
    m = env.manager()
    assert m.networks().networks == {}
    env.conf.mkdir()
    write(env.conf / "10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]
    write(env.conf / "20-b.conflist", "b")
    assert list(m.networks().networks) == ["a", "b"]


def test_drop_in_directory_created_changed_and_removed(env: Env, mode: str) -> None:
    (env.conf / "10-d.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "d"}))
    m = env.manager()
    settle(m, env)
    assert "d" not in m.networks().networks
    (env.conf / "d").mkdir()
    (env.conf / "d" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 1}))
    assert m.networks().networks["d"].plugins[0].raw["k"] == 1
    age(env.conf, *env.conf.rglob("*"))
    m.networks()
    p = env.conf / "d" / "10-p.conf"
    st = p.stat()
    p.write_text(json.dumps({"type": "testplugin", "k": 7}))  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert m.networks().networks["d"].plugins[0].raw["k"] == 7
    shutil.rmtree(env.conf / "d")
    assert "d" not in m.networks().networks


def test_plugin_installed_or_made_executable_later(env: Env, mode: str) -> None:
    write(env.conf / "10-a.conflist", "a", plugin="later")
    m = env.manager()
    settle(m, env)
    assert "a" not in m.networks().networks
    later = env.plugins / "later"
    shutil.copy(harness.TESTPLUGIN, later)
    later.chmod(0o644)
    age(env.plugins, later)
    m.networks()
    later.chmod(0o755)  # only the file's mode changes: an event of its directory
    if mode == "scan":  # the scan sees the plugin directory's own stat only
        os.utime(env.plugins)
    assert "a" in m.networks().networks
    later.unlink()
    assert "a" not in m.networks().networks


def test_a_linked_file_is_watched_through_its_target(env: Env, mode: str) -> None:
    """A file reached through a symbolic link (as Kubernetes mounts a ConfigMap) or with
    another hard link can change through another path: it is stat'ed at each check."""
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir()
    target = write(elsewhere / "a.conflist", "a")
    (env.conf / "10-a.conflist").symlink_to(target)
    os.link(write(elsewhere / "b.conflist", "b"), env.conf / "20-b.conflist")
    m = env.manager()
    settle(m, env)
    assert list(m.networks().networks) == ["a", "b"]
    write(target, "x")
    assert list(m.networks().networks) == ["x", "b"]
    write(elsewhere / "b.conflist", "y")  # in place: the other hard link sees it
    assert list(m.networks().networks) == ["x", "y"]


# -- the notification's faults --------------------------------------------------------


def test_a_lost_event_after_an_overflow_is_still_seen(
    env: Env, counter: Counter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's queue really overflows: its events are lost, and then a file changes
    (its own event lost too). The overflow makes the next check read everything again,
    parsing only what changed."""
    monkeypatch.setattr(_config, "NOTIFY", True)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"max_queued_events is {limit}: too many events to overflow in a test")
    for i in range(20):
        write(env.conf / f"{i:02d}.conflist", f"n{i}")
    noise = [env.conf / "noise-a", env.conf / "noise-b"]
    for p in noise:
        p.write_text("")
    m = env.manager()
    settle(m, env)
    assert m._core.watcher.notified
    for i in range(limit + 10):  # alternating: identical successive events would merge
        os.utime(noise[i % 2])
    write(env.conf / "07.conflist", "seven")
    loaded, counts = counter(m)
    assert "seven" in loaded.networks and "n7" not in loaded.networks
    assert counts["open"] == 20 and counts["parse"] == 1  # read everything, parse one
    assert m._core.watcher.notified  # still watching
    write(env.conf / "08.conflist", "eight")
    loaded, counts = counter(m)
    assert "eight" in loaded.networks and counts["open"] == 1


CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    sys.path.insert(0, {root!r})
    from libcni import NetworkManager
    conf, plugins, cache, fill = sys.argv[1:5]
    held = []
    if fill == "fds":  # every descriptor up to the limit taken: inotify_init fails (EMFILE)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        while True:
            try:
                held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
    m = NetworkManager(conf, [plugins], cache_dir=cache, max_networks=0)
    names = [list(m.networks().networks)]
    for fd in held:
        os.close(fd)
    names.append(list(m.networks().networks))
    w = m._core.watcher
    def write(name, net):
        with open(os.path.join(conf, name), "w") as f:
            json.dump({{"cniVersion": "1.0.0", "name": net, "plugins": [{{"type": "testplugin"}}]}}, f)
    write("10-a.conflist", "b")  # same size, at once
    names.append(list(m.networks().networks))
    write("20-c.conflist", "c")
    names.append(list(m.networks().networks))
    print(json.dumps({{"notified": w.notified, "names": names}}))
    """
)


def _child(env: Env, fill: str, *prefix: str) -> dict[str, Any]:
    write(env.conf / "10-a.conflist", "a")
    script = CHILD.format(root=str(harness.REPO))
    argv = [*prefix, sys.executable, "-c", script, str(env.conf), str(env.plugins)]
    done = subprocess.run([*argv, str(env.cache), fill], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _userns(limits: str) -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-U", "-r", "true"]).returncode != 0:
        unavailable("needs unshare(1) and user namespaces")
    # The limits of a user namespace bind only the processes in it.
    return [unshare, "-U", "-r", "sh", "-c", f'{limits} && exec "$@"', "sh"]


def test_no_inotify_instance_to_be_had_falls_back_to_the_scan(env: Env) -> None:
    prefix = _userns("echo 0 > /proc/sys/user/max_inotify_instances")
    out = _child(env, "", *prefix)
    assert out == {"notified": False, "names": [["a"], ["a"], ["b"], ["b", "c"]]}


def test_no_watch_to_be_had_falls_back_to_the_scan(env: Env) -> None:
    prefix = _userns("echo 0 > /proc/sys/user/max_inotify_watches")  # ENOSPC
    out = _child(env, "", *prefix)
    assert out == {"notified": False, "names": [["a"], ["a"], ["b"], ["b", "c"]]}


def test_no_descriptor_left_for_inotify_falls_back_to_the_scan(env: Env) -> None:
    out = _child(env, "fds")  # nothing can be read either at first: conf_dir is skipped
    assert out == {"notified": False, "names": [[], ["a"], ["b"], ["b", "c"]]}


def test_the_same_child_with_room_is_notified(env: Env) -> None:
    """The control of the three tests above: the same child, nothing exhausted."""
    out = _child(env, "")
    assert out == {"notified": True, "names": [["a"], ["a"], ["b"], ["b", "c"]]}


def test_a_forked_child_neither_steals_nor_misses_events(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's queue is shared with a forked child (one open file): a child reading
    it would take the parent's events. The child starts over with its own."""
    monkeypatch.setattr(_config, "NOTIFY", True)
    write(env.conf / "10-a.conflist", "a")
    m = env.manager()
    settle(m, env)
    r, w = os.pipe()
    write(env.conf / "10-a.conflist", "b")  # queued in the parent's inotify, not yet read
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            names = list(m.networks().networks)
            write(env.conf / "20-c.conflist", "c")
            names += list(m.networks().networks)
            os.write(w, json.dumps([names, m._core.watcher.notified]).encode())
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    seen = json.loads(os.read(r, 4096))
    os.close(r)
    assert status == 0
    assert seen == [["b", "b", "c"], True]
    assert list(m.networks().networks) == ["b", "c"]  # the parent's events are all there


def _inotify_fds() -> list[int]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify":
                out.append(int(name))
        except OSError:
            continue
    return out


def test_many_managers_share_one_descriptor_closed_with_the_last(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    monkeypatch.setattr(_config, "NOTIFY", True)
    gc.collect()
    before = _inotify_fds()
    write(env.conf / "10-a.conflist", "a")
    managers = [env.manager() for _ in range(200)]  # more than max_user_instances (128)
    for m in managers:
        assert list(m.networks().networks) == ["a"]
        assert m._core.watcher.notified
    fds = set(_inotify_fds()) - set(before)
    assert len(fds) <= 1
    for fd in fds:
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    write(env.conf / "20-b.conflist", "b")
    assert all(list(m.networks().networks) == ["a", "b"] for m in managers)
    del managers, m
    gc.collect()
    assert _inotify_fds() == before or set(_inotify_fds()) <= set(before)


def test_disabled_notification_means_the_scan(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_notify, "DISABLED", True)
    monkeypatch.setattr(_notify, "_current", None)
    m = env.manager()
    write(env.conf / "10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]
    assert not m._core.watcher.notified


@pytest.fixture(autouse=True)
def _no_leftover_limits() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)
