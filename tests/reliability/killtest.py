"""Kill a container runtime in the middle of a real setup, restart it, count what leaked.

The kill test of issue 18 (behaviour.md §4.1, §7 "In-progress records",
§11.4): a runtime child process attaches a container to a network made of the
reference plugins (``bridge`` with ``host-local`` IPAM, then ``portmap``, from
``/usr/lib/cni``) and is killed with SIGKILL at some instant; then a
*restarted* runtime (a fresh process, same cache and configuration
directories) runs ``NetworkManager(...).gc(valid_containers)`` and nothing
else, and the trial counts what is left:

- ``reservations``: ``host-local`` address reservations (the files named by an
  IP address in its ``dataDir``; ``last_reserved_ip.0`` and ``lock`` are not
  reservations);
- ``veths``: veth interfaces in the host namespace (the host end of the pair);
- ``ctr_ifaces``: interfaces other than ``lo`` left in the container's
  namespace (when it still exists);
- ``chains``: per-container iptables chains (every ``CNI-*`` chain but the
  ones ``portmap`` shares between all containers and never removes:
  ``CNI-HOSTPORT-DNAT``, ``-SETMARK``, ``-MASQ``), IPv4 and IPv6;
- ``rules``: iptables rules of the container: a comment naming its ID, or a
  per-container chain as their chain or target;
- ``entries``: cache entries in ``<cache>/results`` (temporary files of a
  killed write are counted apart, as ``temp``: they hold nothing a DEL needs,
  and GC removes them once they are ten minutes old, §7);
- ``records``: in-progress records (files under ``<cache>/records``).

Every count is the difference with a snapshot taken just before the runtime
started (another, live container may be there). All must be zero, but for
the limits of the reference plugins themselves (``Trial.plugin_limit``).

Everything runs in throwaway namespaces (``tests/e2e/netns.py``): every trial
has its own "host" namespace, where the runtime, the plugins and the restarted
runtime run, and its own container namespace; both are removed at the end of
the trial, also when it fails, which takes the bridge, veths and iptables
state along. The machine's own namespace is never touched.

**How the runtime is killed.** The runtime (``kill_runtime.py`` for libcni,
``tests/go/killrt`` for Go libcni) runs under a small launcher, a child
subreaper that waits for every process the runtime started (the plugins a
killed runtime leaves behind become its children). It prints ``ready``, the
test writes ``go`` and, after a random delay, kills it:

- ``process``: SIGKILL to the runtime alone; the plugins it started keep
  running to their end (or die writing to the closed pipe);
- ``group``: the runtime and every process it started (the plugins, the
  plugins' children) are stopped with SIGSTOP (the runtime first, then the
  others until no new one appears) and then killed with SIGKILL: the whole
  tree dies at the instant the runtime stopped, as when a service's cgroup
  is killed. (libcni starts each plugin in a process group of its own, so
  ``killpg`` of the runtime's group would not reach them.)
- ``restart`` (issue 28: a supervisor restarts the runtime at once): every
  reference plugin runs through a wrapper (``_DAWDLE_WRAPPER``, first in the
  plugin path and so in ``CNI_PATH``) that sleeps on ADD, then execs the
  real plugin; the runtime alone gets SIGKILL at a random instant of one
  plugin's run (``restart_trials``: the *target*, which it learns from the
  runtime's log), and the recovering runtime's gc starts as soon as the
  runtime is dead, while the orphaned plugins still run (the launcher, their
  subreaper, tells which still run: ``Trial.orphans_at_restart``,
  ``orphans_after_gc``). The leaks are counted once every orphan has ended
  (the launcher has exited); the second gc (``after_second_gc``) tells
  whether a later gc would find them.
- ``instant``: the runtime kills itself at an exact instant (fault injection
  in the runtime child: see ``kill_runtime.py``), or a wrapper ``host-local``
  (a shell script placed before the real one in the plugin path) kills the
  runtime, and with ``-group`` the ``bridge`` that called it too, right after
  the real ``host-local`` reserved the address. Two more instants show what
  the plugins cannot undo whatever the runtime does
  (``PLUGIN_LIMIT_INSTANTS``): ``ipam-torn`` (strace kills ``host-local`` at
  the ``write`` that fills its new reservation file) and ``masq-chain`` (an
  ``iptables`` wrapper kills ``bridge`` as it creates its masquerading chain).

In the modes but ``restart``, the test waits for every orphaned plugin to end
before the restart (a restart that takes longer than a plugin).

**Where the kill landed** (the *phase*) comes from the runtime's own log (it
logs each plugin's start and end, and logs nothing once dead) and from the
cache directory after the kill (an entry, a temporary file, a record): e.g.
``eth0: in bridge`` (the runtime was waiting for ``bridge``),
``eth0: after last plugin`` (the chain had finished, the cache write had not
begun), ``eth0: in cache write`` (a temporary file, no entry).

Variants: ``kept`` (the container's namespace still exists during gc, as when
a runtime restarts), ``gone`` (it was removed before gc, as after a reboot:
the veths vanish with it; reservations and chains must still be collected),
``neighbour`` (another container, set up completely before, is live: gc gets
it as valid and must leave everything of it alone), ``plain`` (as ``kept``,
without masquerading).

The ``bridge`` plugin masquerades (``ipMasq``) in ``kept`` and
``neighbour``. Not in ``gone``: ``bridge`` 1.1.1 finds the addresses whose
masquerading rules it removes in the container's interface, so with the
namespace gone it leaves them whatever the runtime does (also on a plain DEL
of a complete cache entry). Not in ``plain`` either: ``bridge`` 1.1.1 killed
after it gave the container its address and before it created its
masquerading chain fails its next DEL (``iptables -D POSTROUTING ... -j
CNI-...``: "Chain ... does not exist"; the DEL after that succeeds, the
interface being gone). Both are the plugin's limits, not the runtime's; the
CI test's random kills use ``plain`` so that they cannot hit the second.
When the restarted runtime's gc fails or leaves something, the trial runs gc
once more and records what the second one left (``after_second_gc``).

Run it through ``tests/reliability/test_kill.py`` (quick, in CI) or
``tests/reliability/kill_report.py`` (the full figures of docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
if str(TESTS) not in sys.path:  # run as a script: e2e.netns is importable as in pytest
    sys.path.insert(0, str(TESTS))

from e2e.netns import NETNS_DIR, Netns, orphaned_namespaces  # noqa: E402
from golibcni import GoBuildError, go_available, go_build  # noqa: E402

REPO = TESTS.parent
RUNTIME = HERE / "kill_runtime.py"
PLUGIN_DIR = "/usr/lib/cni"
REQUIRED_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
REQUIRED_TOOLS = ("ip", "iptables", "iptables-save", "ip6tables-save")
NETWORK = "killnet"
BRIDGE = "cnikill0"
SUBNET = "10.99.0.0/24"
CAPABILITY_ARGS = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
#: portmap's chains, created at its first ADD and shared by every container.
SHARED_CHAINS = frozenset({"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"})
#: What is counted, in table order (all must be zero).
RESOURCES = ("reservations", "veths", "ctr_ifaces", "chains", "rules", "entries", "records")
TIMEOUT = 120.0  # seconds for any one step: generous, a loaded 2-core machine is slow

#: The launcher: a child subreaper that runs the runtime and waits for every
#: process it started, orphans included.
_LAUNCHER = r"""
import ctypes, os, subprocess, sys
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("launcher: prctl(PR_SET_CHILD_SUBREAPER) failed")
child = subprocess.Popen(sys.argv[1:])
status = None
while True:
    try:
        pid, st = os.wait()
    except ChildProcessError:
        break
    if pid == child.pid:
        status = st
child.returncode = 0  # reaped above: keep Popen from waiting again
sys.stderr.write(f"launcher: runtime wait status {status}\n")
"""

#: A ``host-local`` that SIGKILLs the runtime (its parent's parent) right after
#: the real one reserved the address; with ``{group}`` 1, ``bridge`` (its
#: parent) too. Only for ADD. ``{run}`` runs the real one; ``{when}`` is the
#: shell test of when to kill.
_HOST_LOCAL_WRAPPER = """#!/bin/sh
out=$({run})
rc=$?
if [ "$CNI_COMMAND" = ADD ] && {when}; then
    bridge=$PPID
    runtime=$(cut -d' ' -f4 /proc/$bridge/stat)
    kill -STOP "$runtime"
    if [ "{group}" = 1 ]; then kill -KILL "$bridge"; fi
    kill -KILL "$runtime"
fi
printf '%s' "$out"
exit $rc
"""

#: ``ipam-torn``: host-local SIGKILLed by strace at its first ``write``, the one
#: that puts the container ID into the reservation file it has just created
#: (``O_CREAT|O_EXCL``): the file stays, empty. Then bridge and the runtime.
_TORN_HOST_LOCAL = (
    "strace -f -qq -o /dev/null -e trace=write -e inject=write:signal=KILL:when=1 {real}"
)

#: ``masq-chain``: an ``iptables`` first in the PATH of the runtime (and so of
#: its plugins: go-iptables finds ``iptables`` in PATH) that, when ``bridge``
#: creates a chain (``-N CNI-...``: its masquerading chain, the container's
#: address already on its interface), SIGKILLs bridge and the runtime.
_IPTABLES_WRAPPER = """#!/bin/sh
case " $* " in
*" -N CNI-"*)
    if [ "$(cat /proc/$PPID/comm)" = bridge ]; then
        runtime=$(cut -d' ' -f4 /proc/$PPID/stat)
        kill -STOP "$runtime"
        kill -KILL "$PPID" "$runtime"
        exit 1
    fi
    ;;
esac
exec {real} "$@"
"""


#: ``restart``: a plugin of the trial's plugin directory, first in the path (``CNI_PATH``
#: too, so ``bridge`` finds the ``host-local`` one), that dawdles on ADD and then
#: becomes the real plugin (``exec``: same process, stdin and environment; the
#: ``sleep`` has ended, no extra process lingers).
_DAWDLE_WRAPPER = """#!/bin/sh
if [ "$CNI_COMMAND" = ADD ]; then sleep {sleep:.3f}; fi
exec {real}
"""
#: ``restart``: the plugins run through ``_DAWDLE_WRAPPER``, and each one's longest dawdle.
DAWDLERS = ("loopback", "bridge", "host-local", "portmap")
DAWDLE = 2.0


class KillTestError(AssertionError):
    """A trial could not be run (not a leak: the harness or the runtime failed)."""


# -- requirements -----------------------------------------------------------------


def missing_requirements(go: bool = False) -> list[str]:
    """What this machine lacks to run the kill test (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append(f"root (running as uid {os.geteuid()})")
    missing += [f"the {t!r} command" for t in REQUIRED_TOOLS if shutil.which(t) is None]
    absent = [p for p in REQUIRED_PLUGINS if not os.access(os.path.join(PLUGIN_DIR, p), os.X_OK)]
    if absent:
        missing.append(f"the reference CNI plugins {', '.join(absent)} in {PLUGIN_DIR}")
    if go and not go_available():
        missing.append("Go and its libcni (golang-go, golang-github-appc-cni-dev)")
    return missing


def build_go_runtime() -> str:
    """Build ``tests/go/killrt`` against Debian's Go libcni 1.1.2 (offline); return its path."""
    try:
        return go_build("killrt")
    except GoBuildError as e:
        raise KillTestError(str(e)) from None


# -- configuration ------------------------------------------------------------------


def conflist(data_dir: Path, ip_masq: bool) -> dict[str, Any]:
    """The network of the issue: bridge (host-local IPAM in ``data_dir``), then portmap."""
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": ip_masq,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": SUBNET}]],
                    "dataDir": str(data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


# -- what a trial is --------------------------------------------------------------


@dataclass
class Trial:
    """One kill, and what it left after the restarted runtime's gc."""

    impl: str  # "python" (libcni) or "go" (Go libcni 1.1.2)
    op: str  # "setup" (NetworkManager.setup) or "add" (add_network_list / AddNetworkList)
    mode: str  # "process", "group", "restart", "instant" or "none" (not killed: a control)
    variant: str = "kept"  # "kept", "gone", "neighbour" or "plain"
    kill_at: str = ""  # the instant (mode "instant")
    #: seconds after "go" (modes "process" and "group"), after the start of ``target``
    #: ("restart")
    delay: float = 0.0
    target: str = ""  # "restart": the plugin the runtime runs when it is killed
    dawdles: dict[str, float] = field(default_factory=dict)  # "restart": each wrapper's sleep
    # -- outcome
    phase: str = ""
    completed: bool = False  # the operation returned before the kill
    leaks: dict[str, int] = field(default_factory=dict)
    temp: int = 0  # temporary files of a killed cache write, left for a later GC
    locks: int = 0  # lock files of the container left in <cache>/locks (reported, not a resource)
    before_gc: dict[str, int] = field(default_factory=dict)  # the same counts before gc
    gc_error: str = ""
    #: When the first gc failed or left something: what a second gc left (None: not run).
    after_second_gc: dict[str, int] | None = None
    second_gc_error: str = ""
    neighbour_damage: list[str] = field(default_factory=list)
    #: "restart": the processes the killed runtime left (its plugins) still running when
    #: the recovering runtime started, and when its gc returned.
    orphans_at_restart: int = 0
    orphans_after_gc: int = 0
    gc_seconds: float = 0.0  # "restart": how long the recovering runtime took
    detail: str = ""  # what leaked, by name
    torn: int = 0  # leaked reservations whose file holds no container ID

    @property
    def leaked(self) -> bool:
        return any(self.leaks.values()) or bool(self.gc_error) or bool(self.neighbour_damage)

    @property
    def plugin_limit(self) -> str:
        """The reference plugins' limit that explains all this trial left, or ``""``.

        - ``torn reservation``: only reservations leaked, each an empty file:
          host-local was killed between creating the file (``O_CREAT|O_EXCL``)
          and writing the container ID into it, so that no DEL can match it (no
          runtime writes these files; ``ipam-torn`` makes it happen);
        - ``bridge DEL failed once``: the first gc failed only because bridge's
          DEL found no masquerading chain ("Chain ... does not exist": bridge
          was killed after it gave the container its address, before it
          created the chain; ``masq-chain``), the library kept the record, and
          a second gc left nothing.
        """
        if self.neighbour_damage:
            return ""
        leaked = {k for k, v in self.leaks.items() if v}
        if leaked == {"reservations"} and self.torn == self.leaks["reservations"]:
            return "" if self.gc_error else "torn reservation"
        bridge_failed = 'type="bridge" failed (del)' in self.gc_error and (
            "does not exist" in self.gc_error
        )
        second_clean = self.after_second_gc is not None and not (
            any(self.after_second_gc.values()) or self.second_gc_error
        )
        if bridge_failed and leaked <= {"records", "entries"} and second_clean:
            return "bridge DEL failed once"
        return ""

    def label(self) -> str:
        how = self.kill_at if self.mode == "instant" else f"{self.mode} {self.delay * 1000:.0f}ms"
        if self.mode == "restart":
            how = f"restart, {self.target} +{self.delay * 1000:.0f}ms"
        return f"{self.impl} {self.op} [{how}, netns {self.variant}]"

    def describe(self) -> str:
        """One line: where the kill landed and what leaked."""
        leaks = ", ".join(f"{k}={v}" for k, v in self.leaks.items() if v) or "nothing leaked"
        extra = ""
        if self.gc_error:
            extra += f"; gc failed: {self.gc_error}"
        if self.neighbour_damage:
            extra += f"; live container damaged: {self.neighbour_damage}"
        if self.detail:
            extra += f"; {self.detail}"
        if self.mode == "restart":
            extra += (
                f"; dawdles {self.dawdles}; orphaned plugins running at the restart "
                f"{self.orphans_at_restart}, after its gc ({self.gc_seconds}s) "
                f"{self.orphans_after_gc}"
            )
        if self.after_second_gc is not None:
            left = ", ".join(f"{k}={v}" for k, v in self.after_second_gc.items() if v)
            extra += f"; a second gc left {left or 'nothing'}"
            if self.second_gc_error:
                extra += f" and failed: {self.second_gc_error}"
        if self.plugin_limit:
            extra += f" (a plugin limit: {self.plugin_limit})"
        return f"{self.label()}: phase {self.phase!r}: {leaks}{extra}"


# -- looking at the state ----------------------------------------------------------


@dataclass
class Snapshot:
    """Named resources present at one moment (sets of names, to diff)."""

    reservations: set[str]
    veths: set[str]
    ctr_ifaces: set[str]
    chains: set[str]
    rules: Counter[str]
    entries: set[str]
    temp: set[str]
    records: set[str]
    locks: set[str]
    owners: dict[str, str]  # reservation -> container ID


def _ipam_files(data_dir: Path) -> dict[str, str]:
    d = data_dir / NETWORK
    out = {}
    if d.is_dir():
        for p in d.iterdir():
            try:
                ipaddress.ip_address(p.name)
            except ValueError:
                continue  # last_reserved_ip.0, lock
            out[p.name] = p.read_text(errors="replace").split()[0] if p.stat().st_size else ""
    return out


def _links(ns: Netns, *kind: str) -> set[str]:
    proc = ns.ip("-j", "link", "show", *(("type", *kind) if kind else ()), check=False)
    if proc.returncode != 0:
        return set()
    return {link["ifname"] for link in json.loads(proc.stdout or "[]")}


def _iptables(host: Netns) -> tuple[set[str], Counter[str]]:
    """Per-container chains and rules, IPv4 and IPv6 (``v4 `` / ``v6 `` prefixed)."""
    chains: set[str] = set()
    rules: Counter[str] = Counter()
    for family, tool in (("v4", "iptables-save"), ("v6", "ip6tables-save")):
        text = host.exec([tool]).stdout
        table = ""
        own: set[str] = set()
        lines = text.splitlines()
        for line in lines:
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":CNI-"):
                name = line[1:].split()[0]
                if name not in SHARED_CHAINS:
                    own.add(name)
                    chains.add(f"{family} {table} {name}")
        for line in lines:
            if line.startswith("*"):
                table = line[1:]
            if not line.startswith("-A "):
                continue
            words = line.split()
            target = words[words.index("-j") + 1] if "-j" in words else ""
            if 'id: \\"' in line or 'id: "' in line or words[1] in own or target in own:
                rules[f"{family} {table} {line}"] += 1
    return chains, rules


def _cache_files(cache: Path) -> tuple[set[str], set[str], set[str]]:
    """(entries, temporary files) of ``results/`` and every file under ``records/``."""
    entries: set[str] = set()
    temp: set[str] = set()
    results = cache / "results"
    if results.is_dir():
        for name in os.listdir(results):
            (temp if name.startswith(".") else entries).add(name)
    return entries, temp, _files_under(cache / "records")


def _files_under(directory: Path) -> set[str]:
    found: set[str] = set()
    for root, _dirs, files in os.walk(directory):
        found.update(os.path.relpath(os.path.join(root, name), directory) for name in files)
    return found


def snapshot(world: World) -> Snapshot:
    owners = _ipam_files(world.data_dir)
    chains, rules = _iptables(world.host)
    entries, temp, records = _cache_files(world.cache)
    ctr = world.ctr
    ctr_ifaces = (
        _links(ctr) - {"lo"} if ctr is not None and (NETNS_DIR / ctr.name).exists() else set()
    )
    return Snapshot(
        reservations=set(owners),
        veths=_links(world.host, "veth"),
        ctr_ifaces=ctr_ifaces,
        chains=chains,
        rules=rules,
        entries=entries,
        temp=temp,
        records=records,
        # The lock file of each network stays (one per network, not per container).
        locks={n for n in _files_under(world.cache / "locks") if not n.startswith("networks/")},
        owners=owners,
    )


def difference(after: Snapshot, before: Snapshot) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Counts and names of what ``after`` has that ``before`` had not."""
    names: dict[str, list[str]] = {
        "reservations": [  # with the container ID the file holds (host-local's owner)
            f"{ip} (holding {after.owners.get(ip, '')!r})"
            for ip in sorted(after.reservations - before.reservations)
        ],
        "veths": sorted(after.veths - before.veths),
        "ctr_ifaces": sorted(after.ctr_ifaces - before.ctr_ifaces),
        "chains": sorted(after.chains - before.chains),
        "rules": sorted((after.rules - before.rules).elements()),
        "entries": sorted(after.entries - before.entries),
        "records": sorted(after.records - before.records),
        "temp": sorted(after.temp - before.temp),
        "locks": sorted(after.locks - before.locks),
    }
    return {k: len(v) for k, v in names.items()}, names


# -- the phase of a kill -------------------------------------------------------------


def networks_of(op: str) -> list[tuple[str, str, list[str]]]:
    """(network, ifname, plugin types) of an operation, in the order it adds them."""
    chain = [(NETWORK, "eth0", ["bridge", "portmap"])]
    return [("cni-loopback", "lo", ["loopback"]), *chain] if op == "setup" else chain


def _complete_entry(path: Path) -> bool:
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and "result" in obj


def classify(op: str, container_id: str, cache: Path, events: list[str]) -> str:
    """Where the runtime was when it died, from its log and the cache it left."""
    if "done" in events:
        return "after the operation returned"
    entries, temp, records = _cache_files(cache)
    ended = [e.split()[1] for e in events if e.startswith("end ") and e.endswith(" ADD ok")]
    started = [e.split()[1] for e in events if e.startswith("start ") and e.endswith(" ADD")]
    for network, ifname, types in networks_of(op):
        name = f"{network}-{container_id}-{ifname}"
        where = f"{ifname}: "
        if name in entries:
            if _complete_entry(cache / "results" / name):
                continue
            return where + "in cache write (partial entry)"
        if temp:
            return where + "in cache write"
        if types[-1] in ended:
            return where + "after last plugin"
        mine = [t for t in started if t in types]
        if mine:
            last = mine[-1]
            return where + (f"after {last}" if last in ended else f"in {last}")
        if any(os.path.basename(r) == name for r in records):
            return where + "record, no plugin yet"
        return where + "no record, no plugin yet"
    return "after the last cache write"


#: The phases in the order an operation goes through them (for the tables).
PHASE_ORDER = [
    f"{ifname}: {p}"
    for ifname, types in (("lo", ["loopback"]), ("eth0", ["bridge", "portmap"]))
    for p in (
        "no record, no plugin yet",
        "record, no plugin yet",
        *[x for t in types for x in (f"in {t}", f"after {t}")][:-1],
        "after last plugin",
        "in cache write",
        "in cache write (partial entry)",
    )
] + ["after the last cache write", "after the operation returned", "not killed"]

#: The phases between the start of the network's first plugin and its cache write:
#: the window in which a runtime without a write-ahead record leaks (issue 18).
WINDOW = frozenset(
    f"eth0: {p}"
    for p in (
        "in bridge",
        "after bridge",
        "in portmap",
        "after last plugin",
        "in cache write",
        "in cache write (partial entry)",
    )
)


# -- processes ----------------------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself), parents first."""
    children = _children_map()
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def kill_tree(launcher: int, runtime_fd: int) -> list[int]:
    """Stop the runtime, then every other process under the launcher until no new one
    appears, then SIGKILL them all; return the pids killed."""
    with contextlib.suppress(ProcessLookupError):  # it may have finished already
        signal.pidfd_send_signal(runtime_fd, signal.SIGSTOP)
    stopped: list[int] = []
    quiet = 0
    while quiet < 3:
        new = [p for p in descendants(launcher) if p not in stopped]
        if not new:
            quiet += 1
            continue
        quiet = 0
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(runtime_fd, signal.SIGKILL)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return stopped


def _python_env(libcni_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(libcni_path), env.get("PYTHONPATH", "")) if p
    )
    env.pop("KILLTEST_GROUP", None)
    return env


class Runtime:
    """A runtime process under the launcher, in the host namespace."""

    def __init__(self, host: Netns, argv: Sequence[str], env: dict[str, str], log: Path) -> None:
        self._stderr = open(log, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", host.name, sys.executable, "-c", _LAUNCHER, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,
        )
        self.log = log
        self.pid = 0
        self.pidfd = -1
        self.lines: list[str] = []

    def readline(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise KillTestError(f"the runtime said nothing for {timeout}s; its log:\n{self._log()}")
        line = self.proc.stdout.readline().decode().strip()
        self.lines.append(line)
        return line

    def ready(self, libcni: Path | None = None) -> str:
        """Wait for ``ready``; with ``libcni``, check the runtime imported libcni from there."""
        line = self.readline(TIMEOUT)
        if not line.startswith("ready "):
            self.wait()
            raise KillTestError(f"the runtime did not start ({line!r}); its log:\n{self._log()}")
        _, pid, where = line.split(" ", 2)
        self.pid = int(pid)
        self.pidfd = os.pidfd_open(self.pid)
        if libcni is not None and not where.startswith(f"{libcni}{os.sep}"):
            raise KillTestError(f"the runtime imported {where}, not the libcni of {libcni}")
        return where

    def go(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()
        return time.monotonic()

    def kill(self, mode: str) -> None:
        if mode == "process":
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        else:
            kill_tree(self.proc.pid, self.pidfd)

    def dead(self, timeout: float) -> bool:
        """Whether the runtime process has ended (waiting up to ``timeout`` seconds)."""
        return bool(select.select([self.pidfd], [], [], timeout)[0])

    def orphans(self) -> list[int]:
        """The plugins under the launcher (after the runtime's death: those it left, which
        the launcher adopted; a dawdling wrapper's ``sleep`` is not counted)."""
        found = []
        for pid in descendants(self.proc.pid):
            with contextlib.suppress(OSError):
                if pid != self.pid and Path(f"/proc/{pid}/comm").read_text().strip() != "sleep":
                    found.append(pid)
        return found

    def wait(self) -> list[str]:
        """Wait for the runtime and every process it started; return what it printed."""
        try:
            out, _ = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for pid in [self.proc.pid, *descendants(self.proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.communicate()
            raise KillTestError(f"the runtime or its plugins did not end in {TIMEOUT}s") from None
        finally:
            self._stderr.close()
            if self.pidfd >= 0:
                os.close(self.pidfd)
                self.pidfd = -1
        self.lines += out.decode().split("\n")
        return [x for x in self.lines if x]

    def abort(self) -> None:
        """Kill the runtime and everything under the launcher, and reap them (after a failure)."""
        if self.proc.poll() is None:
            for pid in [*descendants(self.proc.pid), self.proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.communicate(timeout=TIMEOUT)
        if not self._stderr.closed:
            self._stderr.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def _log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


# -- one trial -----------------------------------------------------------------------


class World:
    """The namespaces and directories of one trial; :meth:`close` removes them."""

    def __init__(self, root: Path, variant: str) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.conf_dir = root / "net.d"
        self.conf_dir.mkdir()
        self.data_dir = root / "ipam"
        self.cache = root / "cache"
        self.events = root / "events.log"
        self.wrappers = root / "wrappers"
        self.host = Netns.create("killhost")
        self.ctr: Netns | None = None
        self.neighbour: Netns | None = None
        try:
            self.ctr = Netns.create("killctr")
            if variant == "neighbour":
                self.neighbour = Netns.create("killnbr")
        except BaseException:
            self.close()
            raise
        conf = conflist(self.data_dir, ip_masq=variant in ("kept", "neighbour"))
        (self.conf_dir / "10-killnet.conflist").write_text(json.dumps(conf))

    def close(self) -> None:
        for ns in (self.neighbour, self.ctr, self.host):
            if ns is not None:
                ns.delete()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Runner:
    """Runs trials against one libcni checkout (``libcni``) or Go (``go_runtime``)."""

    base: Path
    libcni: Path = REPO
    go_runtime: str = ""
    samples: int = 2  # operations run unkilled to measure their length before random kills
    second_gc: bool = True  # run gc again when the first one failed or left something
    _n: int = 0
    calibration: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def _request(self, world: World, op: str, cid: str, netns: str, **kw: Any) -> dict[str, Any]:
        return {
            "op": op,
            "conf_dir": str(world.conf_dir),
            "plugin_dirs": [PLUGIN_DIR],
            "cache_dir": str(world.cache),
            "network": NETWORK,
            "plugin_types": ["bridge", "portmap"],
            "container_id": cid,
            "netns": netns,
            "capability_args": CAPABILITY_ARGS,
            "events": str(world.events),
            **kw,
        }

    def _start(
        self,
        world: World,
        impl: str,
        op: str,
        cid: str,
        netns: str,
        kill_at: str = "",
        dawdles: dict[str, float] | None = None,
    ) -> Runtime:
        plugin_dirs = [PLUGIN_DIR]
        env = _python_env(self.libcni)
        if dawdles:
            world.wrappers.mkdir(exist_ok=True)
            for ptype in DAWDLERS:
                wrapper = world.wrappers / ptype
                real = os.path.join(PLUGIN_DIR, ptype)
                wrapper.write_text(_DAWDLE_WRAPPER.format(sleep=dawdles.get(ptype, 0), real=real))
                wrapper.chmod(0o755)
            plugin_dirs = [str(world.wrappers), PLUGIN_DIR]
        if kill_at.startswith("ipam-"):
            world.wrappers.mkdir(exist_ok=True)
            wrapper = world.wrappers / "host-local"
            real = os.path.join(PLUGIN_DIR, "host-local")
            torn = kill_at == "ipam-torn"
            wrapper.write_text(
                _HOST_LOCAL_WRAPPER.format(
                    run=_TORN_HOST_LOCAL.format(real=real) if torn else real,
                    when="true" if torn else "[ $rc -eq 0 ]",
                    group=1 if torn or kill_at.endswith("-group") else 0,
                )
            )
            wrapper.chmod(0o755)
            plugin_dirs = [str(world.wrappers), PLUGIN_DIR]
        if kill_at == "masq-chain":
            world.wrappers.mkdir(exist_ok=True)
            wrapper = world.wrappers / "iptables"
            iptables = shutil.which("iptables")
            assert iptables is not None, "the masq-chain kill needs iptables on PATH"
            wrapper.write_text(_IPTABLES_WRAPPER.format(real=iptables))
            wrapper.chmod(0o755)
            env["PATH"] = f"{world.wrappers}{os.pathsep}{env.get('PATH', '')}"
        world.events.unlink(missing_ok=True)
        if impl == "python":
            req = self._request(world, op, cid, netns, kill_at=kill_at, plugin_dirs=plugin_dirs)
            argv = [sys.executable, str(RUNTIME), "run", json.dumps(req)]
        else:
            if op != "add":
                raise KillTestError("the Go runtime only runs AddNetworkList")
            conf = world.conf_dir / "10-killnet.conflist"
            argv = [
                self.go_runtime,
                "add",
                str(conf),
                ":".join(plugin_dirs),
                str(world.cache),
                cid,
                netns,
                json.dumps(CAPABILITY_ARGS),
                str(world.events),
                kill_at,
            ]
        return Runtime(world.host, argv, env, world.root / f"runtime-{cid}.log")

    def _setup_neighbour(self, world: World, impl: str, op: str, cid: str) -> None:
        assert world.neighbour is not None
        rt = self._start(world, impl, op, cid, world.neighbour.path)
        try:
            rt.ready(self.libcni if impl == "python" else None)
            rt.go()
            lines = rt.wait()
        except BaseException:
            rt.abort()
            raise
        if not any(x.startswith("done") for x in lines):
            raise KillTestError(f"the live container's setup failed:\n{rt._log()}")

    def _gc(self, world: World, impl: str, valid: list[str], known: dict[str, str]) -> str:
        """The restarted runtime: gc only. Returns its error ('' when it succeeded).

        ``known``: the netns of each container the runtime knows of, which
        only the Go runtime is given (Go libcni 1.1.2 does not cache it).
        """
        if impl == "python":
            req = self._request(world, "gc", "", "", valid_containers=valid)
            argv = [sys.executable, str(RUNTIME), "gc", json.dumps(req)]
        else:
            argv = [
                self.go_runtime,
                "recover",
                str(world.cache),
                PLUGIN_DIR,
                ",".join(valid),
                json.dumps(known),
            ]
        proc = world.host.exec(argv, check=False, timeout=TIMEOUT, env=_python_env(self.libcni))
        try:
            reply = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"no reply (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        where = reply.get("libcni", "")
        if impl == "python" and not where.startswith(f"{self.libcni}{os.sep}"):
            raise KillTestError(f"the restarted runtime imported {where}, not {self.libcni}")
        if not reply.get("ok"):
            return f"{reply.get('error')} {reply.get('errors') or ''}".strip()
        return ""

    def run(self, trial: Trial) -> Trial:
        """Run ``trial`` (its outcome fields are filled in) and remove everything it made."""
        self._n += 1
        tag = f"{self._n}-{random.getrandbits(24):06x}"
        cid = f"kill-{tag}"
        world = World(self.base / f"trial-{tag}", trial.variant)
        try:
            self._trial(world, trial, cid, f"live-{tag}")
        finally:
            world.close()
        return trial

    def _trial(self, world: World, trial: Trial, cid: str, neighbour: str) -> None:
        if trial.variant == "neighbour":
            self._setup_neighbour(world, trial.impl, trial.op, neighbour)
        before = snapshot(world)
        assert world.ctr is not None
        known = {cid: world.ctr.path}
        if world.neighbour is not None:
            known[neighbour] = world.neighbour.path
        valid = [neighbour] if world.neighbour is not None else []
        restart = trial.mode == "restart"
        rt = self._start(
            world, trial.impl, trial.op, cid, world.ctr.path, trial.kill_at, trial.dawdles
        )
        try:
            rt.ready(self.libcni if trial.impl == "python" else None)
            started = rt.go()
            if trial.mode in ("process", "group"):
                time.sleep(max(0.0, started + trial.delay - time.monotonic()))
                rt.kill(trial.mode)
            if restart:
                self._kill_in_plugin(world, trial, rt)
                events = _events(world)
                trial.phase = classify(trial.op, cid, world.cache, events)
                # The recovering runtime at once, while the orphaned plugins still run.
                trial.orphans_at_restart = len(rt.orphans())
                gc_start = time.monotonic()
                trial.gc_error = self._gc(world, trial.impl, valid, known)
                trial.gc_seconds = round(time.monotonic() - gc_start, 3)
                trial.orphans_after_gc = len(rt.orphans())
            lines = rt.wait()  # the runtime, and every plugin it left, have ended
        except BaseException:
            rt.abort()
            raise
        done = [x for x in lines if x.startswith("done")]
        trial.completed = bool(done)
        if done and not restart:
            self.calibration.setdefault((trial.impl, trial.op), []).append(
                float(done[0].split()[1])
            )
        if not restart:
            events = _events(world)
            trial.phase = classify(trial.op, cid, world.cache, events)
        if trial.mode == "none":
            trial.phase = "not killed"
            if not done:
                raise KillTestError(f"{trial.label()}: the operation failed:\n{rt._log()}")
        elif trial.mode == "instant" and done:
            raise KillTestError(f"{trial.label()}: the instant was never reached:\n{rt._log()}")
        errors = [e for e in events if e.endswith(" error")]
        if errors and trial.mode in ("none", "instant", "restart"):
            raise KillTestError(f"{trial.label()}: a plugin failed: {errors}\n{rt._log()}")

        if not restart:
            if trial.variant == "gone":
                world.ctr.delete()
            mid, _ = difference(snapshot(world), before)
            trial.before_gc = {k: mid[k] for k in RESOURCES}
            trial.gc_error = self._gc(world, trial.impl, valid, known)
        self._count(world, trial, before, neighbour)
        if trial.leaked and self.second_gc:
            trial.second_gc_error = self._gc(world, trial.impl, valid, known)
            counts, _ = difference(snapshot(world), before)
            trial.after_second_gc = {k: counts[k] for k in RESOURCES}

    def _kill_in_plugin(self, world: World, trial: Trial, rt: Runtime) -> None:
        """``restart``: SIGKILL the runtime alone ``trial.delay`` seconds after it started
        plugin ``trial.target`` (its ADD), and wait until it is dead."""
        want = f"start {trial.target} ADD"
        deadline = time.monotonic() + TIMEOUT
        while want not in _events(world):
            if rt.dead(0) or time.monotonic() > deadline:
                raise KillTestError(
                    f"{trial.label()}: the runtime ended without running {trial.target}:\n"
                    f"{rt._log()}"
                )
            time.sleep(0.002)
        time.sleep(trial.delay)
        rt.kill("process")
        if not rt.dead(TIMEOUT):
            raise KillTestError(f"{trial.label()}: the runtime outlived its SIGKILL")

    def _count(self, world: World, trial: Trial, before: Snapshot, neighbour: str) -> None:
        """What the trial left after the restarted runtime's gc (``trial.leaks`` and more)."""
        after = snapshot(world)
        counts, names = difference(after, before)
        trial.leaks = {k: counts[k] for k in RESOURCES}
        trial.temp, trial.locks = counts["temp"], counts["locks"]
        trial.torn = sum(1 for r in names["reservations"] if r.endswith("(holding '')"))
        trial.detail = "; ".join(
            f"{k}: {', '.join(v[:3])}{', ...' if len(v) > 3 else ''}"
            for k, v in names.items()
            if v and k in RESOURCES and k != "rules"  # the chains name them
        )
        if world.neighbour is not None:
            trial.neighbour_damage = _neighbour_damage(before, after, neighbour)

    # -- calibration: how long an operation takes here, now --------------------------

    def duration(self, impl: str, op: str) -> float:
        """A running estimate of the operation's length (seconds), measured on this machine."""
        runs = self.calibration.get((impl, op), [])
        if len(runs) < self.samples:
            for _ in range(self.samples - len(runs)):
                self.run(Trial(impl, op, "none"))
            runs = self.calibration[(impl, op)]
        return statistics.median(runs[-9:])


def _events(world: World) -> list[str]:
    """The runtime's log so far (``kill_runtime.py``: one line per event)."""
    try:
        return world.events.read_text().splitlines()
    except FileNotFoundError:
        return []


def _neighbour_damage(before: Snapshot, after: Snapshot, cid: str) -> list[str]:
    """What the live container had before the gc and lost (it must keep everything)."""
    lost = []
    for what in ("reservations", "veths", "chains", "entries"):
        gone = getattr(before, what) - getattr(after, what)
        lost += [f"{what}: {name}" for name in sorted(gone)]
    rules_gone = before.rules - after.rules
    lost += [f"rules: {r}" for r in sorted(rules_gone.elements())]
    if not any(owner == cid for owner in after.owners.values()):
        lost.append("its address reservation")
    return lost


# -- trial plans ---------------------------------------------------------------------

#: The exact instants random kills rarely hit, for each runtime (see kill_runtime.py
#: and the Go runtime's comment): (kill_at, mode) pairs.
PYTHON_INSTANTS = (
    "lock",
    "first-plugin",
    "ipam-reserved",
    "ipam-reserved-group",
    "after-plugin:bridge",
    "after-plugin:portmap",
    "cache-temp",
    "after-cache",
)
#: Instants at which a reference plugin is left in a state its own DEL cannot undo
#: (whatever the runtime does): the plugins' limits, measured apart.
PLUGIN_LIMIT_INSTANTS = ("ipam-torn", "masq-chain")
GO_INSTANTS = (
    "first-plugin",
    "ipam-reserved",
    "ipam-reserved-group",
    "after-plugin:bridge",
    "after-plugin:portmap",
    "after-cache",
)


def random_trials(
    runner: Runner,
    impl: str,
    op: str,
    mode: str,
    n: int,
    rng: random.Random,
    variants: Sequence[str] = ("kept", "plain", "kept", "gone", "neighbour"),
) -> Iterator[Trial]:
    """``n`` kills at uniformly random instants of the operation (0 to 1.1 times its length,
    re-measured as the trials go), cycling through ``variants``."""
    for i in range(n):
        length = runner.duration(impl, op)
        trial = Trial(
            impl, op, mode, variants[i % len(variants)], delay=rng.uniform(0, 1.1 * length)
        )
        yield runner.run(trial)


#: ``restart``: the variants (no ``gone``: a runtime restarted at once has its containers).
RESTART_VARIANTS = ("kept", "plain", "kept", "neighbour")


def restart_trials(
    runner: Runner,
    impl: str,
    op: str,
    n: int,
    rng: random.Random,
    variants: Sequence[str] = RESTART_VARIANTS,
) -> Iterator[Trial]:
    """``n`` kills of the runtime alone while one of its plugins runs, each restarted at once.

    Each plugin of the chain the runtime runs (``loopback`` for a setup, ``bridge``,
    ``portmap``) is the target in turn of a random choice; every plugin from the
    target on dawdles a random 0 to ``DAWDLE`` seconds (``host-local`` too, inside
    ``bridge``), those before it not at all (they have returned before the kill, how
    long they took changes nothing but the trial's length); the kill comes at a
    uniformly random instant of the target's run (its dawdle, ``host-local``'s for
    ``bridge``, and 0.1 s for the real plugin's own work).
    """
    chain = [t for _, _, types in networks_of(op) for t in types]
    for i in range(n):
        target = rng.choice(chain)
        later = chain[chain.index(target) :]
        if "bridge" in later:
            later.append("host-local")
        dawdles = {t: round(rng.uniform(0, DAWDLE), 3) for t in later}
        span = dawdles[target] + (dawdles["host-local"] if target == "bridge" else 0) + 0.1
        trial = Trial(
            impl,
            op,
            "restart",
            variants[i % len(variants)],
            delay=rng.uniform(0, span),
            target=target,
            dawdles=dawdles,
        )
        yield runner.run(trial)


def instant_trials(
    runner: Runner, impl: str, op: str, instants: Sequence[str], variant: str = "kept"
) -> Iterator[Trial]:
    for kill_at in instants:
        yield runner.run(Trial(impl, op, "instant", variant, kill_at=kill_at))


def clean_orphans() -> None:
    """Remove the namespaces of earlier runs that were killed before they could."""
    for name in orphaned_namespaces():
        Netns(name).delete()


def failures(trials: Sequence[Trial], allow: Sequence[str] = ()) -> list[str]:
    """The trials that leaked, described, but those whose leak is a plugin limit in ``allow``."""
    return [
        t.describe()
        for t in trials
        if t.leaked and not (t.plugin_limit and t.plugin_limit in allow)
    ]
