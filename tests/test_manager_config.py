"""The manager's configuration check and reload (behaviour.md §11.1): what it costs, and
that it misses nothing.

Costs are counted, not timed: the files stat'ed, opened and parsed and the
directories listed by one check (``Counter``). A rewrite that leaves a file's
stat as it was (as coarse timestamps allow) is fault injection: this kernel
stamps every write after a stat with a finer time.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal
import tempfile
import time
from collections import Counter as Counts
from pathlib import Path
from typing import Any

import attrs
import harness
import pytest

import libcni
from libcni import NetworkManager
from libcni.manager import _config

Env = harness.ManagerEnv
pytestmark = pytest.mark.env(cls=Env)


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
        self._wrap(monkeypatch, _config.ConfigWatcher, "_look_up", "look_up")

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


def quiet() -> None:
    """Wait until nothing written so far counts as recently changed (two ticks of the
    kernel's clock; two seconds on a file system of whole-second timestamps)."""
    ctime = Path(tempfile.gettempdir()).stat().st_ctime_ns
    coarse = ctime % 1_000_000_000 == 0
    time.sleep((_config.RECENT if coarse else _config.RECENT_FINE) / 1e9 + 0.005)


def settle(m: NetworkManager) -> libcni.LoadedNetworks:
    """Load, wait, load again: from now on nothing counts as recently changed."""
    m.networks()
    quiet()
    m.networks()
    return m.networks()


# -- cost -----------------------------------------------------------------------------


FILES = 300


def many(env: Env) -> None:
    for i in range(FILES):
        write(env.conf / f"{i:04d}.conflist", f"n{i}")


def test_check_with_nothing_changed_costs_one_stat_per_file(env: Env, counter: Counter) -> None:
    """One listing of conf_dir and one stat a file (each file, the plugin directory;
    absent drop-in directories are not looked at), and no open or parse."""
    many(env)
    m = env.manager()
    first = settle(m)
    loaded, counts = counter(m)
    assert loaded is first
    assert counts == Counts(stat=FILES + 1, scandir=1)


def test_a_reload_reads_and_parses_each_changed_file_once(env: Env, counter: Counter) -> None:
    many(env)
    m = env.manager()
    _, counts = counter(m)
    assert counts["parse"] == FILES and counts["open"] == FILES  # the first load: once each
    assert counts["look_up"] == 1  # one plugin type
    settle(m)
    write(env.conf / "0007.conflist", "seven")
    write(env.conf / "0100.conflist", "hundred")
    loaded, counts = counter(m)
    assert (
        "seven" in loaded.networks and "hundred" in loaded.networks and "n7" not in loaded.networks
    )
    assert counts["open"] == 2 and counts["parse"] == 2 and counts["look_up"] == 0
    assert counts["scandir"] + counts["listdir"] <= 2  # conf_dir listed again, once
    assert list(loaded.networks)[:8] == ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "seven"]
    # Rewritten with the same bytes: read again, not parsed again.
    settle(m)
    (env.conf / "0008.conflist").write_bytes((env.conf / "0008.conflist").read_bytes())
    loaded2, counts = counter(m)
    assert counts["parse"] == 0 and counts["open"] == 1
    assert loaded2.networks["n8"] is loaded.networks["n8"]


def test_drop_ins_are_read_again_only_with_their_list_or_directory(
    env: Env, counter: Counter
) -> None:
    for name in ("a", "b"):
        (env.conf / f"10-{name}.conflist").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": name})
        )
        (env.conf / name).mkdir()
        (env.conf / name / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 1}))
    m = env.manager()
    settle(m)
    (env.conf / "a" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 2}))
    loaded, counts = counter(m)
    assert loaded.networks["a"].plugins[0].raw["k"] == 2
    assert loaded.networks["b"].plugins[0].raw["k"] == 1
    assert counts["complete"] == 1 and counts["parse"] == 0  # a's drop-ins only


# -- nothing missed -------------------------------------------------------------------


def test_every_kind_of_change_is_seen(env: Env) -> None:
    m = env.manager()
    assert m.networks().networks == {}
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
    write(env.root / "old.d" / "10-f.conflist", "f")  # the old directory no longer counts
    write(env.conf / "20-g.conflist", "g")
    assert list(m.networks().networks) == ["e", "g"]


def test_conf_dir_reached_through_a_symlink_that_is_repointed(env: Env, counter: Counter) -> None:
    """As a deployment that switches its configuration by repointing a link: each check
    lists the link's target of the moment."""
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
    settle(m)
    loaded, counts = counter(m)  # settled: nothing read again
    assert list(loaded.networks) == ["b", "c"] and counts["open"] == 0


def test_conf_dir_created_after_the_manager(env: Env) -> None:
    shutil.rmtree(env.conf)
    m = env.manager()
    assert m.networks().networks == {}
    env.conf.mkdir()
    write(env.conf / "10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]
    write(env.conf / "20-b.conflist", "b")
    assert list(m.networks().networks) == ["a", "b"]


def test_drop_in_directory_created_changed_and_removed(env: Env) -> None:
    (env.conf / "10-d.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "d"}))
    m = env.manager()
    settle(m)
    assert "d" not in m.networks().networks
    (env.conf / "d").mkdir()
    (env.conf / "d" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 1}))
    assert m.networks().networks["d"].plugins[0].raw["k"] == 1
    settle(m)
    p = env.conf / "d" / "10-p.conf"
    st = p.stat()
    p.write_text(json.dumps({"type": "testplugin", "k": 7}))  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert m.networks().networks["d"].plugins[0].raw["k"] == 7
    shutil.rmtree(env.conf / "d")
    assert "d" not in m.networks().networks


def test_plugin_installed_later_and_removed(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the missing binary would be is stat'ed at each check: its arrival is seen even
    when the plugin directory's own stat says nothing (fault injection: frozen)."""
    write(env.conf / "10-a.conflist", "a", plugin="later")
    m = env.manager()
    settle(m)
    assert "a" not in m.networks().networks
    frozen = _config._stat(str(env.plugins))
    real = _config._stat
    with monkeypatch.context() as patch:
        patch.setattr(_config, "_stat", lambda p: frozen if p == str(env.plugins) else real(p))
        shutil.copy(harness.TESTPLUGIN, env.plugins / "later")
        assert "a" in m.networks().networks
    (env.plugins / "later").unlink()
    assert "a" not in m.networks().networks


def test_a_linked_file_is_seen_through_its_target(env: Env) -> None:
    """A file reached through a symbolic link (as Kubernetes mounts a ConfigMap) or with
    another hard link can change through another path: its stat is its target's."""
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir()
    target = write(elsewhere / "a.conflist", "a")
    (env.conf / "10-a.conflist").symlink_to(target)
    os.link(write(elsewhere / "b.conflist", "b"), env.conf / "20-b.conflist")
    m = env.manager()
    settle(m)
    assert list(m.networks().networks) == ["a", "b"]
    write(target, "x")
    assert list(m.networks().networks) == ["x", "b"]
    write(elsewhere / "b.conflist", "y")  # in place: the other hard link sees it
    assert list(m.networks().networks) == ["x", "y"]


# -- coarse timestamps ----------------------------------------------------------------


def test_a_same_stat_rewrite_is_seen_while_recent_and_costs_nothing_after(
    env: Env, counter: Counter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite within one tick of the previous check keeps size, inode and times (fault
    injection: stat frozen). A file changed that close to the previous check is read again
    (once: its bytes are parsed only if they differ); one changed longer ago is not."""
    a = write(env.conf / "10-a.conflist", "a")
    m = env.manager()
    w = m._state.watcher
    settle(m)
    frozen = _config._stat(str(a))
    assert frozen is not None
    real = _config._stat
    monkeypatch.setattr(_config, "_stat", lambda p: frozen if p == str(a) else real(p))
    write(a, "b")
    assert w._state is not None  # the previous check: the same tick as the change
    w._state = attrs.evolve(w._state, checked_at=frozen[4])
    loaded, counts = counter(m)
    assert list(loaded.networks) == ["b"] and counts["open"] == 1 and counts["parse"] == 1
    # Long after: the stat tells everything, nothing is read.
    w._state = attrs.evolve(w._state, checked_at=frozen[4] + _config.RECENT + 1)
    loaded2, counts = counter(m)
    assert loaded2 is loaded and counts["open"] == 0


def test_a_drop_in_same_stat_rewrite_is_seen_while_recent(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    (env.conf / "10-d.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "d"}))
    (env.conf / "d").mkdir()
    p = env.conf / "d" / "10-p.conf"
    p.write_text(json.dumps({"type": "testplugin", "k": 1}))
    m = env.manager()
    settle(m)
    frozen = _config._stat(str(p))
    real = _config._stat
    monkeypatch.setattr(_config, "_stat", lambda q: frozen if q == str(p) else real(q))
    p.write_text(json.dumps({"type": "testplugin", "k": 2}))
    w = m._state.watcher
    assert w._state is not None and frozen is not None
    w._state = attrs.evolve(w._state, checked_at=frozen[4])
    assert m.networks().networks["d"].plugins[0].raw["k"] == 2


# -- fork -----------------------------------------------------------------------------


def test_a_child_forked_while_the_lock_is_held_still_checks(env: Env) -> None:
    """Another thread may be reloading at the fork: the child's copy of the watcher's
    lock is held forever, so the child makes a lock of its own."""
    write(env.conf / "10-a.conflist", "a")
    m = env.manager()
    m.networks()
    r, w = os.pipe()
    with m._state.watcher._lock:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                signal.alarm(10)  # a deadlock kills the child: nothing is written
                write(env.conf / "20-b.conflist", "b")
                os.write(w, json.dumps(list(m.networks().networks)).encode())
            finally:
                os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    seen = os.read(r, 4096)
    os.close(r)
    assert json.loads(seen or b"null") == ["a", "b"]
    assert list(m.networks().networks) == ["a", "b"]
