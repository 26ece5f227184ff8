"""The one test environment of the libcni tests: plugins, a cache, configurations, a record.

:class:`Env` is a directory holding

- ``bin/``: copies (or links) of ``tests/plugins/testplugin`` under the type
  names a test uses (``p1``, ``p2``, ``p3`` unless told otherwise);
- ``cache/``: the result cache (or another directory given);
- ``net.d/``: a configuration directory, for the manager and the CLI (made
  with ``conf=True``);
- ``record.jsonl``: one line per plugin call, appended by the test plugin
  (see its docstring), which the tests read back to see what ran, in which
  order, with which request, and which processes it started.

The ``env`` fixture (``tests/conftest.py``) makes one per test: a
:class:`Env`, or the class (and options) a module names with
``pytestmark = pytest.mark.env(cls=Class, **options)``. :class:`ManagerEnv` is
the environment of the ``NetworkManager`` tests.

The process helpers below (:func:`process_gone`, :func:`wait_gone`,
:func:`wait_for_record`...) are the barriers the concurrency tests wait on:
the plugin records its call *before* it sleeps, so a test that waits for the
record knows the plugin runs, without guessing how long starting takes.

The reliability worker scripts (``tests/reliability/*_worker.py``) run as
separate processes and import nothing from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import libcni
from libcni import AsyncCNIConfig, AsyncNetworkManager, CNIConfig, NetworkManager, RuntimeConf
from libcni.invoke import Exec, RawExec

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TESTPLUGIN = TESTS / "plugins" / "testplugin"
PLUGIN_TYPES = ("p1", "p2", "p3")


class Env:
    """A plugin directory, a cache directory, a configuration directory and a record of calls.

    ``types``: the names the test plugin is installed under (copied, or
    symlinked with ``link``); ``cache``: the cache directory (default
    ``root/cache``); ``exec``: the executor of :attr:`cni` and of
    :meth:`sync` / :meth:`aio` (default: ``RawExec()``); ``conf``: create the
    configuration directory ``root/net.d`` now.
    """

    def __init__(
        self,
        root: Path,
        types: Sequence[str] = PLUGIN_TYPES,
        *,
        cache: Path | None = None,
        link: bool = False,
        exec: Exec | None = None,
        conf: bool = False,
    ) -> None:
        self.root = root
        self.types = tuple(types)
        self.plugins = root / "bin"
        self.plugins.mkdir(exist_ok=True)
        for name in self.types:
            self.install(name, link=link)
        self.cache = cache if cache is not None else root / "cache"
        self.conf = root / "net.d"
        if conf:
            self.conf.mkdir()
        self.record = root / "record.jsonl"
        self.exec = exec
        self.cni = self.sync()
        self.rt = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0")

    def install(self, name: str, *, link: bool = False) -> Path:
        """The test plugin under the type ``name`` in the plugin directory (a copy, or a link)."""
        path = self.plugins / name
        if link:
            path.symlink_to(TESTPLUGIN)
        else:
            shutil.copy2(TESTPLUGIN, path)
        return path

    # -- the fixture's hooks ------------------------------------------------------------

    def wire(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Set what this environment needs in ``os.environ`` (undone after the test).

        The ``env`` fixture calls it once the environment is made; here: nothing.
        """

    def close(self) -> None:
        """The ``env`` fixture's clean-up after the test (here: nothing)."""

    # -- clients -----------------------------------------------------------------------

    def sync(self, **kw: Any) -> CNIConfig:
        """A ``CNIConfig`` on the plugin and cache directories."""
        kw.setdefault("exec", self.exec)
        return CNIConfig([self.plugins], cache_dir=self.cache, **kw)

    def aio(self, **kw: Any) -> AsyncCNIConfig:
        """An ``AsyncCNIConfig`` on the plugin and cache directories."""
        kw.setdefault("exec", self.exec)
        return AsyncCNIConfig([self.plugins], cache_dir=self.cache, **kw)

    # -- configurations ----------------------------------------------------------------

    def plugin(self, type_: str = "p1", **test: Any) -> dict[str, Any]:
        """A plugin configuration that records into :attr:`record`, with ``test`` behaviours."""
        conf: dict[str, Any] = {"type": type_, "record": str(self.record)}
        if test:
            conf["test"] = test
        return conf

    def conflist(
        self,
        *plugins: dict[str, Any],
        name: str = "testnet",
        version: str = "1.0.0",
        **top: Any,
    ) -> libcni.NetworkConfigList:
        """A configuration list of ``plugins`` (default: one recording ``p1``)."""
        obj = {
            "cniVersion": version,
            "name": name,
            "plugins": list(plugins) or [self.plugin()],
            **top,
        }
        return libcni.conf_list_from_bytes(json.dumps(obj).encode())

    def chain(
        self, *tests: dict[str, Any], name: str = "net", version: str = "1.0.0"
    ) -> libcni.NetworkConfigList:
        """A list of ``p1``, ``p2``... each with its ``test`` behaviours (``{}``: none)."""
        return self.conflist(
            *(self.plugin(f"p{i + 1}", **t) for i, t in enumerate(tests)),
            name=name,
            version=version,
        )

    def write(self, file: str, name: str, *plugins: dict[str, Any], version: str = "1.0.0") -> Path:
        """A ``.conflist`` file in :attr:`conf` (default: one plugin of the first type)."""
        plist = list(plugins) or [{"type": self.types[0]}]
        path = self.conf / file
        path.write_text(json.dumps({"cniVersion": version, "name": name, "plugins": plist}))
        return path

    # -- what happened -----------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """Every line of the record, in order: plugin calls, and ``child`` lines."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def calls(self) -> list[Any]:
        """Every line of the record (:meth:`records`); a subclass may say what a call is
        for its tests (:class:`ManagerEnv`: ``(command, network, ifname)``)."""
        return self.records()

    def types_called(self) -> list[tuple[str, str]]:
        """(plugin type, command) of every recorded call."""
        return [(c["stdin"]["type"], c["command"]) for c in self.records() if "command" in c]

    def pids(self) -> list[int]:
        """Every process the plugins recorded: the plugins themselves and their children."""
        out = []
        for call in self.records():
            out += [call[k] for k in ("pid", "child") if isinstance(call.get(k), int)]
        return out

    def _matching(self, match: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [r for r in self.records() if match(r)]

    def wait_for_call(
        self, match: Callable[[dict[str, Any]], bool], count: int = 1, timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        """Wait until ``count`` lines of the record ``match`` accepts are there; return them.

        A barrier the plugin signals: the test plugin records its call when
        it starts, before it sleeps or answers, and a ``child`` line right
        after it forked. Once the record is there the plugin runs, and so its
        operation holds its locks. ``match`` sees every line (use
        ``r.get("command")``).
        """
        deadline = time.monotonic() + timeout
        while len(found := self._matching(match)) < count:
            assert time.monotonic() < deadline, f"{len(found)} of {count} awaited records"
            time.sleep(0.005)
        return found

    async def await_call(
        self, match: Callable[[dict[str, Any]], bool], count: int = 1, timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        """:meth:`wait_for_call` for a coroutine: the event loop keeps turning meanwhile."""
        deadline = time.monotonic() + timeout
        while len(found := self._matching(match)) < count:
            assert time.monotonic() < deadline, f"{len(found)} of {count} awaited records"
            await asyncio.sleep(0.005)
        return found

    def kill_runtime_during(
        self, program: str, argv: Sequence[str], match: Callable[[dict[str, Any]], bool]
    ) -> None:
        """Run the Python ``program`` (a runtime) with ``argv``; once the plugin call
        ``match`` accepts has started, SIGKILL the runtime and that plugin (in its own
        process group, the runtime's death does not reach it) and wait until both are
        gone. Nothing is left running when this fails."""
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(program), *argv], env=python_env()
        )
        pids: list[int] = []
        try:
            [running] = self.wait_for_call(match)
            pids.append(running["pid"])
            proc.kill()
            proc.wait()
            os.kill(running["pid"], signal.SIGKILL)
            assert wait_gone(pids) == []
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            kill_quietly(pids)

    def results_dir(self) -> Path:
        return self.cache / "results"

    def entry_path(self, net: str = "testnet", cid: str = "ctr1", ifname: str = "eth0") -> Path:
        return self.results_dir() / f"{net}-{cid}-{ifname}"

    def cached(self) -> list[str]:
        """The file names in the cache's results directory, sorted."""
        d = self.results_dir()
        return sorted(p.name for p in d.iterdir()) if d.exists() else []


class ManagerEnv(Env):
    """The environment of the ``NetworkManager`` tests: ``testplugin`` and ``loopback``
    (links to the test plugin, so that the loopback network runs a real, recorded
    process), and the configuration directory ``net.d/``.

    Its :meth:`wire` points ``TESTPLUGIN_RECORD`` at the record: the loopback
    network's configuration is libcni's own, without a ``record`` field.
    :meth:`manager` and :meth:`amanager` make managers on these directories with
    :attr:`manager_defaults` (``max_networks=0``: every network) unless told otherwise.
    """

    #: Keyword arguments of every manager this environment makes, unless given.
    manager_defaults: Mapping[str, Any] = {"max_networks": 0}

    def __init__(self, root: Path, types: Sequence[str] = ("testplugin", "loopback")) -> None:
        super().__init__(root, types, link=True, conf=True)
        self.bin = self.plugins

    def wire(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("TESTPLUGIN_RECORD", str(self.record))

    def _manager_args(self, kw: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
        kw.setdefault("cache_dir", self.cache)
        for key, value in self.manager_defaults.items():
            kw.setdefault(key, value)
        return kw.pop("conf_dir", self.conf), kw

    def manager(self, **kw: Any) -> NetworkManager:
        """A ``NetworkManager`` on :attr:`conf` (or ``conf_dir``), the plugins and the cache."""
        conf, kw = self._manager_args(kw)
        return NetworkManager(conf, [self.plugins], **kw)

    def amanager(self, **kw: Any) -> AsyncNetworkManager:
        """:meth:`manager`'s ``AsyncNetworkManager``."""
        conf, kw = self._manager_args(kw)
        return AsyncNetworkManager(conf, [self.plugins], **kw)

    def runs(self) -> list[dict[str, Any]]:
        """The plugin runs recorded so far (VERSION probes left out)."""
        return [r for r in self.records() if r.get("command") not in (None, "VERSION")]

    def calls(self) -> list[tuple[str, str, str]]:
        """(command, network, ifname) of every recorded run (VERSION probes left out)."""
        return [self.call_of(r) for r in self.runs()]

    @staticmethod
    def call_of(run: Mapping[str, Any]) -> tuple[str, str, str]:
        """(command, network, ifname) of one recorded run."""
        return run["command"], run["stdin"].get("name", ""), run["env"].get("CNI_IFNAME", "")


class ThreadOnlyExec:
    """A real ``Exec`` (``RawExec`` underneath) without the coroutine form ``aexec_plugin``.

    Not a fake: it runs the real plugin. ``RawExec`` and ``MockExec`` both have
    ``aexec_plugin``; only an ``Exec`` without it makes ``AsyncCNIConfig``
    run the plugin in a worker thread (§6.3), the path the tests using this
    check. It records the thread of every call (``threads``) and
    ``(command, start, end)`` of every call (``log``, monotonic times).
    """

    def __init__(self) -> None:
        self.raw = RawExec()
        self.threads: set[str] = set()
        self.log: list[tuple[str, float, float]] = []

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        return self.raw.find_in_path(plugin, paths)

    def exec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        self.threads.add(threading.current_thread().name)
        start = time.monotonic()
        try:
            return self.raw.exec_plugin(path, stdin, env, timeout)
        finally:
            self.log.append((env["CNI_COMMAND"], start, time.monotonic()))


def python_env() -> dict[str, str]:
    """The environment of a child Python process that imports this checkout of libcni."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_cli(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``python -m libcni ARGS`` in a child process: :func:`python_env` and ``extra_env``."""
    environ = python_env()
    environ.update(extra_env)
    return subprocess.run(
        [sys.executable, "-m", "libcni", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )


# -- processes -----------------------------------------------------------------------


def _proc_state(pid: int) -> tuple[str, int] | None:
    """``(state, ppid)`` of ``pid`` from ``/proc``, or ``None`` when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs.

    A zombie counts as gone unless it is our own child (an unreaped plugin
    leader would be a leak of ours); orphans are reparented to init, whose job
    reaping them is.
    """
    state = _proc_state(pid)
    if state is None:
        return True
    if state[0] in ("Z", "X"):
        return state[1] != os.getpid()
    return False


def wait_gone(pids: Iterable[int], timeout: float = 3.0) -> list[int]:
    """Wait until every pid is gone; return those that are still there after ``timeout``."""
    pids = list(pids)
    end = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if not process_gone(p)]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.02)


def kill_quietly(pids: Iterable[int]) -> None:
    """SIGKILL processes a failed test may have left behind (only those it recorded)."""
    for pid in pids:
        if not process_gone(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


#: The keys of a Go libcni cache file, in the order Go writes them.
GO_CACHE_KEYS = [
    "kind",
    "containerId",
    "config",
    "ifName",
    "networkName",
    "netns",
    "cniArgs",
    "capabilityArgs",
    "result",
]


# -- another user ---------------------------------------------------------------------

SBIN_PATH = os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])


def as_nobody() -> list[str] | None:
    """The command prefix that runs a command as ``nobody`` (65534); ``[]`` when this
    process is not root already, ``None`` when ``setpriv`` is missing."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv", path=SBIN_PATH)
    if setpriv is None:
        return None
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


@contextlib.contextmanager
def readable_deps() -> Iterator[str]:
    """A world-readable copy of libcni's third-party imports (attrs), for ``nobody``'s
    ``PYTHONPATH``; removed at the end."""
    import tempfile

    import attr
    import attrs

    where = tempfile.mkdtemp(prefix="libcni-test-deps-")
    try:
        os.chmod(where, 0o755)
        for module in (attr, attrs):
            assert module.__file__ is not None
            src = os.path.dirname(module.__file__)
            shutil.copytree(src, os.path.join(where, os.path.basename(src)))
        for root, dirs, files in os.walk(where):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


# -- network namespaces ------------------------------------------------------------------


def thread_netns() -> int:
    """The inode of the calling thread's network namespace."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def mounts_under(path: Path | str) -> list[str]:
    """The mount points at or under ``path`` (from /proc/self/mountinfo), in mount order."""
    root = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return [p for p in points if p == root or p.startswith(root + "/")]


def unmount_under(path: Path | str) -> None:
    """Undo every mount at or under ``path``, the last made first (a test's clean-up)."""
    for point in reversed(mounts_under(path)):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
