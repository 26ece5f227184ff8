"""Concurrent ADD, CHECK, DEL and GC on the same attachments neither deadlock nor corrupt the cache.

Threads of one process and two other processes share one cache and a few
attachments (``busy_worker.py``); GC (exclusive network lock) runs among ADDs
and DELs (shared network lock, exclusive attachment lock). Every operation
must finish without an error and leave each entry complete, with the result
of its own attachment (behaviour.md §7).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from harness import python_env

from libcni import CNIConfig, RuntimeConf
from libcni.testing import MockExec

from .busy_worker import ATTACHMENTS, NETWORK, instant, network, work
from .conftest import HERE, Env

pytestmark = pytest.mark.env(cls=Env)

DURATION = 3.0
THREADS = 6


def test_threads_and_processes_share_attachments_without_deadlock(env: Env) -> None:
    until = time.monotonic() + DURATION
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "busy_worker.py"),
                str(env.plugins),
                str(env.cache),
                str(DURATION),
                str(seed),
            ],
            env=python_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (101, 102)
    ]
    cni = CNIConfig([env.plugins], cache_dir=env.cache, exec=MockExec(instant))
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        try:
            work(cni, seed, until)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DURATION + 20)
    hung = [t for t in threads if t.is_alive()]
    outcomes = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=DURATION + 20)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            err = "hung (a deadlock?): " + err
        outcomes.append((p.returncode, err))
    assert not hung, f"{len(hung)} threads deadlocked"
    assert errors == [], errors
    assert all(code == 0 for code, _ in outcomes), outcomes

    results = env.cache / "results"
    for path in results.iterdir():
        assert not path.name.startswith("."), f"temporary file left: {path.name}"
        obj = json.loads(path.read_bytes())
        assert obj["kind"] == "cniCacheV1"
        assert path.name == f"{NETWORK}-{obj['containerId']}-{obj['ifName']}"
        assert obj["result"]["owner"] == obj["containerId"]
    for cid, ifname in ATTACHMENTS:
        cni.del_network_list(network(), RuntimeConf(cid, "", ifname))
    assert cni.get_cached_attachments() == []
