"""A runtime killed with SIGKILL at random moments leaves a usable cache (behaviour.md §7).

Runtime processes (``crash_worker.py work``) ADD and DEL attachments in a
shared cache, several at a time, and are killed with SIGKILL after a random
delay, about fifty times. After every kill each file of ``<cache>/results``
must be a complete ``cniCacheV1`` entry written by one ADD (its config,
result, args and capability args all of the same ADD, the one the journal
says may be there), and libcni must read and list exactly those entries;
temporary files left by a killed write must never be read or listed. At the
end a restarted runtime (``crash_worker.py recover``) DELs every attachment
ever ADDed and the cache is empty.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness import python_env, wait_gone

import libcni
from libcni import CNIConfig, RuntimeConf

from . import crash_worker
from .conftest import HERE, Env

pytestmark = pytest.mark.env(cls=Env)

WORKER = str(HERE / "crash_worker.py")
NETWORK = "crashnet"
# Thirty kills (not fifty): the delays spread them over a worker's whole run, and
# tests/reliability/test_kill.py kills at each chosen instant; a count, not a time
# budget, ends the loop (a budget made the test fail on a loaded machine).
KILLS = 30
SLOTS = 5
HANG = 120.0  # seconds: the loop is stuck, not slow


def _journal(path: Path) -> dict[tuple[str, str], set[int]]:
    """``(containerID, ifname)`` -> the variants ADDed for it so far."""
    out: dict[tuple[str, str], set[int]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        _, cid, ifname, variant = line.split()
        out.setdefault((cid, ifname), set()).add(int(variant))
    return out


def _check_entry(
    path: Path, data: bytes, journal: dict[tuple[str, str], set[int]]
) -> tuple[str, str]:
    """Assert ``data`` (of ``path``) is one complete entry of one journaled ADD; return its names."""
    try:
        obj: Any = json.loads(data)
    except ValueError as e:
        raise AssertionError(f"{path.name}: not complete JSON ({len(data)} bytes): {e}") from None
    assert isinstance(obj, dict), path.name
    assert obj.get("kind") == "cniCacheV1", path.name
    cid, ifname = obj["containerId"], obj["ifName"]
    assert path.name == f"{NETWORK}-{cid}-{ifname}"
    assert obj["networkName"] == NETWORK
    assert obj["netns"] == f"/var/run/netns/{cid}"
    config = json.loads(base64.b64decode(obj["config"], validate=True))
    embedded = config["plugins"][0]["test"]["ADD"]["result"]
    variant = embedded["variant"]
    assert variant in journal.get((cid, ifname), set()), (
        f"{path.name}: variant {variant} was never ADDed for it"
    )
    assert obj["result"] == embedded, f"{path.name}: result and config of different ADDs"
    assert obj["cniArgs"] == [["VARIANT", str(variant)]], path.name
    assert obj["capabilityArgs"]["variant"] == variant, path.name
    assert len(obj["capabilityArgs"]["pad"]) == 150_000, path.name
    return cid, ifname


def _check_cache(cache: Path, journal_path: Path) -> None:
    """Check every file of the cache (temporary files may be there; they are never listed)."""
    results = cache / "results"
    if not results.exists():
        return
    contents = {}
    for name in sorted(os.listdir(results)):
        if name.startswith("."):
            continue
        try:
            contents[name] = (results / name).read_bytes()
        except FileNotFoundError:  # removed by a DEL still running in another worker
            continue
    # Read after the entries: a worker journals an ADD before it writes the entry.
    journal = _journal(journal_path)
    expected = [
        (NETWORK, *_check_entry(results / name, data, journal)) for name, data in contents.items()
    ]
    cni = CNIConfig(["/nonexistent"], cache_dir=cache)
    listed = [(a.network, a.container_id, a.ifname) for a in cni.get_cached_attachments()]
    # Workers still run: an entry may appear or vanish between the two listings,
    # but only one whose ADD was journaled (read again, after the listing).
    assert set(listed) <= set(expected) | {(NETWORK, *k) for k in _journal(journal_path)}
    assert not [a for a in listed if a[1].startswith(".")]
    for _, cid, ifname in expected:
        net = libcni.conf_list_from_bytes(
            json.dumps({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [{"type": "p1"}]})
        )
        got = cni.get_network_list_cached_result(net, RuntimeConf(cid, "", ifname))
        if got is not None:
            assert got.to_dict()["ips"], (cid, ifname)


def _start(env: Env, journal: Path, seed: int, mode: str) -> subprocess.Popen[str]:
    # The plugins record their pids, so that the test can see they all end.
    child_env = dict(python_env(), TESTPLUGIN_RECORD=str(env.record))
    return subprocess.Popen(
        [
            sys.executable,
            WORKER,
            "work",
            str(env.plugins),
            str(env.cache),
            str(journal),
            str(seed),
            mode,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_env,
    )


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "ready\n":
        proc.kill()
        proc.communicate()
        raise AssertionError(f"worker did not start: {line!r}")


# Slow by nature (10-15 s on a busy CI machine): thirty real runtimes, each killed at a random moment
# of its run, and every entry checked after each kill.
def test_sigkill_at_random_moments_leaves_old_or_new_entries_and_all_can_be_deleted(
    env: Env,
) -> None:
    rng = random.Random(20261121)
    journal = env.root / "journal"
    # Workers start while others run; each is killed a random delay after it is ready.
    running: list[tuple[subprocess.Popen[str], float]] = []
    kills = 0
    seed = 0
    start = time.monotonic()
    try:
        while kills < KILLS:
            assert time.monotonic() - start < HANG, f"only {kills} kills in {HANG}s"
            while len(running) < SLOTS:
                seed += 1
                mode = "fast" if seed % 2 else "real"
                running.append((_start(env, journal, seed, mode), rng.uniform(0.0, 0.25)))
            proc, delay = running.pop(0)
            _wait_ready(proc)
            time.sleep(delay)
            if proc.poll() is not None:
                raise AssertionError(f"a worker failed on its own (status {proc.returncode})")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
            kills += 1
            _check_cache(env.cache, journal)
    finally:
        for proc, _ in running:
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
    _check_cache(env.cache, journal)
    assert _journal(journal), "no ADD ever started"

    # The plugins started by killed runtimes finish on their own (they do not hang).
    assert env.pids(), "no plugin process ran"
    assert wait_gone(env.pids(), timeout=10) == []

    recovered = subprocess.run(
        [sys.executable, WORKER, "recover", str(env.plugins), str(env.cache), str(journal)],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=60,
        check=False,
    )
    assert recovered.returncode == 0, recovered.stderr
    summary = json.loads(recovered.stdout)
    assert summary["attachments"] == []
    assert [n for n in summary["files"] if not n.startswith(".")] == []
    # Whatever temporary files killed writes left are never taken for entries, and
    # once they are old enough that no write can still own them, GC removes them:
    # the cache is then really empty.
    results = env.cache / "results"
    left = [results / n for n in os.listdir(results)]
    old = time.time() - 3600
    for path in left:
        os.utime(path, (old, old))
    cni = CNIConfig([str(env.plugins)], cache_dir=env.cache)
    assert cni.get_cached_attachments() == []
    cni.gc_network_list(libcni.conf_list_from_bytes(crash_worker.conflist_bytes(0)))
    assert os.listdir(results) == [], "stale temporary files are never removed"
    print(f"{kills} kills, {len(left)} temporary files left by killed writes")
