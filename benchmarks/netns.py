#!/usr/bin/env python3
"""Network namespaces: what libcni.netns and the internal loopback cost (root only).

Run by hand as root (it uses the libcni of this checkout)::

    python benchmarks/netns.py            # 200 rounds
    python benchmarks/netns.py --rounds 50

Each line compares two ways of doing the same thing, interleaved in shuffled
order (so that a change of machine load hits both alike), median and p90:

- a namespace created and removed: ``libcni.netns.create`` + ``remove``
  against ``ip netns add`` + ``ip netns del`` (what runtimes in Python do
  today);
- ``NetworkManager`` setup + teardown of a container on one network of the
  no-op plugin (``benchmarks/noop_plugin.c``) in a real namespace, with
  ``loopback="internal"`` against ``loopback=True`` and the reference
  ``loopback`` plugin (``/usr/lib/cni`` or ``/opt/cni/bin``);
- ``NetNS.enter()`` and back, alone.

Namespaces are pinned in a temporary directory (and ``/run/netns`` for ``ip``),
all removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from run import PLUGIN, build_plugin, interleaved  # noqa: E402

import libcni  # noqa: E402
from libcni import netns  # noqa: E402


def summary(name: str, ns: list[int]) -> tuple[float, float]:
    values = sorted(ns)
    median = statistics.median(values) / 1e6
    p90 = values[int(0.9 * (len(values) - 1))] / 1e6
    print(f"  {name:<44} median {median:8.3f} ms   p90 {p90:8.3f} ms")
    return median, p90


def compare(title: str, ours: str, theirs: str, times: dict[str, list[int]]) -> None:
    print(title)
    a, _ = summary(ours, times[ours])
    b, _ = summary(theirs, times[theirs])
    print(f"  ratio {ours} / {theirs}: {a / b:.2f}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/netns.py needs root (network namespaces)", file=sys.stderr)
        return 1
    loopback_dir = next(
        (d for d in ("/usr/lib/cni", "/opt/cni/bin") if os.access(f"{d}/loopback", os.X_OK)), None
    )
    ip = shutil.which("ip")
    n, warmup = args.rounds, max(3, args.rounds // 20)
    with tempfile.TemporaryDirectory(prefix="libcni-bench-netns-") as tmp:
        d = Path(tmp, "netns")
        try:
            if ip is not None:
                tag = secrets.token_hex(3)

                def by_libcni(i: int) -> None:
                    netns.create(dir=d).remove()

                def by_ip(i: int) -> None:
                    name = f"libcni-bench-{tag}-{i}"
                    subprocess.run([ip, "netns", "add", name], check=True)
                    subprocess.run([ip, "netns", "del", name], check=True)

                times = interleaved(
                    {"libcni.netns create+remove": by_libcni, "ip netns add+del": by_ip},
                    n,
                    warmup,
                )
                compare(
                    "A namespace created and removed",
                    "libcni.netns create+remove",
                    "ip netns add+del",
                    times,
                )

            if loopback_dir is not None:
                bindir, conf = Path(tmp, "bin"), Path(tmp, "net.d")
                bindir.mkdir()
                conf.mkdir()
                (bindir / PLUGIN).symlink_to(Path(build_plugin(), PLUGIN))
                (bindir / "loopback").symlink_to(Path(loopback_dir, "loopback"))
                net = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": PLUGIN}]}
                (conf / "10-net.conflist").write_text(json.dumps(net))
                cache = Path(tmp, "cache")
                managers = {
                    'loopback="internal"': libcni.NetworkManager(
                        conf, [bindir], cache_dir=cache, loopback="internal"
                    ),
                    "loopback=True (the plugin)": libcni.NetworkManager(
                        conf, [bindir], cache_dir=cache, loopback=True
                    ),
                }
                with netns.create(dir=d) as ns:

                    def cycle(m: libcni.NetworkManager) -> None:
                        m.setup("bench", ns.path)
                        m.teardown("bench", ns.path)

                    times = interleaved(
                        {name: (lambda i, m=m: cycle(m)) for name, m in managers.items()},
                        n,
                        warmup,
                    )
                    compare(
                        "NetworkManager setup+teardown, one network of the no-op plugin",
                        'loopback="internal"',
                        "loopback=True (the plugin)",
                        times,
                    )

                    clock = time.perf_counter_ns
                    spans = []
                    for _ in range(n * 10):
                        t0 = clock()
                        with ns.enter():
                            pass
                        spans.append(clock() - t0)
                    print("NetNS.enter() and back")
                    summary("enter+exit", spans)
        finally:
            if d.exists():
                subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
