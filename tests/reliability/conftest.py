"""Fixtures of the reliability suite (docs/reliability.md).

The suite runs real plugin processes (copies of ``tests/plugins/testplugin``)
and real runtime processes, kills them, fills and freezes file systems and
feeds every parser hostile input. Tests that need root (mounting a tmpfs,
changing user) skip for other users, unless ``LIBCNI_REQUIRE_NETNS=1`` (CI),
which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _require import unavailable

import libcni
from libcni import CNIConfig, RuntimeConf
from libcni.invoke import RawExec

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TESTPLUGIN = HERE.parent / "plugins" / "testplugin"
PLUGIN_TYPES = ("p1", "p2", "p3")


def require_root() -> None:
    if os.geteuid() != 0:
        unavailable(f"needs root (running as uid {os.geteuid()})")


def python_env() -> dict[str, str]:
    """The environment of a child Python process that imports this checkout of libcni."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
    )
    return env


# -- processes -----------------------------------------------------------------


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


# -- a plugin directory, a cache and a record of the calls -----------------------


class Env:
    """A plugin directory (``p1``..``p3``), a cache directory and a record of every plugin call."""

    def __init__(self, root: Path, cache: Path | None = None) -> None:
        self.root = root
        self.plugins = root / "bin"
        self.plugins.mkdir(exist_ok=True)
        for name in PLUGIN_TYPES:
            shutil.copy2(TESTPLUGIN, self.plugins / name)
        self.cache = cache if cache is not None else root / "cache"
        self.record = root / "record.jsonl"
        self.cni = CNIConfig([self.plugins], cache_dir=self.cache, exec=RawExec(grace=0.3))
        self.rt = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0")

    def plugin(self, type_: str = "p1", **test: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"type": type_, "record": str(self.record)}
        if test:
            conf["test"] = test
        return conf

    def conflist(
        self, *plugins: dict[str, Any], name: str = "testnet", version: str = "1.0.0"
    ) -> libcni.NetworkConfigList:
        obj = {"cniVersion": version, "name": name, "plugins": list(plugins or [self.plugin()])}
        return libcni.conf_list_from_bytes(json.dumps(obj).encode())

    def calls(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def pids(self) -> list[int]:
        """Every process the plugins recorded: the plugins themselves and their children."""
        out = []
        for call in self.calls():
            out += [call[k] for k in ("pid", "child") if isinstance(call.get(k), int)]
        return out

    def results_dir(self) -> Path:
        return self.cache / "results"

    def entry_path(self, net: str = "testnet", cid: str = "ctr1", ifname: str = "eth0") -> Path:
        return self.results_dir() / f"{net}-{cid}-{ifname}"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    kill_quietly(e.pids())


# -- a tiny tmpfs (root only) ----------------------------------------------------------


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def tiny_tmpfs(size: str = "64k", inodes: int | None = None, mode: str = "0755") -> Iterator[Path]:
    """A freshly mounted tmpfs of ``size`` (and ``inodes``), unmounted (and removed) afterwards."""
    require_root()
    if shutil.which("mount") is None or shutil.which("umount") is None:
        unavailable("needs mount(8) and umount(8)")
    where = Path(tempfile.mkdtemp(prefix="libcni-rel-"))
    os.chmod(where, 0o755)
    opts = f"size={size},mode={mode}" + (f",nr_inodes={inodes}" if inodes else "")
    try:
        _mount("-t", "tmpfs", "-o", opts, "tmpfs", str(where))
    except (subprocess.CalledProcessError, OSError) as e:
        where.rmdir()
        stderr = getattr(e, "stderr", "") or str(e)
        unavailable(f"cannot mount a tmpfs: {stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            where.rmdir()


def remount(where: Path, option: str) -> None:
    _mount("-o", f"remount,{option}", str(where))


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` with one file until it is full; return the file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        block = b"\0" * 4096
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0")
    return filler
