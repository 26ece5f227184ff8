"""ADD, CHECK, DEL and GC at random on a few shared attachments (tests/reliability/test_concurrency.py).

Usage (one worker process)::

    python busy_worker.py PLUGIN_DIR CACHE_DIR SECONDS SEED

The test also imports :func:`work` to run the same loop in threads. Plugins
are answered in process (a ``libcni.testing.MockExec`` playing :func:`instant`), so that the time goes to the
locks and the cache.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

import libcni
from libcni import CNIConfig, GCArgs, GCAttachment, RuntimeConf
from libcni.testing import MockExec, PluginCall

NETWORK = "busy"
ATTACHMENTS = [("ctr0", "eth0"), ("ctr1", "eth0"), ("ctr1", "net1")]


def instant(call: PluginCall) -> dict[str, Any] | None:
    """The plugins answered at once (a MockExec handler): ADD's result names its container."""
    if call.command != "ADD":
        return None
    return {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.1/8"}], "owner": call.container_id}


def network() -> libcni.NetworkConfigList:
    return libcni.conf_list_from_bytes(
        b'{"cniVersion":"1.1.0","name":"busy","plugins":[{"type":"p1"},{"type":"p2"}]}'
    )


def work(cni: CNIConfig, seed: int, until: float) -> None:
    """Random operations until the monotonic time ``until``; any exception propagates."""
    rng = random.Random(seed)
    net = network()
    while time.monotonic() < until:
        if isinstance(cni.exec, MockExec):
            cni.exec.calls.clear()  # thousands of operations: keep no history
        cid, ifname = rng.choice(ATTACHMENTS)
        rt = RuntimeConf(cid, f"/var/run/netns/{cid}", ifname)
        op = rng.random()
        if op < 0.4:
            cni.add_network_list(net, rt)
        elif op < 0.75:
            cni.del_network_list(net, rt)
        elif op < 0.9:
            cni.check_network_list(net, rt)
        else:
            keep = [GCAttachment(c, i) for c, i in ATTACHMENTS if rng.random() < 0.5]
            cni.gc_network_list(net, GCArgs(keep))


def main(argv: list[str]) -> int:
    plugins, cache, seconds, seed = argv[0], argv[1], float(argv[2]), int(argv[3])
    cni = CNIConfig([plugins], cache_dir=cache, exec=MockExec(instant))
    work(cni, seed, time.monotonic() + seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
