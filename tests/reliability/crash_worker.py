"""A container runtime that the crash test kills with SIGKILL (tests/reliability/test_crash.py).

Usage::

    python crash_worker.py work PLUGIN_DIR CACHE_DIR JOURNAL SEED MODE
    python crash_worker.py recover PLUGIN_DIR CACHE_DIR JOURNAL

``work`` ADDs and DELs attachments of a few containers of network ``crashnet``
forever, in random order, with ``libcni.CNIConfig``. Before each ADD it appends
``ADD <containerID> <variant>`` to ``JOURNAL`` (one ``write`` of an
``O_APPEND`` file, so a SIGKILL never leaves half a line), so that the test
knows which entries may exist and what each may hold. Every variant has its
own configuration bytes and result (the result is embedded in the
configuration, which the test plugin prints), and a large capability argument
(cached, not sent to the plugin), so that an entry whose parts come from
different ADDs, or a partly written one, is detected. ``MODE`` is ``real``
(the test plugin runs as a process) or ``fast`` (a ``libcni.testing.MockExec``
answers at once, so that most of the time is spent in the cache code). It
prints ``ready`` once libcni is imported.

``recover`` is the runtime after a restart: for every container of the
journal, DEL with the configuration cached at ADD (or the current one when
nothing is cached), then print a JSON summary of what is left in the cache.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

import libcni
from libcni import CNIConfig, RuntimeConf
from libcni.testing import MockExec, PluginCall

NETWORK = "crashnet"
CONTAINERS = [f"ctr{i}" for i in range(6)]
IFNAMES = ["eth0", "net1"]
PAD = "p" * 150_000


def conflist_bytes(variant: int) -> bytes:
    """The configuration of one variant; its result is embedded in it (see the module doc)."""
    result = {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "eth0", "mac": f"0a:58:00:00:{variant // 256 % 256:02x}:{variant % 256:02x}"}
        ],
        "ips": [
            {
                "address": f"10.{variant // 65536 % 256}.{variant // 256 % 256}.{variant % 256}/8",
                "interface": 0,
            }
        ],
        "variant": variant,
    }
    obj = {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [{"type": "p1", "test": {"ADD": {"result": result}}}],
    }
    return json.dumps(obj).encode()


def instant(call: PluginCall) -> Any:
    """The plugin answered in process (a MockExec handler): ADD prints the embedded result."""
    return call.stdin["test"]["ADD"]["result"] if call.command == "ADD" else None


def journal(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())


def work(plugin_dir: str, cache_dir: str, journal_path: str, seed: int, mode: str) -> None:
    rng = random.Random(seed)
    exec_ = MockExec(instant) if mode == "fast" else None
    cni = CNIConfig([plugin_dir], cache_dir=cache_dir, exec=exec_)
    fd = os.open(journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    n = 0
    while True:
        n += 1
        if exec_ is not None:
            exec_.calls.clear()  # runs until killed: keep no history
        cid = rng.choice(CONTAINERS)
        ifname = rng.choice(IFNAMES)
        variant = seed * 1000 + n
        net = libcni.conf_list_from_bytes(conflist_bytes(variant))
        rt = RuntimeConf(
            cid,
            f"/var/run/netns/{cid}",
            ifname,
            args=[("VARIANT", str(variant))],
            capability_args={"pad": PAD, "variant": variant},
        )
        if rng.random() < 0.6:
            journal(fd, f"ADD {cid} {ifname} {variant}")
            cni.add_network_list(net, rt)
        else:
            cni.del_network_list(net, rt)


def recover(plugin_dir: str, cache_dir: str, journal_path: str) -> None:
    cni = CNIConfig([plugin_dir], cache_dir=cache_dir)
    current = libcni.conf_list_from_bytes(conflist_bytes(0))
    seen: set[tuple[str, str]] = set()
    with open(journal_path) as f:
        for line in f:
            _, cid, ifname, _variant = line.split()
            seen.add((cid, ifname))
    deleted = 0
    for cid, ifname in sorted(seen):
        rt = RuntimeConf(cid, f"/var/run/netns/{cid}", ifname)
        cached = cni.get_network_list_cached_config(current, rt)
        if cached is not None:
            net = libcni.conf_list_from_bytes(cached[0])
            rt = cached[1]
        else:
            net = current
        cni.del_network_list(net, rt)
        deleted += 1
    results = os.path.join(cache_dir, "results")
    left = sorted(os.listdir(results)) if os.path.isdir(results) else []
    attachments = [(a.network, a.container_id, a.ifname) for a in cni.get_cached_attachments()]
    print(json.dumps({"deleted": deleted, "files": left, "attachments": attachments}))


def main(argv: list[str]) -> int:
    if argv[0] == "work":
        work(argv[1], argv[2], argv[3], int(argv[4]), argv[5])
    elif argv[0] == "recover":
        recover(argv[1], argv[2], argv[3])
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
