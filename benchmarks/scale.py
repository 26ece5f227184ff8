#!/usr/bin/env python3
"""Scale benchmarks (issue 23): what one container costs when the node holds many.

Curves, side by side with Go libcni where it has the same operation::

    python benchmarks/scale.py                      # everything (about 10 minutes)
    python benchmarks/scale.py --only files,conc    # some parts
    python benchmarks/scale.py --libcni /work/main  # another checkout's libcni (before/after)
    python benchmarks/scale.py --quick              # a smoke test

Parts (``--only``):

``entries``  teardown and inspect of one container against N cached entries of
             other containers (0, 1000, 5000); Go: DelNetworkList with the same
             cache.
``gc``       ``NetworkManager.gc(valid = every container)`` against N entries and
             against the number of networks (1, 10, 50 at 1000 entries);
             ``CNIConfig.gc_network_list`` of one network, and Go libcni 1.3's
             ``GCNetworkList`` when its source is in ``benchmarks/build/cni-v1.3.0``
             (``git archive v1.3.0`` of containernetworking/cni; built here with
             Debian's Go 1.19 and two stand-ins: ``slices.SortFunc``,
             ``errors.Join``); else "not available".
``gcref``    GC's optimisations (issue 29), the reference plugins' chain (bridge,
             host-local, portmap, firewall; 1.0.0, the highest they support: no
             GC verb, nothing stale, so no plugin runs): ``gc_networks`` of every
             network with one listing; ``gc_networks`` of one network at a time (a
             listing and the reads of each, as ``gc_network_list`` per network);
             and with every entry read (the entries of valid containers not
             settled by their names); Go 1.3's ``GCNetworkList`` for one network.
``files``    ``NetworkManager`` setup + teardown against the number of
             configuration files in ``conf_dir`` (1, 100, 1000); Go: the same
             add+del of the same lists (go-cni loads its configuration once,
             and reloads it from a file watcher goroutine).
``conc``     containers per second against K containers in flight (1, 8, 32,
             128): threads sharing a ``NetworkManager``, tasks sharing an
             ``AsyncNetworkManager`` (with the worst lag of a 10 ms heartbeat
             task on the loop, and when the first container was ready), and Go
             goroutines calling ``AddNetworkList``/``DelNetworkList`` as go-cni
             does; CPU per container of the runtime process (its plugins not
             counted).
``real``     ``conc`` with the reference plugins (bridge, host-local, portmap,
             firewall) in throwaway network namespaces (root only): a "host"
             namespace where the runtime runs, one namespace per container,
             all removed afterwards. Never the machine's own namespace.
             ``--rounds`` interleaved rounds (3), at least 48 containers per
             K: medians.

Every setup is loopback (``lo``) plus one network of a 3-plugin chain of the
static no-op plugin (``benchmarks/noop_plugin.c``), the cache on tmpfs.
Medians of interleaved rounds. Nothing here asserts: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.machinery
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
GO_SRC_13 = BUILD / "cni-v1.3.0"
NETNS = "/var/run/netns/bench"


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libcni", help="the checkout whose libcni to measure (default: this one)")
    ap.add_argument("--only", default="entries,gc,files,conc,real")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--ks", default="1,8,32,128", help="containers in flight for conc/real")
    ap.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds of real (medians are shown)"
    )
    ap.add_argument("--inner", help=argparse.SUPPRESS)  # the real part, inside the host netns
    return ap.parse_args()


ARGS = _args()
ROOT = Path(ARGS.libcni).resolve() if ARGS.libcni else HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))


class _ThisLibcni:
    """Finds ``libcni`` in ROOT first: an editable install's finder would win over sys.path."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if name == "libcni":
            return importlib.machinery.PathFinder.find_spec(name, [str(ROOT)])
        return None


sys.meta_path.insert(0, _ThisLibcni)  # type: ignore[arg-type]

from run import build_plugin, tmpfs_dir  # noqa: E402

import libcni  # noqa: E402
from libcni.cache import CacheEntry  # noqa: E402

FIGURES: dict[str, Any] = {}


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(f"\n## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    sys.stdout.flush()


def cpu_ns() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def switches() -> int:
    """Voluntary context switches of this process so far (every thread): its waits."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


# --------------------------------------------------------------------------- set-up


def plugin_dir() -> str:
    """The static no-op plugin, also as ``loopback`` (the manager's loopback network)."""
    d = build_plugin(static=True) or build_plugin()
    assert d is not None
    lo = Path(d) / "loopback"
    if not lo.exists():
        lo.symlink_to("noop")
    return d


def chain(name: str, version: str = "1.0.0") -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": name,
        "plugins": [{"type": "noop", "x": i} for i in range(3)],
    }


LOOPBACK = {"cniVersion": "1.0.0", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}


def go_env() -> dict[str, str]:
    return {**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "GOCACHE": str(BUILD / "gocache")}


def build_go() -> str | None:
    """``go_scale`` against Debian's Go libcni 1.1.2 (no GC), or ``None``."""
    go = shutil.which("go")
    if go is None or not os.path.isdir("/usr/share/gocode/src/github.com/containernetworking/cni"):
        print("Go libcni: not available (apt-get install golang-go golang-github-appc-cni-dev)")
        return None
    out = BUILD / "go_scale"
    srcs = list((HERE / "go_scale").glob("*.go"))
    if not out.exists() or out.stat().st_mtime < max(s.stat().st_mtime for s in srcs):
        env = {**go_env(), "GOPATH": "/usr/share/gocode"}
        subprocess.run([go, "build", "-o", str(out), "./go_scale"], cwd=HERE, env=env, check=True)
    return str(out)


_SLICES_SHIM = """package slices

import "sort"

// SortFunc stands in for Go 1.21's slices.SortFunc (building with an older Go).
func SortFunc[S ~[]E, E any](x S, cmp func(a, b E) int) {
\tsort.SliceStable(x, func(i, j int) bool { return cmp(x[i], x[j]) < 0 })
}
"""

_JOIN_SHIM = """package libcni

import "errors"

// joinErrors stands in for Go 1.20's errors.Join (building with an older Go).
func joinErrors(errs []error) error {
\tvar out string
\tfor _, e := range errs {
\t\tif e != nil {
\t\t\tif out != "" {
\t\t\t\tout += "\\n"
\t\t\t}
\t\t\tout += e.Error()
\t\t}
\t}
\tif out == "" {
\t\treturn nil
\t}
\treturn errors.New(out)
}
"""


def build_go13() -> str | None:
    """``go_scale`` with GC, against Go libcni 1.3 when its source is in ``build/cni-v1.3.0``."""
    go = shutil.which("go")
    if go is None or not (GO_SRC_13 / "libcni" / "api.go").exists():
        print(f"Go libcni 1.3 GC: not available (put the v1.3.0 source in {GO_SRC_13})")
        return None
    out = BUILD / "go_scale13"
    if out.exists():
        return str(out)
    gopath = BUILD / "gopath13"
    shutil.rmtree(gopath, ignore_errors=True)
    cni = gopath / "src" / "github.com" / "containernetworking" / "cni"
    shutil.copytree(GO_SRC_13, cni)
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout
    if tuple(int(p) for p in version.strip()[2:].split(".")[:2]) < (1, 21):
        (gopath / "src" / "slices").mkdir(parents=True)
        (gopath / "src" / "slices" / "slices.go").write_text(_SLICES_SHIM)
        api = cni / "libcni" / "api.go"
        text = api.read_text().replace("return errors.Join(errs...)", "return joinErrors(errs)")
        api.write_text(text.replace('\t"errors"\n', '\t_ "errors"\n', 1))
        (cni / "libcni" / "zz_join.go").write_text(_JOIN_SHIM)
    main = gopath / "src" / "goscale"
    shutil.copytree(HERE / "go_scale", main)
    env = {**go_env(), "GOPATH": str(gopath)}
    done = subprocess.run(
        [go, "build", "-tags", "cni13", "-o", str(out), "."],
        cwd=main,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"Go libcni 1.3 GC: not available (build failed: {done.stderr.strip()[-300:]})")
        return None
    return str(out)


def write_entries(
    cache_dir: str, n: int, networks: Sequence[str], version: str = "1.0.0"
) -> list[tuple[str, str]]:
    """``n`` cache entries of other containers (one per container, round robin over networks).

    The containers' IDs are 64 hexadecimal digits, as containerd, CRI-O and Podman
    make them: no dash, so an entry's file name says whose it is.
    """
    results = Path(cache_dir) / "results"
    results.mkdir(parents=True, exist_ok=True)
    result = {"cniVersion": version, "ips": [{"address": "10.0.0.2/24"}]}
    configs = {net: json.dumps(chain(net, version)).encode() for net in networks}
    out = []
    for i in range(n):
        net = networks[i % len(networks)]
        cid = f"{i:064x}"
        e = CacheEntry(cid, net, "eth0", configs[net], NETNS, (), {}, result)
        (results / f"{net}-{cid}-eth0").write_bytes(e.to_json())
        out.append((cid, "eth0"))
    return out


def conf_dir(root: str, files: int, networks: Sequence[dict[str, Any]]) -> str:
    d = os.path.join(root, "net.d")
    os.makedirs(d, exist_ok=True)
    for i, net in enumerate(networks):
        Path(d, f"{i:05d}-{net['name']}.conflist").write_text(json.dumps(net))
    for i in range(len(networks), files):
        Path(d, f"{i:05d}-other.conflist").write_text(json.dumps(chain(f"other{i}")))
    return d


# --------------------------------------------------------------------------- entries


def part_entries(pdir: str, go: str | None, rounds: int) -> None:
    rows = []
    base: dict[str, float] = {}
    for n in (0, 1000, 5000):
        with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as root:
            cache = os.path.join(root, "cache")
            write_entries(cache, n, ["bench"])
            conf = conf_dir(root, 1, [chain("bench")])
            m = libcni.NetworkManager(conf, [pdir], cache_dir=cache)
            gproc = None
            if go:
                gpath = os.path.join(root, "bench.conflist")
                Path(gpath).write_text(json.dumps(chain("bench")))
                gproc = subprocess.Popen(
                    [go, "del", pdir, gpath],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    bufsize=1,
                )
            td, ins, gdel = [], [], []
            for i in range(rounds + 5):
                cid = f"target-{i}"
                m.setup(cid, NETNS)
                t0 = time.perf_counter_ns()
                m.inspect(cid)
                t1 = time.perf_counter_ns()
                m.teardown(cid, NETNS)
                t2 = time.perf_counter_ns()
                if gproc is not None:
                    assert gproc.stdin is not None and gproc.stdout is not None
                    gproc.stdin.write(f"go-target-{i} {cache}\n")
                    reply = gproc.stdout.readline().strip()
                    if i >= 5:
                        gdel.append(int(reply))
                if i >= 5:
                    ins.append(t1 - t0)
                    td.append(t2 - t1)
            if gproc is not None:
                assert gproc.stdin is not None
                gproc.stdin.close()
                gproc.wait()
        t, s = med(td), med(ins)
        base.setdefault("td", t)
        base.setdefault("ins", s)
        g = med(gdel) if gdel else None
        FIGURES.setdefault("entries", {})[n] = {"teardown_ns": t, "inspect_ns": s, "go_del_ns": g}
        rows.append(
            [
                n,
                ms(t),
                f"{t / base['td']:.2f}x",
                ms(s),
                f"{s / base['ins']:.2f}x",
                ms(g) if g else "n/a",
            ]
        )
    table(
        "teardown / inspect of one container against N cached entries of others",
        [
            "N",
            "teardown (lo + 3 plugins)",
            "vs N=0",
            "inspect",
            "vs N=0",
            "Go DelNetworkList (3 plugins)",
        ],
        rows,
    )


# --------------------------------------------------------------------------- gc


def part_gc(pdir: str, go13: str | None, rounds: int) -> None:
    # 1.1.0: every plugin of every network gets a GC request (a plugin run each);
    # 1.0.0: no GC verb, so the figures are the cache's own work (listing, reading
    # the entries a network needs, deciding what is stale), Go's as well.
    for version, what in (("1.1.0", "with the plugins' GC"), ("1.0.0", "the cache's work alone")):
        gc_table(pdir, go13, rounds, version, what)


def gc_table(pdir: str, go13: str | None, rounds: int, version: str, what: str) -> None:
    rows = []
    cases = [(0, 1), (1000, 1), (5000, 1), (1000, 10), (1000, 50)]
    one_net: dict[int, float] = {}
    for n, nets in cases:
        names = [f"net{j:02d}" for j in range(nets)]
        with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as root:
            cache = os.path.join(root, "cache")
            valid = write_entries(cache, n, names, version)
            conf = conf_dir(root, nets, [chain(x, version) for x in names])
            m = libcni.NetworkManager(conf, [pdir], cache_dir=cache, loopback=False)
            keep = [cid for cid, _ in valid]
            cni = libcni.CNIConfig([pdir], cache_dir=cache)
            net0 = libcni.conf_list_from_bytes(json.dumps(chain(names[0], version)))
            args = libcni.GCArgs(
                valid_attachments=tuple(libcni.GCAttachment(c, i) for c, i in valid)
            )
            mg, one = [], []
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                m.gc(keep)
                t1 = time.perf_counter_ns()
                cni.gc_network_list(net0, args)
                t2 = time.perf_counter_ns()
                mg.append(t1 - t0)
                one.append(t2 - t1)
            g = None
            if go13 and nets == 1:
                vfile = os.path.join(root, "valid")
                Path(vfile).write_text("".join(f"{c} {i}\n" for c, i in valid))
                lpath = os.path.join(root, "net.conflist")
                Path(lpath).write_text(json.dumps(chain(names[0], version)))
                out = subprocess.run(
                    [go13, "gc", pdir, cache, lpath, vfile, str(rounds)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                g = med([int(x) for x in out.stdout.split()])
        a, b = med(mg), med(one)
        if nets == 1:
            one_net[n] = a
        FIGURES.setdefault(f"gc-{version}", {})[f"{n}x{nets}"] = {
            "manager_ns": a,
            "gc_network_list_ns": b,
            "go13_ns": g,
        }
        rows.append(
            [
                n,
                nets,
                ms(a),
                f"{a / one_net[n]:.2f}x" if n in one_net else "",
                ms(b),
                ms(g) if g else "n/a",
                f"{a / g:.2f}x / {b / g:.2f}x" if g else "",
            ]
        )
    table(
        f"gc(valid = every container), cniVersion {version}: {what}",
        [
            "entries",
            "networks",
            "NetworkManager.gc",
            "vs 1 network",
            "gc_network_list (1 network)",
            "Go 1.3 GCNetworkList",
            "manager / gc_network_list vs Go",
        ],
        rows,
    )


# --------------------------------------------------------------------------- gcref


def ref_chain(name: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "firewall"},
        ],
    }  # fmt: skip


def _gcref_times(
    cni: libcni.CNIConfig, lists: list[Any], keep: list[str], rounds: int
) -> dict[str, list[int]]:
    """The three ways of ``gcref``, interleaved: their times."""
    from libcni.cache._gc import GCScan

    real = GCScan._kept_by_name

    def read_all() -> None:
        GCScan._kept_by_name = lambda *a: False  # type: ignore[method-assign]
        try:
            cni.gc_networks(lists, valid_containers=keep)
        finally:
            GCScan._kept_by_name = real  # type: ignore[method-assign]

    def each() -> None:
        for x in lists:
            cni.gc_networks([x], valid_containers=keep)

    ways: dict[str, Callable[[], Any]] = {
        "one": lambda: cni.gc_networks(lists, valid_containers=keep),
        "each": each,
        "all": read_all,
    }
    times: dict[str, list[int]] = {k: [] for k in ways}
    for _ in range(rounds):
        for k, call in ways.items():
            t0 = time.perf_counter_ns()
            call()
            times[k].append(time.perf_counter_ns() - t0)
    return times


def part_gcref(go13: str | None, rounds: int) -> None:
    if not hasattr(libcni.CNIConfig, "gc_networks"):
        print("\ngcref: not available (this libcni has no gc_networks)")
        return
    pdir, rows = "/usr/lib/cni", []
    for n, nets in [(1000, 1), (5000, 1), (1000, 10), (1000, 50)]:
        names = [f"net{j:02d}" for j in range(nets)]
        lists = [libcni.conf_list_from_bytes(json.dumps(ref_chain(x))) for x in names]
        with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as root:
            cache = os.path.join(root, "cache")
            results = Path(cache, "results")
            results.mkdir(parents=True)
            keep = []
            for i in range(n):
                net, cid = names[i % nets], f"{i:064x}"
                config = json.dumps(ref_chain(net)).encode()
                e = CacheEntry(cid, net, "eth0", config, NETNS, (), {}, {"cniVersion": "1.0.0"})
                (results / f"{net}-{cid}-eth0").write_bytes(e.to_json())
                keep.append(cid)
            os.utime(results, (time.time() - 60,) * 2)  # settled: listed once
            times = _gcref_times(libcni.CNIConfig([pdir], cache_dir=cache), lists, keep, rounds)
            g = None
            if go13 and nets == 1:
                vfile = os.path.join(root, "valid")
                Path(vfile).write_text("".join(f"{c} eth0\n" for c in keep))
                lpath = os.path.join(root, "net.conflist")
                Path(lpath).write_text(json.dumps(ref_chain(names[0])))
                args = [go13, "gc", pdir, cache, lpath, vfile, str(rounds)]
                out = subprocess.run(args, capture_output=True, text=True, check=True)
                g = med([int(x) for x in out.stdout.split()])
        one, each, every = (med(times[k]) for k in ("one", "each", "all"))
        FIGURES.setdefault("gcref", {})[f"{n}x{nets}"] = {
            "one_listing_ns": one, "per_network_ns": each, "read_all_ns": every, "go13_ns": g
        }  # fmt: skip
        rows.append([n, nets, ms(one), f"{ms(each)} ({each / one:.2f}x)",
                     f"{ms(every)} ({every / one:.2f}x)",
                     f"{ms(g)} ({one / g:.2f}x)" if g else "n/a"])  # fmt: skip
    table(
        "GC's optimisations, the reference plugins' chain at 1.0.0 (valid = every container)",
        ["entries", "networks", "gc_networks", "one network at a time", "every entry read",
         "Go 1.3 GCNetworkList (gc_networks vs Go)"],
        rows,
    )  # fmt: skip


# --------------------------------------------------------------------------- files


def part_files(pdir: str, go: str | None, rounds: int) -> None:
    rows = []
    counts = (1, 100, 1000)
    with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as root:
        managers = {}
        for files in counts:
            r = os.path.join(root, str(files))
            conf = conf_dir(r, files, [chain("bench")])
            managers[files] = libcni.NetworkManager(
                conf, [pdir], cache_dir=os.path.join(r, "cache")
            )
            managers[files].networks()
        go_per: float | None = None
        if go:
            lpath = os.path.join(root, "bench.conflist")
            Path(lpath).write_text(json.dumps(chain("bench")))
            lo = os.path.join(root, "lo.conflist")
            Path(lo).write_text(json.dumps(LOOPBACK))
            cache = os.path.join(root, "gocache")
            n = rounds + 5
            r = conc_go(go, [lo, lpath], pdir, cache, 1, n, NETNS)
            go_per = 1e9 / r["per_s"]
        times: dict[int, list[int]] = {f: [] for f in counts}
        order = list(counts)
        shuffle = random.Random(1).shuffle
        for i in range(rounds + 5):
            shuffle(order)
            for files in order:
                m = managers[files]
                cid = f"c{i}"
                t0 = time.perf_counter_ns()
                m.setup(cid, NETNS)
                m.teardown(cid, NETNS)
                if i >= 5:
                    times[files].append(time.perf_counter_ns() - t0)
        one = med(times[1])
        for files in counts:
            t = med(times[files])
            FIGURES.setdefault("files", {})[files] = t
            rows.append([files, ms(t), f"{t / one:.2f}x", ""])
        if go_per:
            FIGURES["files"]["go"] = go_per
            rows.append(
                [
                    "Go (any: loaded once)",
                    ms(go_per),
                    "",
                    f"libcni 1000 files / Go: {med(times[1000]) / go_per:.2f}x",
                ]
            )
    table(
        "setup + teardown (lo + 3 plugins) against the configuration files in conf_dir",
        ["files", "time", "vs 1 file", ""],
        rows,
    )


# --------------------------------------------------------------------------- conc


class Heartbeat:
    """A task that wakes every 10 ms and keeps the worst lateness."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.stop = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stop:
            t = loop.time()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, loop.time() - t - 0.01)


def conc_threads(
    conf: str, pdir: str, cache: str, k: int, n: int, netns: Callable[[int], str]
) -> dict[str, float]:
    m = libcni.NetworkManager(conf, [pdir], cache_dir=cache)
    m.networks()
    lock = threading.Lock()
    state = {"next": 0, "first": 0.0}
    start = time.perf_counter()

    def work() -> None:
        while True:
            with lock:
                i = state["next"]
                state["next"] = i + 1
            if i >= n:
                return
            cid = f"t{i}"
            m.setup(cid, netns(i))
            if not state["first"]:
                state["first"] = time.perf_counter() - start
            m.teardown(cid, netns(i))

    c0, s0 = cpu_ns(), switches()
    start = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return {
        "per_s": n / elapsed,
        "cpu_ms": (cpu_ns() - c0) / n / 1e6,
        "first_s": state["first"],
        "switches": (switches() - s0) / n,
    }


class LoopTurns:
    """The CPU time of each turn of the event loop (its thread's, so that the machine's
    load does not count): the longest is how long a timer could wait on a quiet machine."""

    def __init__(self) -> None:
        import asyncio.base_events as base

        self.turns: list[float] = []
        self._base = base
        self._orig = base.BaseEventLoop._run_once
        turns = self.turns
        orig = self._orig

        def run_once(loop: Any) -> None:
            t = time.thread_time()
            orig(loop)
            turns.append(time.thread_time() - t)

        base.BaseEventLoop._run_once = run_once  # type: ignore[method-assign]

    def close(self) -> tuple[float, float]:
        """Undo; the worst turn and the 99th percentile (ms)."""
        self._base.BaseEventLoop._run_once = self._orig  # type: ignore[method-assign]
        turns = sorted(self.turns) or [0.0]
        return turns[-1] * 1e3, turns[int(len(turns) * 0.99)] * 1e3


def conc_tasks(
    conf: str, pdir: str, cache: str, k: int, n: int, netns: Callable[[int], str]
) -> dict[str, float]:
    async def main() -> dict[str, float]:
        m = libcni.AsyncNetworkManager(conf, [pdir], cache_dir=cache)
        await m.networks()
        beat = Heartbeat()
        hb = asyncio.ensure_future(beat.run())
        await asyncio.sleep(0.02)
        beat.worst = 0.0
        state = {"next": 0, "first": 0.0}
        start = time.perf_counter()

        async def work() -> None:
            while True:
                i = state["next"]
                state["next"] = i + 1
                if i >= n:
                    return
                cid = f"a{i}"
                await m.setup(cid, netns(i))
                if not state["first"]:
                    state["first"] = time.perf_counter() - start
                await m.teardown(cid, netns(i))

        c0, s0 = cpu_ns(), switches()
        start = time.perf_counter()
        turns.turns.clear()
        await asyncio.gather(*(work() for _ in range(k)))
        elapsed = time.perf_counter() - start
        cpu = cpu_ns() - c0
        sw = (switches() - s0) / n
        beat.stop = True
        await hb
        return {
            "per_s": n / elapsed,
            "cpu_ms": cpu / n / 1e6,
            "first_s": state["first"],
            "lag_ms": beat.worst * 1e3,
            "switches": sw,
        }

    turns = LoopTurns()
    try:
        out = asyncio.run(main())
    finally:
        out_turns = turns.close()
    out["turn_max_ms"], out["turn_p99_ms"] = out_turns
    return out


def conc_go(
    go: str, lists: Sequence[str], pdir: str, cache: str, k: int, n: int, netns: str
) -> dict[str, float]:
    out = subprocess.run(
        [go, "conc", pdir, cache, str(k), str(n), netns, *lists],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(out.stdout)
    if r["errors"]:
        raise RuntimeError(f"go_scale: {r['errors']} errors: {out.stderr[-500:]}")
    return {
        "per_s": n / (r["elapsed_ns"] / 1e9),
        "cpu_ms": r["cpu_ns"] / n / 1e6,
        "first_s": r["first_ns"] / 1e9,
    }


def run_conc(
    title: str,
    conf: str,
    pdir: str,
    go: str | None,
    go_lists: Sequence[str],
    ks: Sequence[int],
    n_of: Callable[[int], int],
    netns: Callable[[int], str],
    go_netns: str,
    rounds: int,
    key: str,
) -> None:
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as cache:  # warm-up: imports, first parses
        conc_threads(conf, pdir, cache, 2, 4, netns)
        conc_tasks(conf, pdir, cache, 2, 4, netns)
    for r in range(rounds):
        for k in ks:
            n = n_of(k)
            kinds = ["threads", "tasks"] + (["go"] if go else [])
            random.Random(r * 100 + k).shuffle(kinds)
            for kind in kinds:
                with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as cache:
                    if kind == "threads":
                        res = conc_threads(conf, pdir, cache, k, n, netns)
                    elif kind == "tasks":
                        res = conc_tasks(conf, pdir, cache, k, n, netns)
                    else:
                        assert go is not None
                        res = conc_go(go, go_lists, pdir, cache, k, n, go_netns)
                results.setdefault((kind, k), []).append(res)
    serial: dict[str, float] = {}
    rows = []
    for k in ks:
        row: list[Any] = [k]
        fig: dict[str, Any] = {}
        for kind in ("threads", "tasks", "go"):
            rs = results.get((kind, k))
            if not rs:
                row += ["n/a", "", ""]
                continue
            per_s = med([x["per_s"] for x in rs])
            cpu = med([x["cpu_ms"] for x in rs])
            first = med([x["first_s"] for x in rs])
            serial.setdefault(kind, cpu)
            fig[kind] = {"per_s": per_s, "cpu_ms": cpu, "first_s": first}
            sw = ""
            if "switches" in rs[0]:
                fig[kind]["switches"] = med([x["switches"] for x in rs])
                sw = f", {fig[kind]['switches']:.0f} sw"
            row += [
                f"{per_s:.0f}/s",
                f"{cpu:.2f} ms ({cpu / serial[kind]:.2f}x{sw})",
                f"{first * 1e3:.0f} ms",
            ]
            if kind == "tasks":
                lag = max(x["lag_ms"] for x in rs)
                turn = max(x["turn_max_ms"] for x in rs)
                fig[kind]["lag_ms"] = lag
                fig[kind]["turn_max_ms"] = turn
                row.append(f"{lag:.0f} ms (longest turn {turn:.0f} ms CPU)")
        go_rate = fig.get("go", {}).get("per_s")
        if go_rate:
            row.append(
                f"{fig['threads']['per_s'] / go_rate:.2f}x / {fig['tasks']['per_s'] / go_rate:.2f}x"
            )
        else:
            row.append("")
        rows.append(row)
        FIGURES.setdefault(key, {})[k] = fig
    table(
        title,
        [
            "K",
            "threads",
            "CPU/container (vs K=1, voluntary switches)",
            "first ready",
            "tasks",
            "CPU/container (vs K=1)",
            "first ready",
            "worst heartbeat lag",
            "Go",
            "Go CPU/container",
            "Go first ready",
            "threads / tasks vs Go",
        ],
        rows,
    )


def part_conc(pdir: str, go: str | None, ks: Sequence[int], rounds: int, quick: bool) -> None:
    with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as root:
        conf = conf_dir(root, 1, [chain("bench")])
        lo = os.path.join(root, "lo.conflist")
        net = os.path.join(root, "net.conflist")
        Path(lo).write_text(json.dumps(LOOPBACK))
        Path(net).write_text(json.dumps(chain("bench")))

        def n_of(k: int) -> int:
            return max(2 * k, 32 if quick else 96)

        run_conc(
            "containers per second against K in flight (static no-op plugin, cache on tmpfs)",
            conf, pdir, go, [lo, net], ks, n_of, lambda i: NETNS, NETNS, rounds, "conc",
        )  # fmt: skip


# --------------------------------------------------------------------------- real

REAL_PLUGINS = ("bridge", "host-local", "portmap", "firewall", "loopback")


def real_net(subnet: str, data_dir: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "benchnet",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cnibench0",
                "isGateway": True,
                "ipMasq": False,
                "ipam": {"type": "host-local", "subnet": subnet, "dataDir": data_dir},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "firewall", "backend": "iptables"},
        ],
    }


def part_real(ks: Sequence[int], go: str | None, rounds: int, quick: bool) -> None:
    """Outside: make the namespaces, run this script inside the host one, remove them all."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("\nreal plugins: not available (needs root and ip(8))")
        return
    if not all(os.path.exists(f"/usr/lib/cni/{p}") for p in REAL_PLUGINS):
        print("\nreal plugins: not available (needs the reference plugins in /usr/lib/cni)")
        return
    tag = f"libcni-bench-{os.getpid()}"
    host = f"{tag}-host"
    kmax = max(ks)
    ns = [f"{tag}-c{i}" for i in range(kmax * 2 if not quick else kmax)]
    made = []
    try:
        for name in [host, *ns]:
            subprocess.run(["ip", "netns", "add", name], check=True)
            made.append(name)
            subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--inner",
            f"{tag}-c%d:{len(ns)}",
            "--ks",
            ",".join(map(str, ks)),
            "--only",
            "real",
            "--rounds",
            str(ARGS.rounds),
        ]
        if ARGS.libcni:
            argv += ["--libcni", ARGS.libcni]
        if quick:
            argv.append("--quick")
        if ARGS.json:
            argv += ["--json", ARGS.json + ".real"]
        subprocess.run(["ip", "netns", "exec", host, *argv], check=True)
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "del", name], check=False)


def part_real_inner(spec: str, ks: Sequence[int], go: str | None, rounds: int, quick: bool) -> None:
    """Inside the host namespace: the runtime and its plugins; containers in their own."""
    template, count = spec.rsplit(":", 1)
    slots = int(count)
    with tempfile.TemporaryDirectory(dir=tmpfs_dir()) as root:
        data = os.path.join(root, "ipam")
        net = real_net("10.123.0.0/16", data)
        conf = conf_dir(root, 1, [net])
        lo = os.path.join(root, "lo.conflist")
        netf = os.path.join(root, "net.conflist")
        Path(lo).write_text(json.dumps(LOOPBACK))
        Path(netf).write_text(json.dumps(net))

        def n_of(k: int) -> int:  # at least 48 containers: a second or two at these rates
            return min(slots, max(2 * k, 16 if quick else 48))

        run_conc(
            "containers per second against K in flight, real plugins (bridge, host-local, portmap, firewall) in throwaway namespaces",
            conf, "/usr/lib/cni", go, [lo, netf], ks, n_of,
            lambda i: f"/run/netns/{template % (i % slots)}", f"/run/netns/{template}", rounds, "real",
        )  # fmt: skip


# --------------------------------------------------------------------------- main


def main() -> None:
    only = set(ARGS.only.split(","))
    ks = [int(k) for k in ARGS.ks.split(",")]
    quick = ARGS.quick
    print(f"libcni from {Path(libcni.__file__).parent}, Python {sys.version.split()[0]}")
    go = build_go()
    if ARGS.inner:
        part_real_inner(ARGS.inner, ks, go, 1 if quick else ARGS.rounds, quick)
    else:
        pdir = plugin_dir()
        if "entries" in only:
            part_entries(pdir, go, 20 if quick else 200)
        if "gc" in only:
            part_gc(pdir, build_go13(), 2 if quick else 5)
        if "gcref" in only:
            part_gcref(build_go13(), 2 if quick else 7)
        if "files" in only:
            part_files(pdir, go, 20 if quick else 150)
        if "conc" in only:
            part_conc(pdir, go, ks, 1 if quick else 3, quick)
        if "real" in only:
            part_real(ks, go, 1, quick)
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(FIGURES, indent=1, default=str))


if __name__ == "__main__":
    main()
