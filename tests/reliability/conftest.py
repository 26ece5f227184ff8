"""Fixtures of the reliability suite (docs/reliability.md).

The suite runs real plugin processes (copies of ``tests/plugins/testplugin``)
and real runtime processes, kills them, fills and freezes file systems and
feeds every parser hostile input. Tests that need root (mounting a tmpfs,
changing user) skip for other users, unless ``LIBCNI_REQUIRE_NETNS=1`` (CI),
which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import harness
from _require import unavailable
from harness import kill_quietly

from libcni.invoke import RawExec

HERE = Path(__file__).resolve().parent


def require_root() -> None:
    if os.geteuid() != 0:
        unavailable(f"needs root (running as uid {os.geteuid()})")


def without_dac_override(cmd: list[str]) -> list[str]:
    """``cmd``, run without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH when we are root.

    Root ignores file modes through these capabilities: dropped (with
    setpriv), the modes a test sets apply to ``cmd`` too. Running as nobody
    would be the other way, but nobody often cannot read the interpreter's
    packages.
    """
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        unavailable("needs setpriv(1) to drop CAP_DAC_OVERRIDE")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]


class Env(harness.Env):
    """The tests' environment (``tests/harness.py``), plugins killed 0.3 s after SIGTERM;
    after the test, whatever process its plugins started and left running is killed."""

    def __init__(self, root: Path, cache: Path | None = None) -> None:
        super().__init__(root, cache=cache, exec=RawExec(grace=0.3))

    def close(self) -> None:
        kill_quietly(self.pids())


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
