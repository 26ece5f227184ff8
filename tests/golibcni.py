"""Building the Go programs of ``tests/go`` against Debian's Go libcni (offline).

Shared by the interoperability tests (``test_go_interop.py``) and the kill test
(``reliability/killtest.py``, also run as a script): no pytest here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GO_SRC = Path(__file__).resolve().parent / "go"
GOPATH = "/usr/share/gocode"  # where Debian's golang-*-dev packages put Go sources
GO_LIBCNI = Path(GOPATH) / "src/github.com/containernetworking/cni/libcni"


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def go13_scale() -> str | None:
    """``go_scale`` against Go libcni 1.3 (its ``gc`` command: ``GCNetworkList``), built by
    ``benchmarks/scale.py`` (in a child: it reads its own command line when imported), or
    ``None`` when Go or the v1.3.0 source (``git archive v1.3.0`` of
    containernetworking/cni in ``benchmarks/build/cni-v1.3.0``) is missing."""
    import sys

    code = "import sys; sys.argv = ['scale.py']; import scale; print(scale.build_go13())"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BENCHMARKS,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = proc.stdout.split()
    built = lines[-1] if proc.returncode == 0 and lines else ""
    return built if os.path.isabs(built) and os.path.exists(built) else None


class GoBuildError(RuntimeError):
    """Go is missing, or ``go build`` failed (its stderr in the message)."""


def go_available() -> bool:
    """Go and the sources of its libcni are installed."""
    return shutil.which("go") is not None and GO_LIBCNI.is_dir()


def go_build(program: str) -> str:
    """Build ``tests/go/<program>`` in GOPATH mode (no network); return the binary's path."""
    go = shutil.which("go")
    if go is None:
        raise GoBuildError("go is not installed")
    build = GO_SRC / "build"
    build.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": GOPATH,
        "GOFLAGS": "",
        "GOCACHE": str(build / "gocache"),
    }
    out = build / program
    proc = subprocess.run(
        [go, "build", "-o", str(out), f"./{program}"],
        cwd=GO_SRC,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise GoBuildError(f"go build ./{program} failed:\n{proc.stderr}")
    return str(out)
