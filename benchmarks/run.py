#!/usr/bin/env python3
"""libcni benchmarks: the hot path against its floor, scaling, import time, cache and loading.

Run by hand from anywhere (it uses the libcni of this checkout)::

    python benchmarks/run.py            # the full run, a few minutes
    python benchmarks/run.py --quick    # fewer iterations, for a smoke test
    python benchmarks/run.py --only addel,import --json out.json
    python benchmarks/run.py --only tasks --fsync-delay 3   # as on a slow disk

It compiles ``benchmarks/noop_plugin.c`` with the system ``cc`` into
``benchmarks/build/`` (gitignored), then measures, each time side by side with
a floor or baseline measured in the same run:

``go``        the same add+del (of the no-op plugin linked statically, as Go
              plugins are), side by side with Go libcni (Debian's 1.1.2:
              ``benchmarks/go_driver``, built with ``golang-go`` against
              ``golang-github-appc-cni-dev`` when both are installed, skipped
              with a message otherwise), interleaved, with both caches on
              tmpfs and both on disk. Go never fsyncs its cache; libcni's
              durable write costs two fsyncs, measured on their own too.
``addel``     one ``add_network_list`` + ``del_network_list`` of a three-plugin
              chain of the no-op plugin, against the same six plugin runs done
              with the bare minimum (``os.posix_spawn``, two pipes, write stdin,
              read stdout to EOF, ``waitpid``); also against that floor plus
              the durable cache write behaviour.md section 7 requires, and
              libcni with its cache on tmpfs. The variants are interleaved, in
              a shuffled order, so that a change of machine load hits all
              alike. Median and p90.
``record``    what ADD's write-ahead record costs: add_network_list and
              del_network_list of a three-plugin chain whose plugins run in
              no time (an in-process Exec), cache on tmpfs, with and without
              the record (its write and removal made no-ops), interleaved.
``chain``     the same for chains of 1, 3 and 10 plugins.
``observers`` what observers cost per plugin run: add+del with no observer, one
              trivial observer, and the Prometheus and OpenTelemetry observers
              when their library is installed, interleaved; with the no-op
              plugin and with an ``Exec`` that starts no process.
``threads``   add+del throughput with 1, 2, 4, 8 threads (different containers),
              and the floor's throughput with as many threads; both also in
              as many forked processes (no shared GIL).
``tasks``     the same with 1, 2, 4, 8 asyncio tasks of one ``AsyncCNIConfig``.
``spawn``     the floor with 1 and 8 threads, with ``os.posix_spawn`` (which
              holds the GIL until the child has exec'd) and with ``subprocess``.
``import``    ``import libcni`` in a fresh interpreter, minus a bare start.
``cache``     ``get_cached_attachments(cid)`` among 10,000 cache entries.
``load``      ``load_conf_list`` in a directory of 1,000 configuration lists.
``manager``   ``NetworkManager`` setup + teardown of a container on loopback and
              two networks of the no-op plugin, serial and parallel, 1 and 8
              containers at once (threads, and asyncio tasks with
              ``AsyncNetworkManager``), against the same work written by hand
              with ``CNIConfig``/``AsyncCNIConfig`` calls (interleaved).

and prints a table: measurement, libcni, floor/baseline, ratio, target, met?
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = HERE / "build"
sys.path.insert(0, str(ROOT))

import libcni  # noqa: E402
from libcni._effects import RunPlugin, TakeLock  # noqa: E402
from libcni.cache import (  # noqa: E402
    CacheEntry,
    OpenRecord,
    ResultCache,
)
from libcni.invoke import RawExec  # noqa: E402

PLUGIN = "noop"
REAL_FSYNC = os.fsync
NETNS = "/var/run/netns/bench"


# --------------------------------------------------------------------------- setup


def build_plugin(static: bool = False) -> str | None:
    """Compile the no-op plugin (when the source is newer) and return its directory.

    ``static``: linked statically, as Go plugins are (no dynamic loader at
    each start), into ``build/static/``; ``None`` when the C library has no
    static form here.
    """
    out_dir = BUILD / "static" if static else BUILD
    out_dir.mkdir(parents=True, exist_ok=True)
    src, out = HERE / "noop_plugin.c", out_dir / PLUGIN
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        cc = os.environ.get("CC", "cc")
        flags = ["-O2", "-static"] if static else ["-O2"]
        done = subprocess.run([cc, *flags, "-o", str(out), str(src)], capture_output=static)
        if done.returncode != 0:
            if static:
                return None
            done.check_returncode()
    return str(out_dir)


def conflist(name: str, plugins: int, version: str = "1.0.0") -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": name,
        "plugins": [{"type": PLUGIN, "x": i} for i in range(plugins)],
    }


def net_of(plugins: int, name: str = "bench") -> libcni.NetworkConfigList:
    return libcni.conf_list_from_bytes(json.dumps(conflist(name, plugins)))


def rt(cid: str) -> libcni.RuntimeConf:
    return libcni.RuntimeConf(cid, netns=NETNS, ifname="eth0")


# --------------------------------------------------------------------------- the floor


class Recorder:
    """An ``Exec`` that runs plugins with ``RawExec`` and records every call."""

    def __init__(self) -> None:
        self.raw = RawExec()
        self.calls: list[tuple[str, bytes, dict[str, str]]] = []

    def exec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        self.calls.append((path, stdin, dict(env)))
        return self.raw.exec_plugin(path, stdin, env, timeout)

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        return self.raw.find_in_path(plugin, paths)


def record_calls(plugin_dir: str, plugins: int) -> list[tuple[str, bytes, dict[str, str]]]:
    """The exact (path, stdin, env) of each plugin run of one add+del."""
    rec = Recorder()
    with tempfile.TemporaryDirectory() as cache:
        cni = libcni.CNIConfig([plugin_dir], cache_dir=cache, exec=rec)
        net = net_of(plugins)
        cni.add_network_list(net, rt("floor"))
        cni.del_network_list(net, rt("floor"))
    return rec.calls


def bare_run(path: str, stdin: bytes, env: Mapping[str, str]) -> bytes:
    """The bare minimum to run a plugin: posix_spawn, two pipes, write, read to EOF, waitpid."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.posix_spawn(
        path,
        [path],
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, in_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
        ],
    )
    os.close(in_r)
    os.close(out_w)
    os.write(in_w, stdin)  # small: fits in the pipe
    os.close(in_w)
    chunks = []
    while chunk := os.read(out_r, 65536):
        chunks.append(chunk)
    os.close(out_r)
    os.waitpid(pid, 0)
    return b"".join(chunks)


def floor_once(calls: list[tuple[str, bytes, dict[str, str]]]) -> None:
    for path, stdin, env in calls:
        bare_run(path, stdin, env)


# --------------------------------------------------------------------------- statistics


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def ms(ns: float) -> float:
    return ns / 1e6


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str, str]] = []
        self.data: dict[str, Any] = {}

    def add(
        self,
        what: str,
        ours: str,
        base: str = "",
        ratio: str = "",
        target: str = "",
        met: bool | None = None,
    ) -> None:
        flag = "" if met is None else ("yes" if met else "NO")
        self.rows.append((what, ours, base, ratio, target, flag))
        print(f"  {what}: {ours} | {base} | {ratio} | {target} | {flag}", flush=True)

    def print(self) -> None:
        head = ("measurement", "libcni", "floor/baseline", "ratio", "target", "met?")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(6)]
        line = "  ".join("-" * w for w in widths)
        print()
        print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        print(line)
        for r in self.rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


# --------------------------------------------------------------------------- add+del


def durable_write(dfd: int, name: str, data: bytes) -> None:
    """What behaviour.md section 7 asks of every cache write, and nothing more:
    a temporary file, fsync, rename over the entry, fsync of the directory."""
    tmp = "." + name + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=dfd)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    os.fsync(dfd)


def interleaved(
    variants: dict[str, Callable[[int], None]], n: int, warmup: int
) -> dict[str, list[int]]:
    """Run the variants in turn, ``n`` rounds after ``warmup``; the ns of each run, by name.

    Interleaving makes a change of machine load hit every variant alike; the
    order is shuffled in each round, so that none always follows the same one.
    """
    for i in range(warmup):
        for run in variants.values():
            run(-1 - i)
    times: dict[str, list[int]] = {name: [] for name in variants}
    order = list(variants)
    shuffle = random.Random(42).shuffle
    clock = time.perf_counter_ns
    for i in range(n):
        shuffle(order)
        for name in order:
            run = variants[name]
            t0 = clock()
            run(i)
            times[name].append(clock() - t0)
    return times


def tmpfs_dir() -> str | None:
    """A directory on tmpfs (where fsync costs nothing), if there is one."""
    for d in ("/dev/shm", os.environ.get("XDG_RUNTIME_DIR", "")):
        if d and os.path.isdir(d) and os.access(d, os.W_OK):
            return d
    return None


def bench_addel(
    table: Table, plugin_dir: str, plugins: int, n: int, warmup: int, target: float | None
) -> None:
    calls = record_calls(plugin_dir, plugins)
    assert len(calls) == 2 * plugins, calls
    net = net_of(plugins)
    # The tmpfs variant shows libcni without the cost of fsync: not with --fsync-delay.
    shm = tmpfs_dir() if plugins == 3 and os.fsync is REAL_FSYNC else None
    with contextlib.ExitStack() as stack:
        cache = stack.enter_context(tempfile.TemporaryDirectory())
        cni = libcni.CNIConfig([plugin_dir], cache_dir=cache)
        entry = CacheEntry("c1", "bench", "eth0", net.bytes, NETNS, (), {}, {"x": 1}).to_json()
        floor_dir = stack.enter_context(tempfile.TemporaryDirectory())
        dfd = os.open(floor_dir, os.O_RDONLY | os.O_DIRECTORY)
        stack.callback(os.close, dfd)

        def ours(i: int) -> None:
            r = rt(f"c{i}")
            cni.add_network_list(net, r)
            cni.del_network_list(net, r)

        def floor_durable(i: int) -> None:
            # The ADD runs, the durable write, the DEL runs, the unlink.
            for path, stdin, env in calls[:plugins]:
                bare_run(path, stdin, env)
            durable_write(dfd, "entry", entry)
            for path, stdin, env in calls[plugins:]:
                bare_run(path, stdin, env)
            os.unlink("entry", dir_fd=dfd)

        variants: dict[str, Callable[[int], None]] = {
            "ours": ours,
            "floor": lambda i: floor_once(calls),
        }
        if shm:
            cni_shm = libcni.CNIConfig(
                [plugin_dir], cache_dir=stack.enter_context(tempfile.TemporaryDirectory(dir=shm))
            )

            def ours_shm(i: int) -> None:
                r = rt(f"c{i}")
                cni_shm.add_network_list(net, r)
                cni_shm.del_network_list(net, r)

            variants["ours_tmpfs"] = ours_shm
            variants["floor_durable"] = floor_durable
        times = interleaved(variants, n, warmup)
    a, b = times["ours"], times["floor"]
    med_a, med_b = statistics.median(a), statistics.median(b)
    ratio = med_a / med_b
    key = f"addel_{plugins}"
    table.data[key] = {
        name: {"median_ms": ms(statistics.median(t)), "p90_ms": ms(pct(t, 0.9))}
        for name, t in times.items()
    }
    table.add(
        f"add+del, {plugins}-plugin chain ({2 * plugins} runs), median",
        f"{ms(med_a):.2f} ms",
        f"{ms(med_b):.2f} ms",
        f"{ratio:.2f}x",
        f"<= {target:.2f}x" if target else "",
        None if target is None else ratio <= target,
    )
    table.add(
        f"add+del, {plugins}-plugin chain, p90",
        f"{ms(pct(a, 0.9)):.2f} ms",
        f"{ms(pct(b, 0.9)):.2f} ms",
        f"{pct(a, 0.9) / pct(b, 0.9):.2f}x",
    )
    if "floor_durable" in times:
        c = times["floor_durable"]
        med_c = statistics.median(c)
        table.add(
            "  same, vs floor + the durable cache write (2 fsyncs)",
            f"{ms(med_a):.2f} ms",
            f"{ms(med_c):.2f} ms",
            f"{med_a / med_c:.2f}x",
            f"<= {target:.2f}x" if target else "",
            None if target is None else med_a / med_c <= target,
        )
    if "ours_tmpfs" in times:
        d = times["ours_tmpfs"]
        med_d = statistics.median(d)
        table.add(
            "  same, cache on tmpfs (fsync free), vs floor",
            f"{ms(med_d):.2f} ms",
            f"{ms(med_b):.2f} ms",
            f"{med_d / med_b:.2f}x",
            f"<= {target:.2f}x" if target else "",
            None if target is None else med_d / med_b <= target,
        )


# --------------------------------------------------------------------------- observers


class NoIO(libcni.CNIConfig):
    """A ``CNIConfig`` that performs no effect: plugins answer at once, no lock, no cache write.

    What is left of an add+del is the library's own work (requests,
    environment, results, the drivers) and, with observers, the events: the
    part observers add to, measured without the noise of processes and files.
    """

    RESULT = b'{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.3/24"}]}'

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, RunPlugin):
            return self.RESULT if effect.command == "ADD" else b""
        if isinstance(effect, TakeLock):
            return lambda: None
        return None  # CacheIO: the write and the removal are skipped

    def _find(self, plugin_type: str) -> str:
        return os.path.join(self.path[0], plugin_type)


def optional_observers() -> dict[str, Any]:
    """The ready observers whose library is installed (``libcni[prometheus]``, ``libcni[otel]``)."""
    out: dict[str, Any] = {}
    try:
        from prometheus_client import CollectorRegistry

        from libcni.metrics import PrometheusObserver

        out["prometheus"] = PrometheusObserver(CollectorRegistry())
    except ImportError:
        pass
    try:
        from opentelemetry.sdk.trace import TracerProvider

        from libcni.tracing import OpenTelemetryObserver

        # Spans made and ended (sampled), exported nowhere: the observer's own cost.
        out["otel"] = OpenTelemetryObserver(TracerProvider())
    except ImportError:
        pass
    return out


def bench_observers(table: Table, plugin_dir: str, n: int, warmup: int) -> None:
    """What observers cost per plugin run: add+del of a 3-plugin chain (6 runs, 2 operations).

    Interleaved: no observer, one trivial observer (``lambda event: None``)
    and, when their library is installed, the Prometheus and OpenTelemetry
    observers; with the no-op plugin (cache on tmpfs), and again with no I/O
    at all (:class:`NoIO`), where the library's own work is all that is
    timed and the difference stands out of the noise. The overhead per plugin
    run is the difference of the medians divided by 6 (it includes the two
    operation events of each add+del).
    """
    net = net_of(3)
    runs = 6
    observers: dict[str, list[Any]] = {"none": [], "trivial": [lambda event: None]}
    observers.update({name: [obs] for name, obs in optional_observers().items()})
    shm = tmpfs_dir()
    with contextlib.ExitStack() as stack:
        for how, cls, rounds in (("no-op plugin", libcni.CNIConfig, n), ("no I/O", NoIO, n * 10)):
            variants: dict[str, Callable[[int], None]] = {}
            for name, obs in observers.items():
                cache = stack.enter_context(tempfile.TemporaryDirectory(dir=shm))
                cni = cls([plugin_dir], cache_dir=cache, observers=obs)

                def run(i: int, cni: libcni.CNIConfig = cni) -> None:
                    r = rt(f"c{i}")
                    cni.add_network_list(net, r)
                    cni.del_network_list(net, r)

                variants[name] = run
            times = interleaved(variants, rounds, warmup)
            base = statistics.median(times["none"])
            table.data[f"observers, {how}"] = {
                name: {"median_ms": ms(statistics.median(t))} for name, t in times.items()
            }
            for name in observers:
                if name == "none":
                    continue
                med = statistics.median(times[name])
                per_run_us = (med - base) / runs / 1000
                table.add(
                    f"observer {name}, add+del ({how}), overhead per plugin run",
                    f"{per_run_us:+.2f} us ({ms(med):.3f} ms)",
                    f"no observer {ms(base):.3f} ms",
                    f"{med / base:.3f}x",
                    "<= 5 us" if name == "trivial" else "",
                    per_run_us <= 5 if name == "trivial" else None,
                )


# --------------------------------------------------------------------------- Go libcni

GOPATH = "/usr/share/gocode"  # where Debian's golang-*-dev packages put Go sources
GO_LIBCNI = f"{GOPATH}/src/github.com/containernetworking/cni/libcni"


def build_go_driver() -> str | None:
    """Build ``go_driver`` against Debian's Go libcni; ``None`` (and why) when it cannot be."""
    go = shutil.which("go")
    if go is None or not os.path.isdir(GO_LIBCNI):
        print(
            "  go: skipped, needs Debian's golang-go and golang-github-appc-cni-dev "
            "(apt-get install golang-go golang-github-appc-cni-dev)",
            flush=True,
        )
        return None
    BUILD.mkdir(exist_ok=True)
    src, out = HERE / "go_driver" / "main.go", BUILD / "go_driver"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        env = {**os.environ, "GO111MODULE": "off", "GOPATH": GOPATH, "GOFLAGS": ""}
        env.setdefault("GOCACHE", str(BUILD / "gocache"))
        subprocess.run([go, "build", "-o", str(out), "./go_driver"], cwd=HERE, env=env, check=True)
    return str(out)


class GoDriver:
    """A running ``go_driver``: one add+del of Go libcni per request, timed by Go itself."""

    def __init__(self, binary: str, conflist_path: str, plugin_dir: str) -> None:
        self.proc = subprocess.Popen(
            [binary, conflist_path, plugin_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def addel(self, cid: str, cache_dir: str) -> int:
        """The nanoseconds one AddNetworkList + DelNetworkList took in Go."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{cid} {cache_dir}\n")
        reply = self.proc.stdout.readline().strip()
        if not reply.isdigit():
            raise RuntimeError(f"go_driver: {reply or 'no answer'}")
        return int(reply)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def bench_go(table: Table, plugin_dir: str, n: int, warmup: int) -> None:
    """add+del of a 3-plugin chain: libcni and Go libcni interleaved, caches on tmpfs and on disk.

    Go's figure is the time Go measured around its two calls, so the pipe to
    the driver costs it nothing; libcni's is measured the same way, around its
    two calls. A variant "fsyncs" times the durable write's two fsyncs alone.
    """
    binary = build_go_driver()
    if binary is None:
        return
    # As the comparison was first made: a statically linked no-op plugin.
    static = build_plugin(static=True)
    if static is None:
        print("  go: no static C library (libc6-dev), using the dynamic plugin", flush=True)
    else:
        plugin_dir = static
    shm = tmpfs_dir()
    if shm is None or os.fsync is not REAL_FSYNC:
        print("  go: skipped, needs a tmpfs directory and the real fsync", flush=True)
        return
    net = net_of(3)
    clock = time.perf_counter_ns
    with contextlib.ExitStack() as stack:
        conf = stack.enter_context(tempfile.TemporaryDirectory())
        conf_path = os.path.join(conf, "bench.conflist")
        Path(conf_path).write_text(json.dumps(conflist("bench", 3)))
        go = GoDriver(binary, conf_path, plugin_dir)
        stack.callback(go.close)
        dirs = {
            "tmpfs": stack.enter_context(tempfile.TemporaryDirectory(dir=shm)),
            "disk": stack.enter_context(tempfile.TemporaryDirectory()),
        }
        cnis = {where: libcni.CNIConfig([plugin_dir], cache_dir=d) for where, d in dirs.items()}
        dfd = os.open(dirs["disk"], os.O_RDONLY | os.O_DIRECTORY)
        stack.callback(os.close, dfd)
        entry = CacheEntry("c1", "bench", "eth0", net.bytes, NETNS, (), {}, {"x": 1}).to_json()

        def ours(where: str) -> Callable[[int], int]:
            cni = cnis[where]

            def run(i: int) -> int:
                r = rt(f"py{i}")
                t0 = clock()
                cni.add_network_list(net, r)
                cni.del_network_list(net, r)
                return clock() - t0

            return run

        def theirs(where: str) -> Callable[[int], int]:
            return lambda i: go.addel(f"go{i}", dirs[where])

        def fsyncs(i: int) -> int:
            fd = os.open("entry", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=dfd)
            try:
                os.write(fd, entry)
                t0 = clock()
                os.fsync(fd)
                os.fsync(dfd)
                return clock() - t0
            finally:
                os.close(fd)
                os.unlink("entry", dir_fd=dfd)

        variants: dict[str, Callable[[int], int]] = {"fsyncs": fsyncs}
        for where in dirs:
            variants[f"ours_{where}"] = ours(where)
            variants[f"go_{where}"] = theirs(where)
        for i in range(warmup):
            for run in variants.values():
                run(-1 - i)
        times: dict[str, list[int]] = {name: [] for name in variants}
        order = list(variants)
        shuffle = random.Random(7).shuffle
        for i in range(n):
            shuffle(order)
            for name in order:
                times[name].append(variants[name](i))
    med = {name: statistics.median(t) for name, t in times.items()}
    table.data["go"] = {
        name: {"median_ms": ms(m), "p90_ms": ms(pct(times[name], 0.9))} for name, m in med.items()
    }
    for where, target in (("tmpfs", 0.9), ("disk", None)):
        ratio = med[f"ours_{where}"] / med[f"go_{where}"]
        table.add(
            f"add+del, 3 plugins, cache on {where}: libcni vs Go libcni 1.1.2",
            f"{ms(med[f'ours_{where}']):.2f} ms",
            f"{ms(med[f'go_{where}']):.2f} ms",
            f"{ratio:.2f}x",
            f"<= {target:.2f}x" if target else "",
            None if target is None else ratio <= target,
        )
    allowance = med["go_disk"] + med["fsyncs"]
    table.add(
        "  on disk, vs Go + the durable write's 2 fsyncs (Go does none)",
        f"{ms(med['ours_disk']):.2f} ms",
        f"{ms(allowance):.2f} ms",
        f"{med['ours_disk'] / allowance:.2f}x",
        "<= 1.00x",
        med["ours_disk"] <= allowance,
    )


# --------------------------------------------------------------------------- parallelism


def run_threads(workers: int, per_worker: int, body: Callable[[int, int], None]) -> float:
    """Run ``body(worker, i)`` ``per_worker`` times in each of ``workers`` threads; ops/s."""
    start = threading.Barrier(workers + 1)

    def loop(w: int) -> None:
        start.wait()
        for i in range(per_worker):
            body(w, i)

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return workers * per_worker / (time.perf_counter() - t0)


def run_processes(workers: int, per_worker: int, body: Callable[[int, int], None]) -> float:
    """As :func:`run_threads`, in forked processes (one GIL each); ops/s."""
    go_r, go_w = os.pipe()
    pids = []
    for w in range(workers):
        pid = os.fork()
        if pid == 0:  # the child: wait for the start, work, leave without cleanup
            code = 0
            try:
                os.read(go_r, 1)
                for i in range(per_worker):
                    body(w, i)
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    time.sleep(0.2)  # let every child reach its read
    t0 = time.perf_counter()
    os.write(go_w, b"x" * workers)
    failed = 0
    for pid in pids:
        failed += os.waitpid(pid, 0)[1] != 0
    elapsed = time.perf_counter() - t0
    os.close(go_r)
    os.close(go_w)
    if failed:
        raise RuntimeError(f"{failed} benchmark processes failed")
    return workers * per_worker / elapsed


def rounds_of(counts: Sequence[int], rounds: int) -> list[int]:
    """The worker counts, each ``rounds`` times, shuffled within each round."""
    rng = random.Random(7)
    out: list[int] = []
    for _ in range(rounds):
        r = list(counts)
        rng.shuffle(r)
        out += r
    return out


def bench_threads(
    table: Table,
    plugin_dir: str,
    total: int,
    counts: Sequence[int],
    rounds: int,
    processes: bool = True,
) -> None:
    """Throughput with k threads of one ``CNIConfig``, and the floor with k threads.

    With ``processes``, also both in k forked processes: the same work without
    a shared GIL, which shows how much of the ceiling is the interpreter's.
    """
    calls = record_calls(plugin_dir, 3)
    net = net_of(3)
    with tempfile.TemporaryDirectory() as cache:
        cni = libcni.CNIConfig([plugin_dir], cache_dir=cache)
        tag = [0]

        def ours(w: int, i: int) -> None:
            r = rt(f"t{tag[0]}-{w}-{i}")
            cni.add_network_list(net, r)
            cni.del_network_list(net, r)

        run_threads(2, 10, ours)  # warm-up
        kinds: dict[str, Callable[[int, int], None]] = {
            "threads": ours,
            "floor_threads": lambda w, i: floor_once(calls),
        }
        if processes:
            kinds["processes"] = ours
            kinds["floor_processes"] = lambda w, i: floor_once(calls)
        ops: dict[str, dict[int, list[float]]] = {kind: {k: [] for k in counts} for kind in kinds}
        for k in rounds_of(counts, rounds):
            per = max(1, total // k)
            for kind, body in kinds.items():
                tag[0] += 1
                runner = run_processes if kind.endswith("processes") else run_threads
                ops[kind][k].append(runner(k, per, body))
    med = {kind: {k: statistics.median(v) for k, v in m.items()} for kind, m in ops.items()}
    table.data["threads"] = ops
    for kind, what in (("threads", "thread"), ("processes", "process")):
        if kind not in med:
            continue
        m, f = med[kind], med[f"floor_{kind}"]
        one, one_floor = m[counts[0]], f[counts[0]]
        for k in counts:
            target = 1.6 if k == 8 and kind == "threads" else None
            table.add(
                f"{kind} x{k}: add+del/s (3 plugins), vs 1 {what}",
                f"{m[k]:.0f}/s ({m[k] / one:.2f}x)",
                f"floor {f[k]:.0f}/s ({f[k] / one_floor:.2f}x)",
                f"{m[k] / f[k]:.2f} of floor",
                f">= 1.60x of 1 {what}" if target else "",
                None if target is None else m[k] / one >= target,
            )


def popen_run(path: str, stdin: bytes, env: Mapping[str, str]) -> bytes:
    """The floor's plugin run through ``subprocess`` (which drops the GIL around vfork)."""
    # A process group (3.11+) makes subprocess use its own vfork+exec, not os.posix_spawn.
    group: dict[str, Any] = {"process_group": 0}
    p = subprocess.Popen(
        [path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=False, **group
    )
    out: bytes = p.communicate(stdin)[0]
    return out


def bench_spawn(table: Table, plugin_dir: str, total: int, rounds: int) -> None:
    """The floor in 1 and 8 threads, starting plugins with os.posix_spawn or subprocess.

    ``os.posix_spawn`` holds the GIL until the vfork'ed child has exec'd;
    ``subprocess`` (CPython gh-104372) does not. This is what bounds thread
    scaling, whatever the library does around the spawn.
    """
    if sys.version_info < (3, 11):
        return  # process_group= is 3.11+
    calls = record_calls(plugin_dir, 3)
    runners: dict[str, Callable[[str, bytes, Mapping[str, str]], bytes]] = {
        "os.posix_spawn": bare_run,
        "subprocess.Popen": popen_run,
    }
    ops: dict[str, dict[int, list[float]]] = {name: {1: [], 8: []} for name in runners}
    for k in rounds_of((1, 8), rounds):
        for name, runner in runners.items():

            def body(w: int, i: int, runner: Any = runner) -> None:
                for path, stdin, env in calls:
                    runner(path, stdin, env)

            ops[name][k].append(run_threads(k, max(1, total // k), body))
    table.data["spawn"] = ops
    for name, m in ops.items():
        one, eight = statistics.median(m[1]), statistics.median(m[8])
        table.add(
            f"floor with {name}: 8 threads vs 1 (info)",
            f"{eight:.0f}/s vs {one:.0f}/s",
            "",
            f"{eight / one:.2f}x",
        )


def bench_tasks(
    table: Table, plugin_dir: str, total: int, counts: Sequence[int], rounds: int
) -> None:
    net = net_of(3)

    async def run(cni: Any, k: int, per: int, tag: str) -> float:
        async def one(w: int) -> None:
            for i in range(per):
                r = rt(f"a{tag}-{w}-{i}")
                await cni.add_network_list(net, r)
                await cni.del_network_list(net, r)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(w) for w in range(k)))
        return k * per / (time.perf_counter() - t0)

    async def main() -> dict[int, list[float]]:
        with tempfile.TemporaryDirectory() as cache:
            cni = libcni.AsyncCNIConfig([plugin_dir], cache_dir=cache)
            await run(cni, 2, 10, "w")
            out: dict[int, list[float]] = {k: [] for k in counts}
            for n, k in enumerate(rounds_of(counts, rounds)):
                out[k].append(await run(cni, k, max(1, total // k), f"{n}"))
            return out

    results = asyncio.run(main())
    med = {k: statistics.median(v) for k, v in results.items()}
    one = med[counts[0]]
    table.data["tasks"] = results
    for k in counts:
        target = 1.6 if k == 8 else None
        table.add(
            f"asyncio tasks x{k}: add+del/s (3 plugins), vs 1 task",
            f"{med[k]:.0f}/s ({med[k] / one:.2f}x)",
            "",
            "",
            ">= 1.60x of 1 task" if target else "",
            None if target is None else med[k] / one >= target,
        )


# --------------------------------------------------------------------------- manager


def bench_manager(table: Table, plugin_dir: str, rounds: int, counts: Sequence[int]) -> None:
    """NetworkManager setup+teardown (lo + 2 networks) against the same CNIConfig calls."""
    from concurrent.futures import ThreadPoolExecutor

    from libcni.manager._state import LOOPBACK_CONFIG

    # The cache on tmpfs when there is one: the manager adds no cache write, and the
    # disk's fsync times (the same for both) would only bury its own cost in noise.
    shm = tmpfs_dir() if os.fsync is REAL_FSYNC else None
    where = " (cache on tmpfs)" if shm else ""
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        bindir, conf = Path(tmp, "bin"), Path(tmp, "net.d")
        bindir.mkdir()
        conf.mkdir()
        for name in (PLUGIN, "loopback"):
            (bindir / name).symlink_to(Path(plugin_dir, PLUGIN))
        for i in (1, 2):
            (conf / f"{i}0-net{i}.conflist").write_text(json.dumps(conflist(f"net{i}", 1)))
        # The steady state of a runtime: the configuration was written a while ago.
        past = time.time() - 60
        for path in (*conf.iterdir(), conf, bindir):
            os.utime(path, (past, past), follow_symlinks=False)
        cache = str(Path(tmp, "cache"))
        m = libcni.NetworkManager(conf, [bindir], cache_dir=cache, max_networks=0)
        am = libcni.AsyncNetworkManager(conf, [bindir], cache_dir=cache, max_networks=0)
        cni = libcni.CNIConfig([bindir], cache_dir=cache)
        acni = libcni.AsyncCNIConfig([bindir], cache_dir=cache)
        lo = libcni.conf_list_from_bytes(LOOPBACK_CONFIG)
        nets = [libcni.load_conf_list(conf, f"net{i}") for i in (1, 2)]

        def rts(cid: str) -> list[libcni.RuntimeConf]:
            return [libcni.RuntimeConf(cid, NETNS, ifname) for ifname in ("lo", "eth0", "eth1")]

        def hand(cid: str, parallel: bool) -> None:
            r = rts(cid)
            cni.add_network_list(lo, r[0])
            if parallel:
                with ThreadPoolExecutor(2) as pool:
                    list(pool.map(cni.add_network_list, nets, r[1:]))
            else:
                for net, rc in zip(nets, r[1:], strict=True):
                    cni.add_network_list(net, rc)
            for net, rc in reversed(list(zip([lo, *nets], r, strict=True))):
                cni.del_network_list(net, rc)

        def managed(cid: str, parallel: bool) -> None:
            m.setup(cid, NETNS, parallel=parallel)
            m.teardown(cid, NETNS)

        async def ahand(cid: str, parallel: bool) -> None:
            r = rts(cid)
            await acni.add_network_list(lo, r[0])
            if parallel:
                await asyncio.gather(*map(acni.add_network_list, nets, r[1:]))
            else:
                for net, rc in zip(nets, r[1:], strict=True):
                    await acni.add_network_list(net, rc)
            for net, rc in reversed(list(zip([lo, *nets], r, strict=True))):
                await acni.del_network_list(net, rc)

        async def amanaged(cid: str, parallel: bool) -> None:
            await am.setup(cid, NETNS, parallel=parallel)
            await am.teardown(cid, NETNS)

        # Wall time, and this process's CPU time (the plugins' own is not counted):
        # the manager's own cost, and the measure least disturbed by a loaded machine.
        def threads(
            body: Callable[[str, bool], None], k: int, parallel: bool, tag: str
        ) -> tuple[float, float]:
            t0, c0 = time.perf_counter(), time.process_time()
            if k == 1:
                body(f"{tag}-0", parallel)
            else:
                with ThreadPoolExecutor(k) as pool:
                    list(pool.map(lambda w: body(f"{tag}-{w}", parallel), range(k)))
            return time.perf_counter() - t0, time.process_time() - c0

        def tasks(
            body: Callable[[str, bool], Any], k: int, parallel: bool, tag: str
        ) -> tuple[float, float]:
            async def go() -> tuple[float, float]:
                t0, c0 = time.perf_counter(), time.process_time()
                await asyncio.gather(*(body(f"{tag}-{w}", parallel) for w in range(k)))
                return time.perf_counter() - t0, time.process_time() - c0

            return asyncio.run(go())

        results: dict[str, dict[str, list[float]]] = {}
        variants = [
            (api, k, parallel)
            for api in ("threads", "tasks")
            for k in counts
            for parallel in (False, True)
        ]
        for api, k, parallel in variants:
            runner = threads if api == "threads" else tasks
            pair = {
                "manager": managed if api == "threads" else amanaged,
                "hand": hand if api == "threads" else ahand,
            }
            times: dict[str, list[float]] = {"manager": [], "hand": []}
            cpu: dict[str, list[float]] = {"manager": [], "hand": []}
            for i in range(-2, rounds):  # two warm-up rounds
                order = ["manager", "hand"] if i % 2 else ["hand", "manager"]
                for name in order:
                    t, c = runner(pair[name], k, parallel, f"{name}{api}{k}{parallel}{i}")  # type: ignore[arg-type]
                    if i >= 0:
                        times[name].append(t)
                        cpu[name].append(c)
            key = f"{api} x{k} {'parallel' if parallel else 'serial'}"
            results[key] = {"wall": times, "cpu": cpu}  # type: ignore[assignment]
            mine, base = statistics.median(times["manager"]), statistics.median(times["hand"])
            cmine, cbase = statistics.median(cpu["manager"]), statistics.median(cpu["hand"])
            table.add(
                f"manager setup+teardown, lo + 2 networks, {key}{where}: wall (CPU)",
                f"{mine * 1000:.1f} ms ({cmine * 1000:.1f})",
                f"{base * 1000:.1f} ms ({cbase * 1000:.1f}) by hand",
                f"{mine / base:.2f}x ({cmine / cbase:.2f}x)",
                "<= 1.10x",
                mine / base <= 1.10,
            )
        table.data["manager"] = results


# --------------------------------------------------------------------------- import time


def _spawn_ms(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, cwd="/")
    return (time.perf_counter() - t0) * 1000


#: The budget of ``import libcni`` (issue 12): the wall measure "as installed"
#: and the -X importtime total.
IMPORT_TARGET_MS = 35


def bench_import(table: Table, runs: int) -> None:
    exe = sys.executable
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    # Check once: compiled bytecode is there, asyncio is not imported.
    out = subprocess.run(
        [exe, "-c", "import sys, libcni; print('asyncio' in sys.modules)"],
        cwd="/",
        env=dict(env, PYTHONDONTWRITEBYTECODE=""),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # 1. As users start it: site, with whatever .pth files this interpreter has.
    # 2. Clean: no site processing (-S), site-packages put on the path by hand, so
    #    that modules pre-imported by .pth files do not hide libcni's own cost.
    purelib = sysconfig.get_paths()["purelib"]
    clean = f"import sys; sys.path += [{str(ROOT)!r}, {purelib!r}]"
    variants = {
        "normal": ([exe, "-c", "pass"], [exe, "-c", "import libcni"]),
        "clean": ([exe, "-S", "-c", clean], [exe, "-S", "-c", clean + "; import libcni"]),
    }
    for name, (bare_argv, lib_argv) in variants.items():
        bare, lib = [], []
        for _ in range(3):
            _spawn_ms(bare_argv, env)
            _spawn_ms(lib_argv, env)
        for _ in range(runs):
            bare.append(_spawn_ms(bare_argv, env))
            lib.append(_spawn_ms(lib_argv, env))
        b, lb = statistics.median(bare), statistics.median(lib)
        table.data[f"import_{name}"] = {"bare_ms": b, "with_libcni_ms": lb, "libcni_ms": lb - b}
        label = "site as installed" if name == "normal" else "clean, python -S"
        table.add(
            f"import libcni ({label}), median of {runs}",
            f"{lb - b:.1f} ms",
            f"bare start {b:.1f} ms",
            f"{lb / b:.2f}x start",
            f"< {IMPORT_TARGET_MS} ms" if name == "normal" else "",
            (lb - b < IMPORT_TARGET_MS) if name == "normal" else None,
        )
    # 3. In-process only (no interpreter start or teardown): -X importtime's total.
    cumulative = []
    for _ in range(runs):
        err = subprocess.run(
            [exe, "-X", "importtime", "-c", "import libcni"],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        for line in err.splitlines():
            if line.rstrip().endswith("| libcni"):
                cumulative.append(int(line.split("|")[1]) / 1000)
    if cumulative:
        c = statistics.median(cumulative)
        table.data["import_importtime_ms"] = c
        table.add(
            f"import libcni (-X importtime total), median of {runs}",
            f"{c:.1f} ms",
            "",
            "",
            f"< {IMPORT_TARGET_MS} ms",
            c < IMPORT_TARGET_MS,
        )
    table.add("import libcni imports asyncio", out, "", "", "False", out == "False")


# --------------------------------------------------------------------------- cache and loading


def bench_cache(table: Table, entries: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        cache = ResultCache(d)
        results = Path(cache.results_dir)
        results.mkdir(parents=True)
        config = json.dumps(conflist("net", 3)).encode()
        result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
        target = "target-container"
        nets = 4
        # Entries are encoded by the cache module; written without fsync, for speed.
        for i in range(entries):
            if i < nets:
                cid, net = target, f"net{i}"
            else:
                cid, net = f"container-{i // nets:05d}", f"net{i % nets}"
            e = CacheEntry(cid, net, "eth0", config, NETNS, (("K", "V"),), {}, result)
            name = f"{net}-{cid}-eth0"
            (results / name).write_bytes(e.to_json())
        cni = libcni.CNIConfig(["/nonexistent"], cache_dir=d)
        assert len(cni.get_cached_attachments(target)) == nets
        assert len(os.listdir(results)) == entries

        def floor() -> None:
            # The least that can answer: list the directory, read the matching files.
            part = f"-{target}-"
            for name in os.listdir(results):
                if part in name:
                    json.loads((results / name).read_bytes())

        a, b = [], []
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            cni.get_cached_attachments(target)
            t1 = time.perf_counter_ns()
            floor()
            t2 = time.perf_counter_ns()
            a.append(t1 - t0)
            b.append(t2 - t1)
        t0 = time.perf_counter_ns()
        everything = cni.get_cached_attachments()
        t_all = time.perf_counter_ns() - t0
        assert len(everything) == entries
    ma, mb = statistics.median(a), statistics.median(b)
    table.data["cache"] = {"one_ms": ms(ma), "floor_ms": ms(mb), "all_ms": ms(t_all)}
    table.add(
        f"get_cached_attachments(cid), {entries} entries",
        f"{ms(ma):.2f} ms",
        f"listdir+read {ms(mb):.2f} ms",
        f"{ma / mb:.2f}x",
        "< 50 ms",
        ms(ma) < 50,
    )
    table.add(
        f"get_cached_attachments() all {entries} entries (info)",
        f"{ms(t_all):.0f} ms",
        "",
        "",
    )


def bench_load(table: Table, files: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        for i in range(files):
            name = "wanted" if i == files - 1 else f"net{i:04d}"
            fname = f"{i:04d}-{name}.conflist"
            body = conflist(name, 2)
            body["plugins"][0].update({"bridge": "cni0", "ipam": {"type": "host-local"}})
            Path(d, fname).write_text(json.dumps(body, indent=2))
        assert libcni.load_conf_list(d, "wanted").name == "wanted"

        def naive() -> None:
            # The obvious way: parse every file in order until the name matches.
            for name in sorted(os.listdir(d)):
                obj = json.loads(Path(d, name).read_bytes())
                if obj.get("name") == "wanted":
                    return

        a, b = [], []
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            libcni.load_conf_list(d, "wanted")
            t1 = time.perf_counter_ns()
            naive()
            t2 = time.perf_counter_ns()
            a.append(t1 - t0)
            b.append(t2 - t1)
    ma, mb = statistics.median(a), statistics.median(b)
    table.data["load"] = {"ms": ms(ma), "naive_ms": ms(mb)}
    table.add(
        f"load_conf_list, {files} files, wanted last",
        f"{ms(ma):.2f} ms",
        f"read+parse all {ms(mb):.2f} ms",
        f"{ma / mb:.2f}x",
        "< 50 ms",
        ms(ma) < 50,
    )


# --------------------------------------------------------------------------- main


def slow_fsync(delay: float) -> None:
    """Make ``os.fsync`` wait ``delay`` seconds more, like a disk slow to flush.

    The wait releases the GIL, as a real fsync does: this models the
    production case (``/var/lib/cni`` on a busy disk) on a machine with a
    fast one. It applies to libcni and to the floors alike.
    """
    real = os.fsync

    def fsync(fd: Any) -> None:
        real(fd)
        time.sleep(delay)

    os.fsync = fsync


# --------------------------------------------------------------------------- record


class _InstantExec:
    """An ``Exec`` that runs nothing: ADD answers a fixed result at once (the library alone)."""

    RESULT = b'{"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]}'

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        return f"/nonexistent/{plugin}"

    def exec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        return self.RESULT if env.get("CNI_COMMAND") == "ADD" else b""


def bench_record(table: Table, n: int, warmup: int) -> None:
    """What the write-ahead record costs ADD and DEL: the same operations with and without it.

    ``add_network_list`` and ``del_network_list`` of a three-plugin chain whose
    plugins run in no time (an in-process ``Exec``), with the cache on tmpfs;
    the variant without the record has ``Records.begin`` (and the mark
    complete)/``Records.remove`` do no file operation. Twice: each container's first (and only) network,
    whose record makes (and whose DEL removes) the container's directory; and
    a container's further network (its directory there already, as for the
    networks after loopback in a setup). Interleaved, shuffled; medians.
    """
    shm = tmpfs_dir()
    if shm is None:
        print("  record: skipped (no tmpfs)", flush=True)
        return
    net = net_of(3)
    for first in (True, False):
        with contextlib.ExitStack() as stack:
            clients: dict[str, libcni.CNIConfig] = {}
            for name in ("with", "without"):
                cni = libcni.CNIConfig(
                    ["/nonexistent"],
                    cache_dir=stack.enter_context(tempfile.TemporaryDirectory(dir=shm)),
                    exec=_InstantExec(),  # type: ignore[arg-type]
                )
                if not first:  # each container has another network attached
                    for i in range(50):
                        cni.add_network_list(net_of(1, "other"), rt(f"c{i}"))
                if name == "without":
                    cache = cni._cache()
                    # Encoded all the same (the entry reuses it): only the file operations go.
                    cache.wal.begin = lambda entry: OpenRecord(  # type: ignore[method-assign]
                        entry.as_record().to_json(), -1
                    )
                    cache.wal.remove = lambda *a: False  # type: ignore[method-assign]
                clients[name] = cni
            times: dict[str, list[int]] = {
                f"{op}_{v}": [] for op in ("add", "del") for v in clients
            }
            clock = time.perf_counter_ns
            order = list(clients)
            shuffle = random.Random(7).shuffle
            for i in range(-warmup, n):
                shuffle(order)
                for name in order:
                    cni, r = clients[name], rt(f"c{i % 50}")
                    t0 = clock()
                    cni.add_network_list(net, r)
                    t1 = clock()
                    cni.del_network_list(net, r)
                    t2 = clock()
                    if i >= 0:
                        times[f"add_{name}"].append(t1 - t0)
                        times[f"del_{name}"].append(t2 - t1)
        med = {k: statistics.median(v) / 1e3 for k, v in times.items()}
        which = "first network" if first else "further network"
        table.data[f"record_{'first' if first else 'further'}"] = {
            k: {"median_us": v} for k, v in med.items()
        }
        added = med["add_with"] - med["add_without"]
        table.add(
            f"ADD's write-ahead record, a container's {which} (tmpfs, in-process plugins)",
            f"{med['add_with']:.1f} us",
            f"{med['add_without']:.1f} us",
            f"+{added:.1f} us",
            "<= +30 us",
            added <= 30,
        )
        table.add(
            f"  DEL's removal of the record, {which}",
            f"{med['del_with']:.1f} us",
            f"{med['del_without']:.1f} us",
            f"+{med['del_with'] - med['del_without']:.1f} us",
        )


ALL_BENCHMARKS = "go,addel,record,chain,observers,threads,tasks,spawn,import,cache,load,manager"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke test)")
    ap.add_argument(
        "--only",
        default=ALL_BENCHMARKS,
        help=f"comma-separated subset of: {ALL_BENCHMARKS}",
    )
    ap.add_argument("--json", help="also write the raw figures to this file")
    ap.add_argument(
        "--fsync-delay",
        type=float,
        default=0.0,
        metavar="MS",
        help="make every os.fsync of this process MS milliseconds slower (a slow disk)",
    )
    args = ap.parse_args()
    if args.fsync_delay > 0:
        slow_fsync(args.fsync_delay / 1000)
    only = set(args.only.split(","))
    q = args.quick
    n, warmup = (60, 10) if q else (400, 40)

    plugin_dir = build_plugin()
    assert plugin_dir is not None  # a failed dynamic build raised
    info = libcni.CNIConfig([plugin_dir]).get_version_info(PLUGIN)
    assert "1.0.0" in info.supported_versions, info
    load = os.getloadavg()[0]
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f},"
        f" plugin dir {plugin_dir}"
        + (f", fsync made {args.fsync_delay:g} ms slower" if args.fsync_delay else ""),
        flush=True,
    )
    table = Table()
    if "go" in only:
        bench_go(table, plugin_dir, n, warmup)
    if "addel" in only:
        bench_addel(table, plugin_dir, 3, n, warmup, 1.25)
    if "record" in only:
        bench_record(table, 5 * n, warmup)
    if "chain" in only:
        for plugins in (1, 10):
            bench_addel(table, plugin_dir, plugins, n // 2, warmup // 2, None)
    if "observers" in only:
        bench_observers(table, plugin_dir, n, warmup)
    counts = (1, 2, 4, 8)
    total, rounds = (48, 1) if q else (160, 3)
    if "threads" in only:
        bench_threads(table, plugin_dir, total, counts, rounds)
    if "tasks" in only:
        bench_tasks(table, plugin_dir, total, counts, rounds)
    if "spawn" in only:
        bench_spawn(table, plugin_dir, total, rounds)
    if "import" in only:
        bench_import(table, 8 if q else 20)
    if "cache" in only:
        bench_cache(table, 10_000, 10 if q else 50)
    if "load" in only:
        bench_load(table, 1000, 10 if q else 50)
    if "manager" in only:
        bench_manager(table, plugin_dir, 5 if q else 30, (1, 8))
    table.print()
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(table.data, indent=2, default=str))


if __name__ == "__main__":
    main()
