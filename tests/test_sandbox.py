"""The manager and network namespaces: ``loopback="internal"`` and ``sandbox()``.

The plugins are the real test plugin (it records every run, ``CNI_NETNS``
included); the namespaces are real, pinned in a temporary directory. Tests
that need no namespace (refused settings, a namespace that is gone) run for
every user; the others need root (skipped without it, failing under
``LIBCNI_REQUIRE_NETNS=1``). The calling thread must end every test in the
namespace it started in.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import harness
import pytest
from _require import unavailable

from libcni import (
    AsyncNetworkManager,
    ConfigError,
    NamespaceError,
    NetworkManager,
    NetworkRequest,
    NotReadyError,
    PluginTimeoutError,
    RuntimeConfig,
    SetupError,
    TeardownError,
    ValidationError,
    netns,
)

SELF_NS = "/proc/thread-self/ns/net"


class Env(harness.ManagerEnv):
    """``testplugin`` (and ``loopback``, a link to it, with ``loopback_plugin``), networks a, b...

    Its managers attach the first network only unless told otherwise (the default).
    """

    manager_defaults: Mapping[str, Any] = {}

    def __init__(self, root: Path, loopback_plugin: bool = False) -> None:
        types = ("testplugin", "loopback") if loopback_plugin else ("testplugin",)
        super().__init__(root, types)
        self.write("10-a.conflist", "a", {"type": "testplugin"})
        self.write("20-b.conflist", "b", {"type": "testplugin"})
        self.write(
            "30-bad.conflist",
            "bad",
            {"type": "testplugin", "test": {"ADD": {"error": {"code": 11, "msg": "no"}}}},
        )
        self.write(
            "40-nodel.conflist",
            "nodel",
            {"type": "testplugin", "test": {"DEL": {"error": {"code": 5, "msg": "stuck"}}}},
        )
        self.write(
            "50-slow.conflist", "slow", {"type": "testplugin", "test": {"ADD": {"sleep": 30}}}
        )

    def netns_calls(self) -> list[tuple[str, str, str, str]]:
        """(command, network, ifname, netns) of every plugin run but VERSION."""
        return [(*self.call_of(r), r["env"].get("CNI_NETNS", "")) for r in self.runs()]


pytestmark = pytest.mark.env(cls=Env)


@pytest.fixture
def root_ok() -> None:
    if os.geteuid() != 0:
        unavailable(f"network namespaces need root (running as uid {os.geteuid()})")


@pytest.fixture
def d(tmp_path: Path, root_ok: None) -> Iterator[Path]:
    """Where the tests' namespaces are pinned; every mount there is undone afterwards."""
    try:
        yield tmp_path / "netns"
    finally:
        harness.unmount_under(tmp_path)


@pytest.fixture(autouse=True)
def _thread_stays_home() -> Iterator[None]:
    before = harness.thread_netns()
    yield
    assert harness.thread_netns() == before


def lo_flags(path: str) -> list[str]:
    """The flags of ``lo`` in the namespace at ``path``, as ``ip`` (started there by nsenter) shows them."""
    out = subprocess.run(
        ["nsenter", f"--net={path}", "ip", "-j", "link", "show", "lo"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flags: list[str] = json.loads(out)[0]["flags"]
    return flags


def pinned_under(d: Path) -> list[str]:
    """The namespace files in ``d`` (their mounts go with them)."""
    return sorted(os.listdir(d)) if d.exists() else []


# -- the setting -------------------------------------------------------------------


@pytest.mark.parametrize("cls", [NetworkManager, AsyncNetworkManager])
def test_loopback_setting_is_checked(tmp_path: Path, cls: type[NetworkManager]) -> None:
    for bad in ("plugin", "", "Internal", "true"):
        with pytest.raises(
            ValueError, match=rf"loopback must be True, False or 'internal', not {bad!r}"
        ):
            cls(tmp_path, cache_dir=tmp_path, loopback=bad)  # type: ignore[arg-type]
    for wrong in (1, 0, None, b"internal", ["internal"]):
        with pytest.raises(TypeError, match="loopback must be True, False or 'internal'"):
            cls(tmp_path, cache_dir=tmp_path, loopback=wrong)  # type: ignore[arg-type]
    for good in (True, False, "internal"):
        assert cls(tmp_path, cache_dir=tmp_path, loopback=good).loopback == good


def test_internal_loopback_status_needs_no_loopback_binary(env: Env) -> None:
    assert not (env.plugins / "loopback").exists()
    env.manager(loopback="internal").status()
    env.manager(loopback=False).status()
    with pytest.raises(NotReadyError, match="loopback plugin is not installed"):
        env.manager(loopback=True).status()


def test_internal_loopback_keeps_lo_reserved(env: Env) -> None:
    with pytest.raises(ConfigError, match="'lo' requested twice"):
        env.manager(loopback="internal").setup(
            "c1", "/nowhere", networks=[NetworkRequest("a", "lo")]
        )
    assert env.netns_calls() == []


def test_internal_loopback_failing_fails_the_setup_and_runs_nothing(
    env: Env, tmp_path: Path
) -> None:
    # A path that does not exist is passed on as given: lo cannot be brought up there.
    path = str(tmp_path / "missing")
    m = env.manager(loopback="internal")
    for parallel in (False, True):
        with pytest.raises(SetupError) as info:
            m.setup("c1", path, networks=["a", "b"], parallel=parallel)
        assert isinstance(info.value.cause, NamespaceError)
        assert info.value.code == 8
        assert info.value.partial == () and info.value.rollback_errors == []
        assert re.search("cannot open network namespace .*missing.* No such file", str(info.value))
    with pytest.raises(SetupError) as info:
        asyncio.run(env.amanager(loopback="internal").setup("c1", path, networks=["a"]))
    assert isinstance(info.value.cause, NamespaceError)
    assert env.netns_calls() == []
    assert env.cached() == []
    assert m.inspect("c1").attachments == ()


@pytest.mark.parametrize("loopback", [True, "internal", False])
def test_setup_checks_netns_before_anything_runs(
    env: Env, tmp_path: Path, loopback: bool | str
) -> None:
    """behaviour §11.2: empty is a ValidationError (code 4); a path that exists and is not a
    network namespace a NamespaceError (code 8), a FIFO included, without blocking on it."""
    (tmp_path / "plain").write_text("")
    os.mkfifo(tmp_path / "fifo")
    m = env.manager(loopback=loopback)
    with pytest.raises(ValidationError, match="no network namespace given") as v:
        m.setup("c1", "", networks=["a"])
    assert v.value.code == 4
    for name, kind in [("plain", "an empty file"), ("fifo", "a FIFO"), ("", "a directory")]:
        path = str(tmp_path / name)
        started = time.monotonic()
        with pytest.raises(NamespaceError, match=f"not a network namespace: it is {kind}") as n:
            m.setup("c1", path, networks=["a", "b"], timeout=5)
        assert n.value.code == 8 and time.monotonic() - started < 4
        with pytest.raises(NamespaceError, match=kind):
            asyncio.run(env.amanager(loopback=loopback).setup("c1", path, networks=["a"]))
    assert env.netns_calls() == []
    assert env.cached() == []


# -- loopback="internal" in a real namespace ---------------------------------------------


@pytest.mark.parametrize("parallel", [False, True])
def test_internal_loopback_brings_lo_up_and_caches_nothing(
    env: Env, d: Path, parallel: bool
) -> None:
    with netns.create(dir=d) as ns:
        assert "UP" not in lo_flags(ns.path)
        m = env.manager(loopback="internal")
        view = m.setup("c1", ns.path, networks=["a", "b"], parallel=parallel)
        assert "UP" in lo_flags(ns.path)
        assert view.netns == ns.path
        assert [(a.network, a.ifname) for a in view.attachments] == [("a", "eth0"), ("b", "eth1")]
        assert env.cached() == ["a-c1-eth0", "b-c1-eth1"]  # no cni-loopback entry
        assert sorted(env.netns_calls()) == [
            ("ADD", "a", "eth0", ns.path),
            ("ADD", "b", "eth1", ns.path),
        ]
        assert [(a.network, a.ifname) for a in m.inspect("c1").attachments] == [
            ("a", "eth0"),
            ("b", "eth1"),
        ]
        m.check("c1", ns.path)
        m.teardown("c1", ns.path)
        assert env.cached() == []
        assert [r[:3] for r in env.netns_calls()[2:]] == [
            ("CHECK", "a", "eth0"),
            ("CHECK", "b", "eth1"),
            ("DEL", "b", "eth1"),
            ("DEL", "a", "eth0"),
        ]
        # An lo that is up already stays up; the async manager does the same.
        view = asyncio.run(env.amanager(loopback="internal").setup("c2", ns.path, networks=["a"]))
        assert "UP" in lo_flags(ns.path) and view.netns == ns.path
        assert env.cached() == ["a-c2-eth0"]
        m.gc([])
        assert env.cached() == []


def test_internal_loopback_in_a_new_namespace_from_the_async_manager(env: Env, d: Path) -> None:
    with netns.create(dir=d) as ns:
        asyncio.run(env.amanager(loopback="internal").setup("c1", ns.path, networks=["a"]))
        assert "UP" in lo_flags(ns.path)


def test_internal_loopback_counts_against_the_setup_timeout(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel that makes lo wait (its routing lock busy): the setup fails with its
    # timeout error when its time is up, never later; nothing else ran.
    monkeypatch.setattr(netns, "_loopback_up", lambda path: time.sleep(3))
    m, am = env.manager(loopback="internal"), env.amanager(loopback="internal")
    setups: list[Callable[[], object]] = [
        lambda: m.setup("c1", "/nowhere", networks=["a"], timeout=0.3),
        lambda: m.setup("c1", "/nowhere", networks=["a", "b"], parallel=True, timeout=0.3),
        lambda: asyncio.run(am.setup("c1", "/nowhere", networks=["a"], timeout=0.3)),
    ]
    for setup in setups:
        t0 = time.monotonic()
        with pytest.raises(SetupError) as info:
            setup()
        assert time.monotonic() - t0 < 1.5
        assert isinstance(info.value.cause, PluginTimeoutError) and info.value.code == 11
        assert "timed out after 0.3s while bringing lo up in /nowhere" in str(info.value.cause)
    assert env.netns_calls() == [] and env.cached() == []


def test_async_internal_loopback_runs_off_the_loop(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []

    def slow_lo(path: str) -> None:
        threads.append(threading.get_ident())
        time.sleep(0.6)  # the kernel taking its time

    monkeypatch.setattr(netns, "_loopback_up", slow_lo)
    am = env.amanager(loopback="internal")

    async def main() -> float:
        loop, worst = asyncio.get_running_loop(), 0.0
        setups = asyncio.gather(*(am.setup(f"c{i}", "/nowhere", networks=["a"]) for i in range(4)))
        while not setups.done():
            t = loop.time()
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - t - 0.01)
        await setups
        return worst

    loop_thread = threading.get_ident()
    assert asyncio.run(main()) < 0.3  # inline, the loop would wait 0.6 s at a time
    assert len(threads) == 4 and loop_thread not in threads
    assert env.cached() == [f"a-c{i}-eth0" for i in range(4)]


# -- sandbox ------------------------------------------------------------------------------


@pytest.mark.parametrize("loopback", ["internal", True])
def test_sandbox_creates_sets_up_tears_down_and_removes(
    tmp_path: Path, d: Path, monkeypatch: pytest.MonkeyPatch, loopback: bool | str
) -> None:
    (tmp_path / "env").mkdir()
    env = Env(tmp_path / "env", loopback_plugin=True)
    monkeypatch.setenv("TESTPLUGIN_RECORD", str(env.record))
    m = env.manager(loopback=loopback)
    home = harness.thread_netns()
    with m.sandbox("c1", networks=["a"], netns_dir=d, args=[("K", "V")]) as view:
        path = view.netns
        assert os.path.dirname(path) == str(d)
        pinned = netns.NetNS(path)  # a network namespace is pinned there...
        assert os.stat(path).st_ino != home  # ... not ours
        if loopback == "internal":
            assert "UP" in lo_flags(path)
            assert env.cached() == ["a-c1-eth0"]
        else:
            assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]
        assert [(a.network, a.ifname) for a in view.attachments][-1] == ("a", "eth0")
        assert all(r[3] == path for r in env.netns_calls())
    assert pinned.closed() and not os.path.exists(path)
    assert pinned_under(d) == []
    assert env.cached() == []
    expected = [("ADD", "a", "eth0", path), ("DEL", "a", "eth0", path)]
    if loopback is True:
        expected = [
            ("ADD", "cni-loopback", "lo", path),
            *expected,
            ("DEL", "cni-loopback", "lo", path),
        ]
    assert env.netns_calls() == expected


def test_sandbox_names_its_namespace(env: Env, d: Path) -> None:
    caps = RuntimeConfig(aliases=["web"])  # setup's argument types (api.md), checked by mypy
    m, am = env.manager(loopback="internal"), env.amanager(loopback="internal")
    with m.sandbox("c1", networks=["a"], name="pod-1", netns_dir=d, capability_args=caps) as view:
        assert view.netns == str(d / "pod-1") and "UP" in lo_flags(view.netns)
        assert pinned_under(d) == ["pod-1"]
    assert pinned_under(d) == []

    async def main() -> None:
        async with am.sandbox("c2", name="pod-2", netns_dir=d, args={"K": "V"}) as view:
            assert view.netns == str(d / "pod-2") and pinned_under(d) == ["pod-2"]

    asyncio.run(main())
    assert pinned_under(d) == [] and env.cached() == []
    assert [r[3] for r in env.netns_calls()] == [str(d / "pod-1")] * 2 + [str(d / "pod-2")] * 2
    # A name that is taken is refused before anything runs.
    with (
        netns.create("taken", dir=d),
        pytest.raises(NamespaceError, match="taken"),
        m.sandbox("c3", name="taken", netns_dir=d),
    ):
        pytest.fail("the block ran")
    assert len(env.netns_calls()) == 4


def test_teardown_and_sandbox_take_setups_argument_types(env: Env) -> None:
    # A network with nothing cached is DELeted with teardown's own arguments: typed ones too.
    m, am = env.manager(loopback=False), env.amanager(loopback=False)
    caps = RuntimeConfig(aliases=["web"])
    m.teardown("c1", "/nowhere", networks=["a"], args={"K": "V"}, capability_args=caps)
    asyncio.run(am.teardown("c2", networks=["a"], args=[("K", "W")], capability_args=caps))
    dels = [r for r in env.runs() if r["command"] == "DEL"]
    assert [r["env"]["CNI_ARGS"] for r in dels] == ["K=V", "K=W"]


def test_mypy_strict_accepts_setups_argument_types_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """api.md: setup, teardown and sandbox take the same Args and CapabilityArgs."""
    mypy_api = pytest.importorskip("mypy.api")
    code = tmp_path / "use.py"
    code.write_text(
        "from __future__ import annotations\n"
        "from libcni import AsyncNetworkManager, NetworkManager, RuntimeConfig\n"
        "caps, args = RuntimeConfig(aliases=['web']), {'K': 'V'}\n"
        "def f(m: NetworkManager) -> None:\n"
        "    m.setup('c', '/ns', args=args, capability_args=caps)\n"
        "    m.teardown('c', args=args, capability_args=caps)\n"
        "    with m.sandbox('c', args=args, capability_args=caps, name='pod'):\n"
        "        pass\n"
        "async def g(m: AsyncNetworkManager) -> None:\n"
        "    await m.teardown('c', args=args, capability_args=caps)\n"
        "    async with m.sandbox('c', args=args, capability_args=caps, name='pod'):\n"
        "        pass\n"
    )
    import libcni

    monkeypatch.setenv("MYPYPATH", str(Path(libcni.__file__).resolve().parents[1]))
    out, err, status = mypy_api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(code)])
    assert status == 0, out + err


def test_sandbox_removes_the_namespace_when_setup_fails(env: Env, d: Path) -> None:
    m = env.manager(loopback="internal")
    with pytest.raises(SetupError) as info, m.sandbox("c1", networks=["a", "bad"], netns_dir=d):
        pytest.fail("the block ran")
    assert info.value.cause.code == 11
    runs = env.netns_calls()
    path = runs[0][3]
    assert os.path.dirname(path) == str(d)
    # Rolled back (in the namespace, which still existed), then removed.
    assert [r[:2] for r in runs] == [("ADD", "a"), ("ADD", "bad"), ("DEL", "bad"), ("DEL", "a")]
    assert all(r[3] == path for r in runs)
    assert not os.path.exists(path) and pinned_under(d) == []
    assert env.cached() == []


def test_sandbox_removes_the_namespace_when_teardown_fails_then_raises(env: Env, d: Path) -> None:
    m = env.manager(loopback="internal")
    with (
        pytest.raises(TeardownError, match="stuck"),
        m.sandbox("c1", networks=["a", "nodel"], netns_dir=d) as view,
    ):
        path = view.netns
    assert not os.path.exists(path) and pinned_under(d) == []
    assert env.cached() == ["nodel-c1-eth1"]  # the DEL that failed keeps its entry
    assert [r[:2] for r in env.netns_calls()][-2:] == [("DEL", "nodel"), ("DEL", "a")]


def test_sandbox_block_raising_still_tears_down_and_removes(env: Env, d: Path) -> None:
    m = env.manager(loopback="internal")
    with (
        pytest.raises(KeyError, match="inside"),
        m.sandbox("c1", networks=["a"], netns_dir=d) as view,
    ):
        path = view.netns
        raise KeyError("inside")
    assert not os.path.exists(path) and pinned_under(d) == []
    assert env.cached() == [] and env.netns_calls()[-1][:2] == ("DEL", "a")


def test_sandbox_that_cannot_create_its_namespace_runs_nothing(env: Env, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with (
        pytest.raises(NamespaceError, match="cannot make the network namespace directory"),
        env.manager().sandbox("c1", networks=["a"], netns_dir=tmp_path / "file" / "netns"),
    ):
        pytest.fail("the block ran")
    assert env.netns_calls() == [] and env.cached() == []


def test_async_sandbox(env: Env, d: Path) -> None:
    am = env.amanager(loopback="internal")

    async def main() -> str:
        async with am.sandbox("c1", networks=["a", "b"], netns_dir=d, parallel=True) as view:
            assert "UP" in lo_flags(view.netns)
            assert env.cached() == ["a-c1-eth0", "b-c1-eth1"]
            return view.netns

    path = asyncio.run(main())
    assert not os.path.exists(path) and pinned_under(d) == []
    assert env.cached() == []
    assert sorted(r[:2] for r in env.netns_calls()) == [
        ("ADD", "a"),
        ("ADD", "b"),
        ("DEL", "a"),
        ("DEL", "b"),
    ]

    async def failing() -> None:
        async with am.sandbox("c2", networks=["a", "bad"], netns_dir=d):
            pytest.fail("the block ran")

    with pytest.raises(SetupError):
        asyncio.run(failing())
    assert pinned_under(d) == [] and env.cached() == []


def test_async_sandbox_cancelled_during_setup_rolls_back_and_removes(env: Env, d: Path) -> None:
    am = env.amanager(loopback="internal")

    async def main() -> None:
        async def use() -> None:
            async with am.sandbox("c1", networks=["a", "slow"], netns_dir=d):
                pytest.fail("the block ran")

        task = asyncio.ensure_future(use())
        await env.await_call(
            lambda r: r.get("command") == "ADD" and r["stdin"].get("name") == "slow"
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    runs = env.netns_calls()
    assert [r[:2] for r in runs] == [("ADD", "a"), ("ADD", "slow"), ("DEL", "slow"), ("DEL", "a")]
    assert not os.path.exists(runs[0][3]) and pinned_under(d) == []
    assert env.cached() == []


def test_async_sandbox_cancelled_while_its_namespace_is_made_removes_it(
    env: Env, d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[netns.NetNS] = []
    real = netns.create

    def slow_create(*args: Any, **kw: Any) -> netns.NetNS:
        ns = real(*args, **kw)
        made.append(ns)
        time.sleep(0.5)  # in the worker thread: the task is cancelled meanwhile
        return ns

    monkeypatch.setattr(netns, "create", slow_create)
    am = env.amanager(loopback="internal")

    async def main() -> None:
        async def use() -> None:
            async with am.sandbox("c1", networks=["a"], netns_dir=d):
                pytest.fail("the block ran")

        task = asyncio.ensure_future(use())
        while not made:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(made) == 1 and made[0].closed()
    assert pinned_under(d) == []
    assert env.netns_calls() == [] and env.cached() == []
