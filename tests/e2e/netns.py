"""Helpers of the end-to-end tests: throwaway network namespaces, commands run in them,
the driver that runs libcni inside the "host" namespace, and configuration builders.

Nothing here touches the machine's own network namespace: every ``ip`` command
names a namespace (``ip -n NAME`` / ``ip netns exec NAME``), and every
namespace is named ``libcni-e2e-...`` so that leftovers are easy to spot.

The namespaces are created and removed by ``libcni.netns`` (so every run of
these tests exercises it), pinned in ``/run/netns`` where ``ip`` finds them.
Commands still run inside through ``ip netns exec``: besides entering the
namespace, it mounts a ``/sys`` of that namespace, which the plugins read
(``NetNS.enter`` moves a thread only).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from libcni import netns

PREFIX = "libcni-e2e-"
NETNS_DIR = Path("/run/netns")
REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "driver.py"
PLUGIN_DIR = "/usr/lib/cni"
REQUIRED_PLUGINS = (
    "bridge", "host-local", "portmap", "tuning", "firewall", "loopback", "ptp", "bandwidth",
)  # fmt: skip
REQUIRED_TOOLS = ("ip", "iptables", "iptables-save", "tc")

#: A tag unique to this test session, in every namespace name it creates:
#: ``<pid of the test process>-<random>``.
SESSION = f"{os.getpid()}-{secrets.token_hex(2)}"


class CommandError(AssertionError):
    """A helper command failed; the message has everything needed to see why."""


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    timeout: float = 30.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``, capture its output, and (``check``) fail with all of it if it fails."""
    proc = subprocess.run(
        list(argv),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        check=False,
    )
    if check and proc.returncode != 0:
        raise CommandError(
            f"{' '.join(argv)} exited {proc.returncode}\n"
            f"stdout: {proc.stdout.strip()}\nstderr: {proc.stderr.strip()}"
        )
    return proc


class Netns:
    """A named network namespace (``/run/netns/NAME``)."""

    def __init__(self, name: str, pinned: netns.NetNS | None = None) -> None:
        self.name = name
        self.path = str(NETNS_DIR / name)
        self._procs: list[subprocess.Popen[str]] = []
        #: The namespace as ``libcni.netns`` made it (``None``: one found by name).
        self.pinned = pinned

    def __repr__(self) -> str:
        return f"Netns({self.name!r})"

    @classmethod
    def create(cls, kind: str) -> Netns:
        """Create ``libcni-e2e-<kind>-<session>-<random>`` with its loopback up."""
        name = f"{PREFIX}{kind}-{SESSION}-{secrets.token_hex(3)}"
        ns = cls(name, netns.create(name, NETNS_DIR))
        try:
            ns.ip("link", "set", "lo", "up")
        except BaseException:
            ns.delete()
            raise
        return ns

    # -- commands inside -----------------------------------------------

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ip -n NAME ARGS...``."""
        return run(["ip", "-n", self.name, *args], check=check)

    def exec(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 30.0, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace and wait for it."""
        return run(["ip", "netns", "exec", self.name, *argv], check=check, timeout=timeout, **kw)

    def spawn(self, argv: Sequence[str]) -> subprocess.Popen[str]:
        """Start ``argv`` inside the namespace; it is killed when the namespace is deleted."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.name, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._procs.append(proc)
        return proc

    # -- state -----------------------------------------------------------

    def link(self, ifname: str) -> dict[str, Any] | None:
        """The ``ip -j link show`` object of ``ifname``, or ``None`` when it does not exist."""
        proc = self.ip("-j", "link", "show", "dev", ifname, check=False)
        if proc.returncode != 0:
            if "does not exist" in proc.stderr:
                return None
            raise CommandError(f"ip -n {self.name} link show dev {ifname}: {proc.stderr.strip()}")
        links: list[dict[str, Any]] = json.loads(proc.stdout)
        return links[0] if links else None

    def addresses(self, ifname: str, family: str = "inet") -> list[str]:
        """The ``family`` addresses of ``ifname`` as ``"A.B.C.D/len"`` (empty if it is absent)."""
        proc = self.ip("-j", "addr", "show", "dev", ifname, check=False)
        if proc.returncode != 0:
            return []
        out = []
        for link in json.loads(proc.stdout):
            for a in link.get("addr_info", []):
                if a.get("family") == family:
                    out.append(f"{a['local']}/{a['prefixlen']}")
        return out

    def pids(self) -> list[int]:
        proc = run(["ip", "netns", "pids", self.name], check=False)
        return [int(p) for p in proc.stdout.split() if p.isdigit()]

    def delete(self) -> None:
        """Kill every process in the namespace, then delete it (absent is fine)."""
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                proc.communicate(timeout=5)
        self._procs.clear()
        if not (NETNS_DIR / self.name).exists():
            return
        for _ in range(3):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        if self.pinned is not None:
            self.pinned.remove()
        else:
            run(["ip", "netns", "del", self.name], check=False)


def e2e_namespaces() -> list[str]:
    """Every ``libcni-e2e-*`` namespace, of any test session."""
    out = run(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(PREFIX)]


def session_namespaces() -> list[str]:
    """The namespaces of this test session that still exist."""
    return [n for n in e2e_namespaces() if f"-{SESSION}-" in n]


def orphaned_namespaces() -> list[str]:
    """The namespaces of earlier sessions whose test process is gone (killed, say)."""
    orphans = []
    for name in e2e_namespaces():
        parts = name[len(PREFIX) :].split("-")  # kind, pid, session, random
        if len(parts) != 4 or not parts[1].isdigit() or int(parts[1]) == os.getpid():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            orphans.append(name)
        except PermissionError:
            pass
    return orphans


# -- TCP between namespaces --------------------------------------------

_SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(float(sys.argv[3]))
print("listening", flush=True)
c, peer = s.accept()
c.settimeout(5)
data = c.recv(100)
c.sendall(b"pong:" + data)
c.close()
print("served", peer[0], flush=True)
"""

_CLIENT = """
import socket, sys, time
end = time.monotonic() + float(sys.argv[3])
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
        break
    except OSError:
        if time.monotonic() > end:
            raise
        time.sleep(0.1)
c.settimeout(5)
c.sendall(sys.argv[4].encode())
print(c.recv(100).decode(), flush=True)
"""


def start_tcp_server(
    ns: Netns, address: str, port: int, timeout: float = 10.0
) -> subprocess.Popen[str]:
    """Serve one connection on ``address:port`` inside ``ns``: reply ``pong:<what it got>``."""
    proc = ns.spawn([sys.executable, "-c", _SERVER, address, str(port), str(timeout)])
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 10)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "listening":
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise CommandError(f"TCP server on {address}:{port} in {ns.name} did not start: {err}")
    return proc


def tcp_exchange(ns: Netns, address: str, port: int, message: str, timeout: float = 5.0) -> str:
    """Connect from inside ``ns`` to ``address:port``, send ``message``, return the reply."""
    proc = ns.exec(
        [sys.executable, "-c", _CLIENT, address, str(port), str(timeout), message],
        timeout=timeout + 10,
        check=False,
    )
    if proc.returncode != 0:
        raise CommandError(
            f"TCP client in {ns.name} to {address}:{port} failed: {proc.stderr.strip()}"
        )
    return proc.stdout.strip()


# -- the driver --------------------------------------------------------


class Driver:
    """Runs ``driver.py`` (libcni) inside the host namespace, one operation per process."""

    def __init__(self, host: Netns, cache_dir: Path, path: Sequence[str]) -> None:
        self.host = host
        self.cache_dir = cache_dir
        self.path = list(path)

    def call(
        self,
        op: str,
        conflist: Mapping[str, Any] | None = None,
        *,
        container: Netns | None = None,
        container_id: str = "",
        ifname: str = "eth0",
        capability_args: Mapping[str, Any] | None = None,
        args: Sequence[tuple[str, str]] = (),
        valid_attachments: Sequence[tuple[str, str]] | None = None,
        path: Sequence[str] | None = None,
        plugin: str = "",
        api: str = "sync",
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Perform ``op``; return the driver's reply (``{"ok": ..., ...}``)."""
        request: dict[str, Any] = {
            "op": op,
            "conflist": dict(conflist) if conflist is not None else None,
            "container_id": container_id,
            "netns": container.path if container is not None else "",
            "ifname": ifname,
            "capability_args": dict(capability_args or {}),
            "args": [list(a) for a in args],
            "valid_attachments": None
            if valid_attachments is None
            else [{"container_id": c, "ifname": i} for c, i in valid_attachments],
            "cache_dir": str(self.cache_dir),
            "path": list(path) if path is not None else self.path,
            "plugin": plugin,
            "api": api,
        }
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        proc = self.host.exec(
            [sys.executable, str(DRIVER)],
            input=json.dumps(request),
            timeout=timeout,
            check=False,
            env=env,
        )
        try:
            reply: dict[str, Any] = json.loads(proc.stdout)
        except ValueError:
            raise CommandError(
                f"driver {op} gave no JSON reply (exit {proc.returncode})\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            ) from None
        reply["stderr"] = proc.stderr
        return reply

    def ok(self, op: str, conflist: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """As :meth:`call`, and fail the test unless the operation succeeded."""
        reply = self.call(op, conflist, **kw)
        if not reply.get("ok"):
            raise AssertionError(f"{op} failed: {json.dumps(reply.get('error'), indent=1)}")
        return reply

    def error(
        self, op: str, conflist: Mapping[str, Any] | None = None, **kw: Any
    ) -> dict[str, Any]:
        """As :meth:`call`, and fail the test unless the operation failed; return the error."""
        reply = self.call(op, conflist, **kw)
        if reply.get("ok"):
            raise AssertionError(f"{op} succeeded, expected an error: {reply}")
        err: dict[str, Any] = reply["error"]
        return err


# -- configuration -----------------------------------------------------


def host_local(subnet: str, data_dir: Path) -> dict[str, Any]:
    """A ``host-local`` IPAM section with its state in ``data_dir``."""
    return {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(data_dir)}


def bridge(name: str, subnet: str, data_dir: Path) -> dict[str, Any]:
    """A ``bridge`` plugin: gateway on the bridge, no masquerading, ``host-local`` IPAM."""
    return {
        "type": "bridge",
        "bridge": name,
        "isGateway": True,
        "ipMasq": False,
        "ipam": host_local(subnet, data_dir),
    }


def allocated(data_dir: Path, network: str) -> set[str]:
    """The addresses ``host-local`` has on record for ``network`` (its files named by IP)."""
    d = data_dir / network
    if not d.is_dir():
        return set()
    return {p.name for p in d.iterdir() if p.name[:1].isdigit()}


# -- recording shims ---------------------------------------------------

_SHIM = '''#!{python}
"""Recording shim: log the call, then run the real plugin with the same stdin."""
import json, os, sys, tempfile
data = sys.stdin.buffer.read()
try:
    stdin = json.loads(data)
except ValueError:
    stdin = data.decode(errors="replace")
entry = {{"type": {type!r}, "command": os.environ.get("CNI_COMMAND", ""),
         "env": {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}},
         "stdin": stdin}}
fd = os.open({record!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(fd, (json.dumps(entry) + "\\n").encode())
os.close(fd)
f = tempfile.TemporaryFile()
f.write(data)
f.flush()
f.seek(0)
os.dup2(f.fileno(), 0)
os.execv({real!r}, [{real!r}] + sys.argv[1:])
'''


def install_shims(tmp_path: Path, plugins: Sequence[str]) -> tuple[Path, Path]:
    """Write recording shims of ``plugins`` into ``tmp_path/shims``; return (dir, record file).

    Each shim appends ``{"type", "command", "env": {CNI_*}, "stdin"}`` as a JSON
    line to the record file, then execs the real plugin from ``PLUGIN_DIR``.
    Put the directory before ``PLUGIN_DIR`` in the path (also what delegated
    IPAM plugins are looked up in, through ``CNI_PATH``).
    """
    shim_dir = tmp_path / "shims"
    shim_dir.mkdir(exist_ok=True)
    record = tmp_path / "calls.jsonl"
    record.touch()
    for plugin in plugins:
        shim = shim_dir / plugin
        shim.write_text(
            _SHIM.format(
                python=sys.executable,
                type=plugin,
                record=str(record),
                real=os.path.join(PLUGIN_DIR, plugin),
            )
        )
        shim.chmod(0o755)
    return shim_dir, record


def read_records(record: Path) -> list[dict[str, Any]]:
    """The calls the shims recorded, oldest first."""
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
