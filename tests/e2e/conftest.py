"""Fixtures of the end-to-end tests.

Every test session creates a throwaway "host" network namespace; libcni (through
``driver.py``) and so the plugins run inside it; every container gets its own
namespace. All of them are deleted afterwards, also when a test fails, and the
machine's own network namespace is never touched.

Requirements: root, ``ip``, ``iptables``/``iptables-save`` and the reference
plugins in ``/usr/lib/cni``. When one is missing the tests are skipped with the
reason, unless ``LIBCNI_REQUIRE_NETNS=1`` (CI), which turns the skip into a
failure.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _require import unavailable

from libcni import NamespaceError

from .netns import (
    PLUGIN_DIR,
    PREFIX,
    REPO_ROOT,
    REQUIRED_PLUGINS,
    REQUIRED_TOOLS,
    CommandError,
    Driver,
    Netns,
    orphaned_namespaces,
    run,
    session_namespaces,
)

_subnets = itertools.count(1)
#: Every bridge these tests create is named ``e2eb<hex><n>``.
BRIDGE_PREFIX = "e2eb"


def missing_requirements() -> list[str]:
    missing = []
    if os.geteuid() != 0:
        missing.append(f"root (running as uid {os.geteuid()})")
    missing += [f"the {tool!r} command" for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    plugins = [p for p in REQUIRED_PLUGINS if not os.access(os.path.join(PLUGIN_DIR, p), os.X_OK)]
    if plugins:
        missing.append(
            f"the reference CNI plugins {', '.join(plugins)} in {PLUGIN_DIR} "
            "(Debian: containernetworking-plugins)"
        )
    return missing


@pytest.fixture(scope="session")
def host_netns() -> Iterator[Netns]:
    """The session's throwaway "host" namespace, where libcni and the plugins run."""
    missing = missing_requirements()
    if missing:
        unavailable("e2e tests need " + "; ".join(missing))
    for name in orphaned_namespaces():  # left by a session that was killed
        Netns(name).delete()
    try:
        host = Netns.create("host")
    except (CommandError, NamespaceError) as e:
        unavailable(f"e2e tests cannot create a network namespace: {e}")
    try:
        yield host
    finally:
        # Deleting the namespace takes its bridges, veths and iptables state along.
        host.delete()
        for name in session_namespaces():  # containers a crashed fixture left behind
            Netns(name).delete()
        left = session_namespaces()
        if left:
            raise AssertionError(f"e2e namespaces left behind: {left}")


class E2E:
    """One test's world: the host namespace, the driver, fresh names and directories."""

    def __init__(self, host: Netns, tmp_path: Path) -> None:
        self.host = host
        self.tmp_path = tmp_path
        tag = secrets.token_hex(3)
        self.network = f"e2e-{tag}"
        self.data_dir = tmp_path / "host-local"
        self.cache_dir = tmp_path / "cache"
        self.tuning_dir = tmp_path / "tuning"
        self.driver = Driver(host, self.cache_dir, [PLUGIN_DIR])
        self._tag = tag
        self._bridges = itertools.count(1)
        self.bridges: list[str] = []
        self.containers: list[Netns] = []

    def subnet(self) -> str:
        """A /24 no other test of the session uses: ``10.222.N.0/24``."""
        n = next(_subnets)
        assert n < 256, "too many e2e subnets in one session"
        return f"10.222.{n}.0/24"

    def bridge_name(self) -> str:
        """A bridge name unique to this test (at most 15 characters)."""
        name = f"{BRIDGE_PREFIX}{self._tag}{next(self._bridges)}"
        assert len(name) <= 15
        self.bridges.append(name)
        return name

    def container(self) -> Netns:
        """A fresh container namespace, deleted at the end of the test."""
        ns = Netns.create("ctr")
        self.containers.append(ns)
        return ns

    def container_id(self, label: str) -> str:
        return f"e2e-{self._tag}-{label}"

    def cache_entry(self, network: str, container_id: str, ifname: str = "eth0") -> Path:
        """Where libcni keeps the attachment (behaviour.md §7)."""
        return self.cache_dir / "results" / f"{network}-{container_id}-{ifname}"

    def iptables_save(self, table: str | None = None) -> str:
        argv = ["iptables-save"] + (["-t", table] if table else [])
        return self.host.exec(argv).stdout

    def cleanup(self) -> None:
        for ns in self.containers:
            ns.delete()
        self.containers.clear()
        for name in self.bridges:
            self.host.ip("link", "del", name, check=False)


class HostRuntime:
    """A runtime in the host namespace: the ``libcni`` command line or a short Python
    program, reading the networks of its own configuration directory (``conf``), the
    reference plugins and the test's cache."""

    def __init__(self, e2e: E2E) -> None:
        self.e2e = e2e
        self.conf = e2e.tmp_path / "net.d"
        self.conf.mkdir()

    def write(self, file: str, name: str, plugins: list[dict[str, Any]]) -> None:
        """A network configuration list ``file`` in ``conf``."""
        conf = {"cniVersion": "1.0.0", "name": name, "plugins": plugins}
        (self.conf / file).write_text(json.dumps(conf))

    def env(self, **extra: str) -> dict[str, str]:
        """The runtime's environment: none of the test process's CNI_ARGS, CAP_ARGS or
        CNI_IFNAME (the command line would read them), then ``extra``."""
        env = dict(os.environ)
        env.update(
            PYTHONPATH=str(REPO_ROOT),
            NETCONFPATH=str(self.conf),
            CNI_PATH=PLUGIN_DIR,
            CNI_CACHE_DIR=str(self.e2e.cache_dir),
        )
        for var in ("CAP_ARGS", "CNI_ARGS", "CNI_IFNAME"):
            env.pop(var, None)
        env.update(extra)
        return env

    def cli(self, *argv: str, **extra: str) -> Any:
        """``python -m libcni ARGV`` (its exit status unchecked)."""
        return self.host_exec([sys.executable, "-m", "libcni", *argv], 120, **extra)

    def python(self, code: str, *argv: str) -> Any:
        """The program ``code``, which must succeed."""
        proc = self.host_exec([sys.executable, "-c", textwrap.dedent(code), *argv], 180)
        assert proc.returncode == 0, proc.stderr
        return proc

    def host_exec(self, argv: list[str], timeout: float, **extra: str) -> Any:
        return self.e2e.host.exec(argv, check=False, env=self.env(**extra), timeout=timeout)


@pytest.fixture
def e2e(host_netns: Netns, tmp_path: Path) -> Iterator[E2E]:
    world = E2E(host_netns, tmp_path)
    try:
        yield world
    finally:
        world.cleanup()


@pytest.fixture(scope="session", autouse=True)
def _no_machine_bridges_added() -> Iterator[None]:
    """The machine's own namespace must not gain any link because of these tests."""
    before = _machine_links()
    yield
    added = [name for name in _machine_links() - before if name.startswith((BRIDGE_PREFIX, PREFIX))]
    assert not added, f"e2e tests created links in the machine's namespace: {added}"


def _machine_links() -> set[str]:
    if shutil.which("ip") is None:
        return set()
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}
