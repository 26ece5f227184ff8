"""Recovery never races a dead runtime's plugins (issue 28, item 1; behaviour §4.3).

A runtime (a child Python) starts an ADD whose plugin is slow and leaves a
child of its own running (as ``bridge`` leaves ``iptables``); it is SIGKILLed
while the plugin runs, as a supervisor would find it, and a fresh runtime
recovers at once. The plugin writes timestamped markers: the recovery's DEL
must start only after the last process of the orphaned ADD ended, and leave
nothing behind. The plugins of an ADD hold the attachment's lock (inherited
by every plugin of the ADD), so the DEL waits for them, bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

import libcni
from libcni import AsyncCNIConfig, CNIConfig, GCArgs, RuntimeConf
from libcni.conf import conf_list_from_bytes
from libcni.errors import GCError, LockTimeoutError
from libcni.invoke import RawExec

ROOT = Path(libcni.__file__).resolve().parents[1]  # the checkout the runtime child imports
#: The ADD: marks its start, works 0.8 s, then leaves a child that works 0.8 s more and
#: marks the end (the leader has exited by then: nothing of the dead runtime kills it).
PLUGIN = """#!/bin/sh
cat >/dev/null
now() {{ python3 -c 'import time; print(time.time())'; }}
case "$CNI_COMMAND" in
ADD)
    echo "add-start $(now)" >> {mark}
    sleep 0.8
    (sleep 0.8; echo "add-end $(now)" >> {mark}) &
    echo '{{"cniVersion": "1.0.0"}}'
    ;;
DEL)
    echo "del $(now)" >> {mark}
    ;;
esac
"""
RUNTIME = """
import sys
from libcni import CNIConfig, RuntimeConf
from libcni.conf import conf_list_from_bytes
net = conf_list_from_bytes(open(sys.argv[3], "rb").read())
CNIConfig([sys.argv[1]], cache_dir=sys.argv[2]).add_network_list(
    net, RuntimeConf(container_id="c1", netns="/proc/1/ns/net", ifname="eth0"), timeout=30
)
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    plugins, cache = tmp_path / "plugins", tmp_path / "cache"
    plugins.mkdir()
    mark = tmp_path / "marks"
    plugin = plugins / "slow"
    plugin.write_text(PLUGIN.format(mark=mark))
    plugin.chmod(0o755)
    conf = tmp_path / "net.conflist"
    conf.write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "slow"}]})
    )
    return plugins, cache, conf, mark


def _marks(mark: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in mark.read_text().splitlines():
        key, value = line.split()
        out.setdefault(key, float(value))
    return out


def _kill_runtime_mid_add(plugins: Path, cache: Path, conf: Path, mark: Path) -> None:
    """A runtime process starts the ADD and is SIGKILLed once its plugin runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runtime = subprocess.Popen(
        [sys.executable, "-c", RUNTIME, str(plugins), str(cache), str(conf)], env=env
    )
    deadline = time.monotonic() + 20
    while not (mark.exists() and "add-start" in mark.read_text()):
        assert runtime.poll() is None, "the runtime ended before its plugin ran"
        assert time.monotonic() < deadline, "the plugin never started"
        time.sleep(0.01)
    runtime.send_signal(signal.SIGKILL)
    runtime.wait()


def _left(cache: Path) -> list[str]:
    return [
        str(p.relative_to(cache))
        for sub in ("results", "records")
        for p in (cache / sub).rglob("*")
        if p.is_file()
    ]


def test_gc_right_after_a_killed_runtime_waits_for_its_orphaned_add(
    setup: tuple[Path, Path, Path, Path],
) -> None:
    plugins, cache, conf, mark = setup
    _kill_runtime_mid_add(plugins, cache, conf, mark)
    net = conf_list_from_bytes(conf.read_bytes())
    CNIConfig([str(plugins)], cache_dir=cache).gc_network_list(net, GCArgs(), timeout=20)
    marks = _marks(mark)
    assert "add-end" in marks and "del" in marks, marks
    # The DEL ran after the last process of the orphaned ADD (its leftover child) ended.
    assert marks["del"] >= marks["add-end"], marks
    assert _left(cache) == []


def test_del_right_after_a_killed_runtime_waits_for_its_orphaned_add(
    setup: tuple[Path, Path, Path, Path],
) -> None:
    plugins, cache, conf, mark = setup
    _kill_runtime_mid_add(plugins, cache, conf, mark)
    net = conf_list_from_bytes(conf.read_bytes())
    rt = RuntimeConf(container_id="c1", netns="/proc/1/ns/net", ifname="eth0")
    CNIConfig([str(plugins)], cache_dir=cache).del_network_list(net, rt, timeout=20)
    marks = _marks(mark)
    assert marks["del"] >= marks["add-end"], marks
    assert _left(cache) == []


def test_gc_within_a_short_timeout_reports_the_orphaned_add_busy_and_the_next_gc_deletes_it(
    setup: tuple[Path, Path, Path, Path],
) -> None:
    plugins, cache, conf, mark = setup
    _kill_runtime_mid_add(plugins, cache, conf, mark)
    net = conf_list_from_bytes(conf.read_bytes())
    cni = CNIConfig([str(plugins)], cache_dir=cache)
    with pytest.raises(GCError) as info:
        cni.gc_network_list(net, GCArgs(), timeout=0.3)
    assert any(isinstance(e, LockTimeoutError) for e in info.value.errors)
    assert "del" not in _marks(mark)
    assert _left(cache) != []  # left for the next GC
    time.sleep(2)  # the orphan is over
    cni.gc_network_list(net, GCArgs(), timeout=20)
    marks = _marks(mark)
    assert marks["del"] >= marks["add-end"], marks
    assert _left(cache) == []


@pytest.mark.parametrize(("api", "blocked"), [("sync", False), ("sync", True), ("async", False)])
def test_a_plugin_of_an_add_inherits_the_attachment_lock(
    tmp_path: Path, api: str, blocked: bool
) -> None:
    # blocked: the calling thread blocks a signal, so the plugin starts through
    # os.posix_spawn (else subprocess's vfork path): both hand the lock on.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    seen = tmp_path / "seen"
    plugin = plugins / "look"
    plugin.write_text(
        "#!/bin/sh\ncat >/dev/null\n"
        f'for fd in /proc/$$/fd/*; do echo "$CNI_COMMAND $(readlink $fd)"; done >> {seen}\n'
        'echo \'{"cniVersion": "1.0.0"}\'\n'
    )
    plugin.chmod(0o755)
    net = conf_list_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "look"}]}).encode()
    )
    rt = RuntimeConf(container_id="c1", netns="/proc/1/ns/net", ifname="eth0")
    if api == "sync":
        cni = CNIConfig([str(plugins)], cache_dir=tmp_path / "cache", exec=RawExec())
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2} if blocked else set())
        try:
            cni.add_network_list(net, rt)
            cni.del_network_list(net, rt)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    else:
        acni = AsyncCNIConfig([str(plugins)], cache_dir=tmp_path / "cache")

        async def both() -> None:
            await acni.add_network_list(net, rt)
            await acni.del_network_list(net, rt)

        asyncio.run(both())
    lines = seen.read_text().splitlines()
    add = [line.split(" ", 1)[1] for line in lines if line.startswith("ADD ")]
    delete = [line.split(" ", 1)[1] for line in lines if line.startswith("DEL ")]
    lock = str(tmp_path / "cache" / "locks" / "net-c1-eth0")
    assert lock in add
    assert lock not in delete  # only an ADD's plugins hold the lock
    # The shell's own descriptors and stdio aside, the lock is all the runtime handed on.
    assert len(add) == len(delete) + 1, (add, delete)


def test_a_daemon_left_by_an_add_keeps_no_lock_once_the_add_returned(tmp_path: Path) -> None:
    # The daemon escapes the plugin's process group (setsid) and keeps the lock's descriptor:
    # the runtime's release unlocks the open file description they share.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    pidfile = tmp_path / "daemon"
    plugin = plugins / "daemonize"
    plugin.write_text(
        "#!/bin/sh\ncat >/dev/null\n"
        f'[ "$CNI_COMMAND" = ADD ] && {{ setsid sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}; }}\n'
        "sleep 0.3\n"  # (the daemon is in its own session by then, out of the group's SIGKILL)
        'echo \'{"cniVersion": "1.0.0"}\'\n'
    )
    plugin.chmod(0o755)
    net = conf_list_from_bytes(
        json.dumps(
            {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "daemonize"}]}
        ).encode()
    )
    cni = CNIConfig([str(plugins)], cache_dir=tmp_path / "cache")
    rt = RuntimeConf(container_id="c1", netns="/proc/1/ns/net", ifname="eth0")
    cni.add_network_list(net, rt)
    daemon = int(pidfile.read_text())
    try:
        held = [os.readlink(fd) for fd in Path(f"/proc/{daemon}/fd").iterdir()]
        assert any(p.endswith("locks/n-c1-eth0") for p in held), held  # it holds the lock's fd...
        cni.del_network_list(net, rt, timeout=1)  # ...and no lock
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_a_raw_exec_subclass_with_the_protocols_four_arguments_still_runs_plugins(
    setup: tuple[Path, Path, Path, Path],
) -> None:
    plugins, cache, conf, _ = setup
    (plugins / "slow").write_text('#!/bin/sh\ncat >/dev/null\necho \'{"cniVersion": "1.0.0"}\'\n')

    class Wrapped(RawExec):
        def exec_plugin(  # type: ignore[override]  # the Exec protocol's signature, on purpose
            self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
        ) -> bytes:
            return super().exec_plugin(path, stdin, env, timeout)  # no pass_fd: no lock handed on

    net = conf_list_from_bytes(conf.read_bytes())
    rt = RuntimeConf(container_id="c1", netns="/proc/1/ns/net", ifname="eth0")
    cni = CNIConfig([str(plugins)], cache_dir=cache, exec=Wrapped())
    cni.add_network_list(net, rt)
    cni.del_network_list(net, rt)
