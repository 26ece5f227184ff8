#!/usr/bin/env python3
"""The event loop's worst heartbeat lag while many ``sandbox()`` setups run at once (root only).

Run by hand as root::

    python benchmarks/loop_lag.py                      # 16 sandboxes at once, 10 rounds
    python benchmarks/loop_lag.py --libcni /other/checkout   # another libcni (before/after)

Each round enters ``AsyncNetworkManager.sandbox()`` for ``--pods`` containers
at the same time (a namespace created, ``lo`` brought up, one network of the
no-op plugin ``benchmarks/noop_plugin.c`` added), then leaves them all
(teardown, namespace removed), while a task that sleeps 5 ms at a time keeps
its worst lateness. Rounds alternate ``loopback="internal"`` and
``loopback=False`` (the same work without ``lo``), so that a change of
machine load hits both alike. Namespaces are pinned in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BEAT = 0.005


async def worst_lag(work: asyncio.Future[object]) -> float:
    """The worst lateness (seconds) of a ``BEAT`` heartbeat until ``work`` is done."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    while not work.done():
        t = loop.time()
        await asyncio.sleep(BEAT)
        worst = max(worst, loop.time() - t - BEAT)
    work.result()
    return worst


async def round_(am: object, pods: int, d: Path, tag: str) -> float:
    async def pod(i: int) -> None:
        async with am.sandbox(f"{tag}-{i}", netns_dir=d):  # type: ignore[attr-defined]
            pass

    work = asyncio.ensure_future(asyncio.gather(*(pod(i) for i in range(pods))))
    return await worst_lag(work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--libcni", help="the checkout whose libcni to measure (default: this one)")
    args = parser.parse_args()
    sys.path.insert(0, args.libcni or str(HERE.parent))
    sys.path.insert(1, str(HERE))
    if os.geteuid() != 0:
        print("benchmarks/loop_lag.py needs root (network namespaces)", file=sys.stderr)
        return 1
    import libcni

    print(f"libcni from {Path(libcni.__file__).parent}")
    from run import PLUGIN, build_plugin  # it puts this checkout first in sys.path

    with tempfile.TemporaryDirectory(prefix="libcni-bench-lag-") as tmp:
        d, bindir, conf = Path(tmp, "netns"), Path(tmp, "bin"), Path(tmp, "net.d")
        bindir.mkdir()
        conf.mkdir()
        (bindir / PLUGIN).symlink_to(Path(build_plugin(), PLUGIN))
        net = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": PLUGIN}]}
        (conf / "10-net.conflist").write_text(json.dumps(net))
        lags: dict[str, list[float]] = {'loopback="internal"': [], "loopback=False": []}

        async def run() -> None:
            managers = {
                name: libcni.AsyncNetworkManager(
                    conf, [bindir], cache_dir=Path(tmp, "cache"), loopback=mode
                )
                for name, mode in zip(lags, ("internal", False), strict=True)
            }
            for r in range(-1, args.rounds):  # round -1: warm-up
                for k, (name, am) in enumerate(managers.items()):
                    lag = await round_(am, args.pods, d, f"r{r}-{k}")
                    if r >= 0:
                        lags[name].append(lag * 1e3)

        try:
            asyncio.run(run())
        finally:
            if d.exists():
                subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)
    print(f"{args.pods} sandbox() at once, {args.rounds} rounds: worst heartbeat lag per round")
    for name, ms in lags.items():
        p90 = sorted(ms)[int(0.9 * (len(ms) - 1))]
        print(
            f"  {name:<20} median {statistics.median(ms):6.1f} ms   p90 {p90:6.1f} ms"
            f"   worst {max(ms):7.1f} ms   ({' '.join(f'{x:.0f}' for x in ms)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
