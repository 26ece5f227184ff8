#!/usr/bin/env python3
"""The libcni demo (``./scripts/demo.sh``): attach a throwaway namespace with the real
reference plugins, through the public API of the ``libcni`` installed.

The demo never touches the machine's own network namespace. The outer part
(:func:`run`) checks the prerequisites, creates two network namespaces
(:func:`libcni.netns.create`), a "host" one and a "container" one, and re-runs
this script inside the host one (``ip netns exec <host> python demo.py
--inside ...``). The inner part (:func:`run_inside`) does the library calls:
ADD (bridge + host-local + portmap + tuning), CHECK, a look at the cache
entry, DEL; then what a runtime does with the :class:`~libcni.NetworkManager`
(``loopback="internal"``): :meth:`~libcni.NetworkManager.sandbox` creates a
container namespace, brings ``lo`` up in it and attaches two networks (the
bridge chain and ptp); the merged and the kernel's view; teardown and the
namespace removed; and a sandbox whose third network fails, rolled back and
removed. Whatever happens (success, failure, Ctrl-C, SIGTERM) the outer part
then removes both namespaces, which takes the bridge, the veth pair and the
port-mapping rules with them, and the temporary directory (plugin data,
cache, the sandboxes' namespace directory). On success it ends with the commands that try the command line the same
way (:func:`try_commands`), on the example network of ``examples/net.d``; the
cache is removed with the temporary directory unless ``--cache-dir`` names one.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

import libcni
from libcni import CNIConfig, NetworkConfigList, NetworkManager, RuntimeConf, netns
from libcni.cache import ResultCache
from libcni.capabilities import PortMapping, RuntimeConfig
from libcni.conf import conf_list_from_bytes
from libcni.errors import NamespaceError, SetupError
from libcni.invoke import DEFAULT_PLUGIN_DIRS
from libcni.netns import NetNS

__all__ = [
    "DEMO_CAPABILITY_ARGS",
    "DEMO_CONFLIST",
    "DEMO_NETWORK",
    "DEMO_PLUGINS",
    "DEMO_SUBNET",
    "INSTALL_COMMAND",
    "NETNS_PREFIX",
    "demo_conflist",
    "demo_plugin_path",
    "main",
    "missing_prerequisites",
    "prerequisites_message",
    "run",
    "run_inside",
    "summarize_result",
    "try_commands",
]

DEMO_NETWORK = "libcni-demo"
DEMO_SUBNET = "10.88.77.0/24"
DEMO_GATEWAY = "10.88.77.1"
DEMO_PTP_SUBNET = "10.88.78.0/24"
DEMO_BROKEN_SUBNET = "10.88.79.0/24"
DEMO_PLUGINS = ("bridge", "host-local", "portmap", "tuning")
INSTALL_COMMAND = "apt-get install -y containernetworking-plugins iproute2 iptables"
NETNS_PREFIX = "libcni-demo-"
NETNS_DIR = "/run/netns"

#: The demo network. ``@BRIDGE@``, ``@DATADIR@`` and ``@TUNINGDIR@`` are filled
#: in for each run by :func:`demo_conflist` (a bridge name unique to the run,
#: and host-local's leases and tuning's saved state in the run's temporary
#: directory, so that nothing is left in the machine's /var/lib/cni or /run/cni).
DEMO_CONFLIST = """\
{
  "cniVersion": "1.0.0",
  "name": "libcni-demo",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "@BRIDGE@",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.88.77.0/24", "gateway": "10.88.77.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "@DATADIR@"
      },
      "dns": {"nameservers": ["10.88.77.1"], "search": ["demo.libcni.test"]}
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true},
      "snat": true
    },
    {
      "type": "tuning",
      "capabilities": {"mac": true},
      "sysctl": {"net.core.somaxconn": "1024"},
      "dataDir": "@TUNINGDIR@"
    }
  ]
}
"""

#: What the runtime asks of the plugins that declare these capabilities
#: (the ``mac`` is chosen per run).
DEMO_CAPABILITY_ARGS: dict[str, Any] = {
    "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
}


class DemoError(Exception):
    """A step of the demo failed (the message says which and why)."""


class _Interrupted(BaseException):
    """Raised by the signal handler so that the clean-up runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """SIGINT and SIGTERM handling of the outer part.

    A signal raises :class:`_Interrupted` so that the clean-up runs, except
    while :meth:`deferred` (it is raised at the end of the block, so that a
    process or directory just created is recorded first) and once the
    clean-up has started (nothing may stop it).
    """

    def __init__(self) -> None:
        self.cleaning = False
        self._deferring = False
        self._pending = 0

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.cleaning:
            return
        if self._deferring:
            self._pending = self._pending or signum
            return
        raise _Interrupted(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending:
            raise _Interrupted(self._pending)


# -- configuration -------------------------------------------------------------


def demo_conflist(bridge: str, data_dir: str, tuning_dir: str) -> bytes:
    """The bytes of :data:`DEMO_CONFLIST` with this run's bridge name and state directories."""
    text = DEMO_CONFLIST
    for placeholder, value in (
        ("@BRIDGE@", bridge),
        ("@DATADIR@", data_dir),
        ("@TUNINGDIR@", tuning_dir),
    ):
        text = text.replace(placeholder, json.dumps(value)[1:-1])
    return text.encode()


def demo_plugin_path(environ: Mapping[str, str]) -> list[str]:
    """The plugin directories: ``$CNI_PATH`` if set, else /opt/cni/bin and /usr/lib/cni.

    Of the two defaults, only those that exist (both if neither does).
    """
    from_env = [d for d in environ.get("CNI_PATH", "").split(":") if d]
    if from_env:
        return from_env
    existing = [d for d in DEFAULT_PLUGIN_DIRS if os.path.isdir(d)]
    return existing or list(DEFAULT_PLUGIN_DIRS)


def _find_tool(name: str, environ: Mapping[str, str]) -> str | None:
    # A non-root PATH often lacks the sbin directories where ip and iptables live.
    search = os.pathsep.join(
        [environ.get("PATH", os.defpath), "/usr/local/sbin", "/usr/sbin", "/sbin"]
    )
    return shutil.which(name, path=search)


def _has_plugin(name: str, path: Sequence[str]) -> bool:
    for directory in path:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return True
    return False


def missing_prerequisites(
    plugin_path: Sequence[str],
    environ: Mapping[str, str] | None = None,
    *,
    euid: int | None = None,
) -> list[str]:
    """What the demo needs and does not have, one sentence each (empty: all there).

    Root (network namespaces need it), the ``ip`` command (iproute2),
    ``iptables`` (the portmap plugin uses it) and the plugins of
    :data:`DEMO_PLUGINS` in ``plugin_path``.
    """
    env = os.environ if environ is None else environ
    missing: list[str] = []
    if (os.geteuid() if euid is None else euid) != 0:
        missing.append(
            "root privileges: creating network namespaces needs root "
            "(run it as root, e.g. sudo ./scripts/demo.sh)"
        )
    if _find_tool("ip", env) is None:
        missing.append("the ip command (Debian package iproute2)")
    if _find_tool("iptables", env) is None:
        missing.append("the iptables command, used by the portmap plugin (Debian package iptables)")
    plugins = [p for p in DEMO_PLUGINS if not _has_plugin(p, plugin_path)]
    if plugins:
        missing.append(
            f"the CNI plugin{'s' if len(plugins) > 1 else ''} {', '.join(plugins)}, searched in "
            f"{':'.join(plugin_path)} (Debian package containernetworking-plugins; "
            "set CNI_PATH to use other directories)"
        )
    return missing


def prerequisites_message(missing: Sequence[str]) -> str:
    """The text printed when something is missing: what, and the command that installs it."""
    lines = ["libcni demo: cannot run, missing:"]
    lines += [f"  - {item}" for item in missing]
    installable = [m for m in missing if not m.startswith("root privileges")]
    if installable:
        lines.append("Install what is missing with:")
        lines.append(f"  {INSTALL_COMMAND}")
    return "\n".join(lines) + "\n"


# -- the outer part: namespaces, the inner run, clean-up -----------------------


def _run_cmd(cmd: Sequence[str]) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        why = proc.stderr.strip() or f"exit status {proc.returncode}"
        raise DemoError(f"{' '.join(cmd)} failed: {' '.join(why.splitlines())}")


def _stop(child: subprocess.Popen[bytes] | None) -> None:
    if child is None or child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(3)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _cleanup(namespaces: Sequence[NetNS], workdir: str | None, out: TextIO, err: TextIO) -> bool:
    problems: list[str] = []
    removed: list[str] = []
    for ns in namespaces:
        if ns.closed():
            continue
        try:
            ns.remove()
            removed.append(ns.name)
        except NamespaceError as e:
            problems.append(str(e))
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)
        if os.path.exists(workdir):
            problems.append(f"could not remove {workdir}")
    for problem in problems:
        err.write(f"libcni demo: clean-up: {problem}\n")
    what = ", ".join(f"namespace {n}" for n in removed)
    if workdir is not None:
        what = f"{what}, {workdir}" if what else workdir
    out.write(f"\nCleaned up: {what or 'nothing to remove'}.\n")
    out.flush()
    return not problems


def _package_root() -> str:
    """The directory that holds the ``libcni`` package (for the child's ``PYTHONPATH``)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(libcni.__file__)))


def run(
    environ: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    timeout: float | None = None,
    cache_dir: str | None = None,
) -> int:
    """The whole demo: check, create the namespaces, run :func:`run_inside` there, clean up.

    ``cache_dir``: the cache directory to use (default: one in the run's
    scratch directory, removed at the end).
    """
    plugin_path = demo_plugin_path(environ)
    missing = missing_prerequisites(plugin_path, environ)
    if missing:
        err.write(prerequisites_message(missing))
        return 1
    if cache_dir is not None:
        cache_dir = os.path.abspath(cache_dir)
    state = _Outer(secrets.token_hex(3), plugin_path)
    status = 1
    signals = _Signals()
    old_handlers: dict[int, Any] = {}
    try:
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                old_handlers[signum] = signal.signal(signum, signals.handler)
            status = _run_outer(state, signals, environ, out, err, timeout, cache_dir)
        except _Interrupted as e:
            err.write(
                f"\nlibcni demo: interrupted by {signal.Signals(e.signum).name}; cleaning up\n"
            )
            status = 128 + e.signum
        except (DemoError, NamespaceError, OSError) as e:
            err.write(f"libcni demo: {e}\n")
            status = 1
    except _Interrupted as e:  # a second signal while the first was being reported
        status = 128 + e.signum
    finally:
        signals.cleaning = True
        try:
            _stop(state.child)
            if not _cleanup(state.created, state.workdir, out, err):
                status = status or 1
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)
    if status == 0:
        out.write("\n" + try_commands(_libcni_command()))
        out.flush()
    return status


class _Outer:
    """What the outer part of the demo made, for its clean-up."""

    def __init__(self, tag: str, plugin_path: list[str]) -> None:
        self.tag = tag
        self.plugin_path = plugin_path
        self.host_ns = f"{NETNS_PREFIX}host-{tag}"
        self.ctr_ns = f"{NETNS_PREFIX}ctr-{tag}"
        self.created: list[NetNS] = []
        self.workdir: str | None = None
        self.child: subprocess.Popen[bytes] | None = None


def _run_outer(
    state: _Outer,
    signals: _Signals,
    environ: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    timeout: float | None,
    cache_dir: str | None,
) -> int:
    """Create the scratch directory and the namespaces, run the inner part in the host one;
    its exit status (0 or 1). What is made is recorded in ``state`` before any signal."""
    ip = _find_tool("ip", environ)
    assert ip is not None
    host_ns, ctr_ns = state.host_ns, state.ctr_ns
    with signals.deferred():
        state.workdir = workdir = tempfile.mkdtemp(prefix="libcni-demo-")
    for name in (ctr_ns, host_ns):
        with signals.deferred():  # a namespace made is recorded before a signal
            state.created.append(netns.create(name, NETNS_DIR))
    ctr = state.created[0]
    _run_cmd([ip, "-n", host_ns, "link", "set", "lo", "up"])
    cache_text = f"cache in {cache_dir}" if cache_dir else "the cache among them"
    out.write(
        "libcni demo: the machine's own network is left alone; everything happens in\n"
        f'  {host_ns:<26} a throwaway "host" namespace, where the plugins run\n'
        f"  {ctr_ns:<26} the container's namespace\n"
        f"  plugins from {':'.join(state.plugin_path)}, scratch files in {workdir} "
        f"({cache_text})\n\n"
    )
    out.flush()
    env = dict(environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [_package_root(), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    tag = state.tag
    cmd = [
        ip, "netns", "exec", host_ns,
        sys.executable, os.path.abspath(__file__), "--inside",
        "--netns", ctr.path,
        "--workdir", workdir,
        "--bridge", f"cni-demo-{tag}",
        "--cni-path", ":".join(state.plugin_path),
        "--container-id", f"libcni-demo-{tag}",
    ]  # fmt: skip
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    with signals.deferred():
        state.child = subprocess.Popen(cmd, env=env)
    status = state.child.wait()
    if status != 0:
        err.write(f"libcni demo: failed (exit status {status}); cleaning up\n")
        return 1
    return 0


# -- what to try next ----------------------------------------------------------

#: Where the command line's own files go in :func:`try_commands` (a tmpfs: gone at reboot).
TRY_STATE = "/run/libcni-try"


#: The example network next to this script (``examples/net.d/10-trynet.conflist``).
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "net.d")


def _libcni_command() -> str:
    """How to run this ``libcni``: the console script next to this Python, else ``python -m libcni``."""
    script = os.path.join(os.path.dirname(sys.executable), "libcni")
    if os.access(script, os.X_OK):
        return script
    return f"{sys.executable} -m libcni"


def try_commands(libcni: str = "libcni", examples: str = EXAMPLES) -> str:
    """The commands that try the command line as the demo did, ready to paste (as root).

    A throwaway "host" namespace and a container namespace again: ``up``
    attaches the container to the example network ``trynet`` (bridge
    ``cni-try0``, subnet 10.88.99.0/24, inside the throwaway namespace) of
    ``examples`` (the directory holding it), ``show`` prints it, ``down``
    detaches it, and deleting the namespaces and ``/run/libcni-try`` (the
    cache and the address leases) removes the rest.
    """
    run_in_host = f"ip netns exec try-host {libcni}"
    lines = [
        "Try the command line yourself, in throwaway namespaces again (as root):",
        "  ip netns add try-host && ip netns add try-ctr",
        f"  export NETCONFPATH={examples} CNI_CACHE_DIR={TRY_STATE}/cache",
        f"  {run_in_host} up ctr1 /run/netns/try-ctr",
        f"  {run_in_host} show ctr1",
        f"  {run_in_host} down ctr1 /run/netns/try-ctr",
        f"  ip netns del try-ctr && ip netns del try-host && rm -rf {TRY_STATE}",
    ]
    return "\n".join(lines) + "\n"


# -- the inner part: the library calls -----------------------------------------


def _ms(start: float) -> str:
    return f"{(time.monotonic() - start) * 1000:.0f} ms"


def _count(obj: Mapping[str, Any], key: str) -> str:
    items = obj.get(key)
    n = len(items) if isinstance(items, list) else 0
    noun = {"interfaces": "interface", "ips": "IP", "routes": "route"}[key]
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _random_mac() -> str:
    octets = bytearray(secrets.token_bytes(6))
    octets[0] = (octets[0] & 0xFC) | 0x02  # locally administered, unicast
    return ":".join(f"{b:02x}" for b in octets)


def summarize_result(
    result: Mapping[str, Any], capability_args: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """(label, text) lines a person reads at a glance, from a 1.x result object.

    The container's interfaces (those with a ``sandbox``), their MAC and
    addresses with gateways, the routes, the port mappings asked for in
    ``capability_args``, the DNS settings, and the host-side interfaces.
    """
    interfaces = [i for i in result.get("interfaces", ()) if isinstance(i, Mapping)]
    ips = [i for i in result.get("ips", ()) if isinstance(i, Mapping)]
    lines = _interface_lines(interfaces, ips)
    lines += _route_lines(result.get("routes", ()), ips)
    lines += _port_lines((capability_args or {}).get("portMappings", ()))
    dns = result.get("dns")
    if isinstance(dns, Mapping) and dns:
        lines.append(("DNS", _dns_text(dns)))
    host_side = [
        f"{i.get('name', '?')} ({i['mac']})" if i.get("mac") else str(i.get("name", "?"))
        for i in interfaces
        if not i.get("sandbox")
    ]
    if host_side:
        lines.append(("host side", ", ".join(host_side)))
    return lines


def _address_lines(ip: Mapping[str, Any]) -> list[tuple[str, str]]:
    lines = [("address", str(ip.get("address", "?")))]
    if ip.get("gateway"):
        lines.append(("gateway", str(ip["gateway"])))
    return lines


def _interface_lines(
    interfaces: Sequence[Mapping[str, Any]], ips: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """The container's interfaces (with a ``sandbox``): name, MAC, addresses and gateways;
    then the addresses of no interface."""
    lines: list[tuple[str, str]] = []
    for index, iface in enumerate(interfaces):
        if not iface.get("sandbox"):
            continue
        lines.append(("interface", f"{iface.get('name', '?')} in {iface['sandbox']}"))
        if iface.get("mac"):
            lines.append(("MAC", str(iface["mac"])))
        for ip in ips:
            if ip.get("interface") == index:
                lines += _address_lines(ip)
    for ip in ips:
        if not isinstance(ip.get("interface"), int):
            lines += _address_lines(ip)
    return lines


def _route_lines(routes: Any, ips: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The routes; one without a gateway says which gateway of its family it goes by."""
    gateways = [str(ip["gateway"]) for ip in ips if ip.get("gateway")]
    lines: list[tuple[str, str]] = []
    for route in routes:
        if not isinstance(route, Mapping):
            continue
        dst = str(route.get("dst", "?"))
        shown = "default" if dst in ("0.0.0.0/0", "::/0") else dst
        gw = route.get("gw")
        if gw:
            lines.append(("route", f"{shown} via {gw}"))
        else:
            family = 6 if ":" in dst else 4
            same = [g for g in gateways if ipaddress.ip_address(g).version == family]
            via = f" via {same[0]} (the gateway)" if same else ""
            lines.append(("route", f"{shown}{via}"))
    return lines


def _port_lines(mappings: Any) -> list[tuple[str, str]]:
    """The port mappings asked for (the ``portMappings`` capability argument)."""
    lines: list[tuple[str, str]] = []
    for pm in mappings:
        if isinstance(pm, Mapping):
            proto = pm.get("protocol", "tcp")
            host_ip = pm.get("hostIP") or "*"
            lines.append(
                (
                    "port",
                    f"host {host_ip}:{pm.get('hostPort')}/{proto} -> "
                    f"container port {pm.get('containerPort')}/{proto}",
                )
            )
    return lines


def _dns_text(dns: Mapping[str, Any]) -> str:
    parts = []
    if dns.get("nameservers"):
        parts.append("nameservers " + ", ".join(map(str, dns["nameservers"])))
    if dns.get("domain"):
        parts.append(f"domain {dns['domain']}")
    if dns.get("search"):
        parts.append("search " + ", ".join(map(str, dns["search"])))
    if dns.get("options"):
        parts.append("options " + ", ".join(map(str, dns["options"])))
    return "; ".join(parts)


def _print_lines(out: TextIO, lines: Sequence[tuple[str, str]], indent: str = "       ") -> None:
    width = max((len(label) for label, _ in lines), default=0)
    for label, text in lines:
        out.write(f"{indent}{label:<{width}}  {text}\n")


def _kernel_view(netns: str, ifname: str) -> str | None:
    """What ``ip -brief address`` says of the interface in the container, or ``None``.

    ``ip`` starts inside the namespace: this thread enters it to start the
    process (:meth:`libcni.netns.NetNS.enter`), and is back right after.
    """
    ip = _find_tool("ip", os.environ)
    if ip is None:
        return None
    try:
        with NetNS(netns).enter():
            proc = subprocess.run(
                [ip, "-brief", "address", "show", "dev", ifname],
                capture_output=True,
                text=True,
                check=False,
            )
    except NamespaceError:
        return None
    if proc.returncode != 0:
        return None
    return " ".join(proc.stdout.split()) or None


def _hide_ip6tables(workdir: str) -> bool:
    """Let the plugins find ``iptables`` but not ``ip6tables`` (the demo is IPv4-only).

    The portmap plugin before 1.2 (Debian's 1.1.1 among them) fails CHECK
    whenever ip6tables is usable, even for an IPv4-only container: it looks
    for the container's chain in the IPv6 tables too (containernetworking/plugins
    issue 819). Without ip6tables it checks the IPv4 rules only. This changes
    the environment of this process, which runs in the throwaway namespace.
    Returns whether an ``ip6tables`` was hidden.
    """
    iptables = _find_tool("iptables", os.environ)
    if iptables is None:
        return False
    hidden = _find_tool("ip6tables", os.environ) is not None
    tools = os.path.join(workdir, "bin")
    os.makedirs(tools, exist_ok=True)
    os.symlink(iptables, os.path.join(tools, "iptables"))
    dirs = [
        d
        for d in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if d and not os.path.exists(os.path.join(d, "ip6tables"))
    ]
    os.environ["PATH"] = os.pathsep.join([tools, *dirs])
    return hidden


def run_inside(args: argparse.Namespace, out: TextIO) -> int:
    """The library calls of the demo; runs inside the throwaway host namespace."""
    if not (args.workdir and args.netns and args.bridge and args.container_id):
        raise DemoError("--inside is the internal half of the demo; run ./scripts/demo.sh")
    workdir: str = args.workdir
    cache_dir: str = getattr(args, "cache_dir", None) or os.path.join(workdir, "cache")
    data_dir = os.path.join(workdir, "ipam")
    hid_ip6tables = _hide_ip6tables(workdir)

    tuning_dir = os.path.join(workdir, "tuning")
    net = conf_list_from_bytes(demo_conflist(args.bridge, data_dir, tuning_dir))
    cni = CNIConfig(
        [d for d in args.cni_path.split(":") if d],
        cache_dir=cache_dir,
        timeout=getattr(args, "timeout", None) or 60.0,
    )
    ifname = "eth0"
    # Typed capability arguments, checked before anything runs; the plugins get their
    # JSON ({**DEMO_CAPABILITY_ARGS, "mac": ...}).
    caps = RuntimeConfig(port_mappings=[PortMapping(8080, 80)], mac=_random_mac())
    rt = RuntimeConf(args.container_id, netns=args.netns, ifname=ifname, capability_args=caps)
    cap_args = rt.capability_args
    chain = " -> ".join(
        f"{p.type} (IPAM {p.ipam['type']})" if p.ipam else p.type for p in net.plugins
    )
    out.write(
        f'Network "{net.name}" (cniVersion {net.cni_version}): {chain}, '
        f"subnet {DEMO_SUBNET}, bridge {args.bridge}\n"
        f"Container {rt.container_id}, interface {ifname}, "
        f"asking for MAC {cap_args['mac']} and port 8080 -> 80\n\n"
    )
    out.flush()
    _add_shown(cni, net, rt, out)
    _check_shown(cni, net, rt, hid_ip6tables, out)
    path = _cache_shown(cache_dir, net.name, rt.container_id, ifname, out)
    _del_shown(cni, net, rt, path, data_dir, out)
    _run_manager(args, out, workdir, data_dir, tuning_dir, cap_args, cache_dir)
    return 0


def _add_shown(cni: CNIConfig, net: NetworkConfigList, rt: RuntimeConf, out: TextIO) -> None:
    """ADD, and what the result and the kernel say of the interface."""
    start = time.monotonic()
    result = cni.add_network_list(net, rt)
    out.write(f"ADD    ok ({_ms(start)})\n")
    lines = summarize_result(result.as_version("1.0.0").to_dict(), rt.capability_args)
    seen = _kernel_view(rt.netns, rt.ifname)
    if seen:
        lines.append(("kernel sees", seen))
    _print_lines(out, lines)
    out.flush()


def _check_shown(
    cni: CNIConfig, net: NetworkConfigList, rt: RuntimeConf, hid_ip6tables: bool, out: TextIO
) -> None:
    start = time.monotonic()
    cni.check_network_list(net, rt)
    out.write(
        f"CHECK  passed ({_ms(start)}): every plugin confirms the container matches the cached "
        "result\n"
    )
    if hid_ip6tables:
        out.write(
            "       (with ip6tables hidden from the plugins: portmap before 1.2, Debian's 1.1.1\n"
            "       among them, fails CHECK of an IPv4-only container whenever ip6tables works,\n"
            "       containernetworking/plugins#819; ADD and DEL are not affected)\n"
        )
    out.flush()


def _cache_shown(cache_dir: str, network: str, container_id: str, ifname: str, out: TextIO) -> str:
    """What the cache holds of the attachment; returns its entry's path."""
    cache = ResultCache(cache_dir)
    path = cache.entry_path(network, container_id, ifname)
    entry = cache.read(network, container_id, ifname)
    if entry is None:
        raise DemoError(f"no cache entry after ADD at {path}")
    res = entry.result or {}
    out.write(f"CACHE  {path}\n")
    _print_lines(
        out,
        [
            ("kind", entry.kind or "(legacy bare result)"),
            ("size", f"{os.path.getsize(path)} bytes, mode {os.stat(path).st_mode & 0o777:o}"),
            ("names", f"network {entry.network_name}, container {entry.container_id}, "
                      f"ifname {entry.ifname}"),
            ("netns", entry.netns or "-"),
            ("cap. args", ", ".join(sorted(entry.capability_args)) or "-"),
            ("result", f"cniVersion {res.get('cniVersion', '?')}, "
                       + ", ".join(_count(res, key) for key in ("interfaces", "ips", "routes"))),
            ("config", f"{len(entry.config)} bytes of the network configuration list"),
        ],
    )  # fmt: skip
    out.flush()
    return path


def _del_shown(
    cni: CNIConfig,
    net: NetworkConfigList,
    rt: RuntimeConf,
    path: str,
    data_dir: str,
    out: TextIO,
) -> None:
    """DEL, and what went: the cache entry (``path``), the interface, the address."""
    start = time.monotonic()
    cni.del_network_list(net, rt)
    gone = []
    if not os.path.exists(path):
        gone.append("cache entry removed")
    if _kernel_view(rt.netns, rt.ifname) is None:
        gone.append(f"{rt.ifname} gone from the container")
    leases = os.path.join(data_dir, net.name)
    if os.path.isdir(leases) and not any(name[0].isdigit() for name in os.listdir(leases)):
        gone.append("address released")
    out.write(f"DEL    ok ({_ms(start)}): {', '.join(gone) or 'done'}\n")
    out.flush()


def _ptp_conflist(name: str, subnet: str, data_dir: str, *extra: dict[str, Any]) -> str:
    ipam = {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": data_dir}
    plugins = [{"type": "ptp", "ipMasq": False, "ipam": ipam}, *extra]
    return json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": plugins})


def _run_manager(
    args: argparse.Namespace,
    out: TextIO,
    workdir: str,
    data_dir: str,
    tuning_dir: str,
    cap_args: Mapping[str, Any],
    cache_dir: str,
) -> None:
    """What a runtime does: attach loopback and two networks with the NetworkManager,
    show the merged and the kernel's view, tear down, then a setup that fails and rolls back."""
    conf_dir = os.path.join(workdir, "net.d")
    _write_manager_confs(conf_dir, args.bridge, data_dir, tuning_dir)
    manager = NetworkManager(
        conf_dir,
        [d for d in args.cni_path.split(":") if d],
        cache_dir=cache_dir,
        timeout=getattr(args, "timeout", None) or 60.0,
        loopback="internal",
    )
    # The sandboxes' namespaces: in the scratch directory, which the outer part
    # removes whatever happens to this process.
    netns_dir = os.path.join(workdir, "netns")
    cid = f"{args.container_id}-m"
    nets = [DEMO_NETWORK, f"{DEMO_NETWORK}-ptp"]
    out.write(
        f"\nNetworkManager.sandbox: container {cid} in a new namespace, lo brought up "
        f"in-process, on {nets[0]} and {nets[1]}\n"
    )
    _sandbox_shown(manager, cid, nets, cap_args, netns_dir, out)
    _rollback_shown(manager, cid, nets, cap_args, netns_dir, data_dir, out)


def _write_manager_confs(conf_dir: str, bridge: str, data_dir: str, tuning_dir: str) -> None:
    """The manager's configuration directory: the demo network, a ptp one, a broken one."""
    os.makedirs(conf_dir)
    files = {
        "10-demo.conflist": demo_conflist(bridge, data_dir, tuning_dir).decode(),
        "20-ptp.conflist": _ptp_conflist(f"{DEMO_NETWORK}-ptp", DEMO_PTP_SUBNET, data_dir),
        # ptp takes an address and makes an interface, then tuning refuses the MAC.
        "30-broken.conflist": _ptp_conflist(
            f"{DEMO_NETWORK}-broken",
            DEMO_BROKEN_SUBNET,
            data_dir,
            {"type": "tuning", "mac": "not-a-mac", "dataDir": tuning_dir},
        ),
    }
    for name, text in files.items():
        with open(os.path.join(conf_dir, name), "w") as f:
            f.write(text)


def _sandbox_shown(
    manager: NetworkManager,
    cid: str,
    nets: list[str],
    cap_args: Mapping[str, Any],
    netns_dir: str,
    out: TextIO,
) -> None:
    """A sandbox on ``nets``: the merged view and the kernel's, then its teardown."""
    start = time.monotonic()
    with manager.sandbox(cid, networks=nets, capability_args=cap_args, netns_dir=netns_dir) as view:
        out.write(f"SETUP  ok ({_ms(start)}): " + ", ".join(
            ["lo (internal)", *(f"{a.ifname} ({a.network})" for a in view.attachments)]
        ) + "\n")  # fmt: skip
        lines: list[tuple[str, str]] = [("namespace", view.netns)]
        seen = _kernel_view(view.netns, "lo")
        lines.append(("lo", "up, by the manager itself (no plugin, nothing cached)"))
        if seen:
            lines.append(("kernel sees", seen))
        for name, iface in view.interfaces.items():
            ips = ", ".join(str(ip) for ip in iface.ips) or "-"
            lines.append((name, f"{ips} from {iface.network}"))
            seen = _kernel_view(view.netns, name)
            if seen:
                lines.append(("kernel sees", seen))
        lines.append(("all IPs", ", ".join(str(ip) for ip in view.ips)))
        _print_lines(out, lines)
        out.flush()
        start = time.monotonic()
    removed = "namespace removed" if not os.path.exists(view.netns) else "namespace LEFT"
    out.write(f"TEARDOWN ok ({_ms(start)}): last attached first, from the cache; {removed}\n")
    out.flush()


def _rollback_shown(
    manager: NetworkManager,
    cid: str,
    nets: list[str],
    cap_args: Mapping[str, Any],
    netns_dir: str,
    data_dir: str,
    out: TextIO,
) -> None:
    """A sandbox on ``nets`` and the broken network: its rollback, and what it left."""
    broken = f"{DEMO_NETWORK}-broken"
    start = time.monotonic()
    try:
        with manager.sandbox(
            cid, networks=[*nets, broken], capability_args=cap_args, netns_dir=netns_dir
        ):
            raise DemoError(f"the setup with {broken} did not fail")
    except SetupError as e:
        out.write(
            f"ROLLBACK ok ({_ms(start)}): {broken} failed ({e.cause.msg}); "
            f"{len(e.partial)} attached network(s) and the failed one were undone, "
            "then the namespace removed\n"
        )
    left = sorted(os.listdir(netns_dir)) if os.path.isdir(netns_dir) else []
    left += [
        name
        for net in (*nets, broken)
        if os.path.isdir(os.path.join(data_dir, net))
        for name in os.listdir(os.path.join(data_dir, net))
        if name[0].isdigit()
    ]
    left += [a.network for a in manager.inspect(cid).attachments]
    left += _host_veths()
    out.write("         left behind: " + (", ".join(left) or "nothing") + "\n")
    out.flush()


def _host_veths() -> list[str]:
    """The veth interfaces of the (throwaway) host namespace this process runs in."""
    ip = _find_tool("ip", os.environ)
    if ip is None:
        return []
    proc = subprocess.run(
        [ip, "-o", "link", "show", "type", "veth"], capture_output=True, text=True, check=False
    )
    return [line.split(":")[1].strip().split("@")[0] for line in proc.stdout.splitlines()]


def _positive(text: str) -> float:
    try:
        if 0 < float(text) < float("inf"):
            return float(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """The demo (and its internal ``--inside`` half); its exit status."""
    parser = argparse.ArgumentParser(
        prog="demo.py",
        description="Attach a throwaway network namespace to a demo network with the reference "
        "plugins (bridge, host-local, portmap, tuning), show the result, check it and detach it "
        "again. Needs root, iproute2 and the reference plugins; never touches the machine's own "
        "network namespace.",
    )
    parser.add_argument("--cache-dir", metavar="DIR", help="keep the cache there (default: "
                        "in the run's scratch directory, removed at the end)")  # fmt: skip
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive,
                        help="time limit of each operation (default: 60)")  # fmt: skip
    # The part that runs inside the throwaway host namespace (internal).
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    for option in ("--netns", "--workdir", "--bridge", "--cni-path", "--container-id"):
        parser.add_argument(option, default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.inside:
        return run(os.environ, sys.stdout, sys.stderr, args.timeout, args.cache_dir)
    # The outer part stops this one with SIGTERM: unwind like Ctrl-C, so that
    # a plugin running at that moment is killed with its process group.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return run_inside(args, sys.stdout)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line, as the command line reports errors
        sys.stderr.write(f"libcni demo: {' '.join(str(e).split())}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
