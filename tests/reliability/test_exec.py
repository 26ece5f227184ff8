"""How plugins are run, under a hostile runtime (behaviour.md §6.2, §6.3, §8).

Each case runs real plugin processes: the test plugin, or a shell script
that reports what it inherited. The runtime side is hostile for real: a
thread that blocks SIGTERM, a thread that adds and removes ``os.environ``
keys, a plugin flooding its stdout in a process with a memory limit.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import ThreadOnlyExec, python_env, wait_gone

import libcni
from libcni import ConfigError, PluginError, PluginTimeoutError, RuntimeConf
from libcni import request as rq
from libcni.aio import AsyncCNIConfig
from libcni.invoke import RawExec

from .conftest import Env

pytestmark = pytest.mark.env(cls=Env)

MiB = 1 << 20


def _in_thread(fn: Callable[[], Any], *, block: frozenset[int] | set[int] = frozenset()) -> Any:
    """``fn()`` in a new thread that first blocks ``block``; its value or its exception."""
    out: dict[str, Any] = {}

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, block)
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out.get("value")


# -- §6.3: plugins start with Go's signal state ------------------------------------------

_SIGNAL_REPORTER = """#!/bin/sh
cat >/dev/null
grep -E '^Sig(Blk|Ign):' /proc/self/status > {out}
for fd in /proc/$$/fd/*; do readlink "$fd"; done > {out}.fds
echo '{{"cniVersion":"1.0.0"}}'
"""


def _sig_bits(text: str, field: str) -> set[int]:
    for line in text.splitlines():
        if line.startswith(field + ":"):
            mask = int(line.split()[1], 16)
            return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}
    raise AssertionError(f"no {field} in {text!r}")


@pytest.mark.parametrize("api", ["sync", "async"])
def test_plugin_starts_with_empty_signal_mask_and_default_dispositions(env: Env, api: str) -> None:
    out = env.root / "signals"
    script = env.plugins / "sig"
    script.write_text(_SIGNAL_REPORTER.format(out=out))
    script.chmod(0o755)
    net = env.conflist({"type": "sig"})
    old = signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the runtime ignores one...
    marker = env.root / "leak-marker"
    marker.touch()
    # Known by its file, not its number: the shell itself holds descriptors
    # 10 and up (the script, a saved stdout), which the number may collide with.
    leak = os.open(marker, os.O_RDONLY)
    os.set_inheritable(leak, True)  # ...and has an inheritable descriptor
    try:
        if api == "sync":
            _in_thread(
                lambda: env.cni.add_network_list(net, env.rt),
                block={signal.SIGTERM, signal.SIGUSR2},
            )
        else:
            acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache)
            _in_thread(
                lambda: asyncio.run(acni.add_network_list(net, env.rt)),
                block={signal.SIGTERM, signal.SIGUSR2},
            )
    finally:
        signal.signal(signal.SIGUSR1, old)
        os.close(leak)
    status = out.read_text()
    open_files = Path(f"{out}.fds").read_text().splitlines()
    assert open_files, "the plugin listed no descriptors"
    assert str(marker) not in open_files, open_files  # only the shell's own
    assert _sig_bits(status, "SigBlk") == set(), status  # ...and a thread blocks two
    # glibc's posix_spawn leaves its two internal signals (32, 33: thread
    # cancellation, setxid) ignored in every child; glibc programs and Go
    # install their own handlers for them at start-up.
    assert _sig_bits(status, "SigIgn") - {32, 33} == set(), status


@pytest.mark.parametrize("api", ["sync", "async"])
def test_timeout_terminates_a_plugin_started_by_a_thread_that_blocks_sigterm(
    env: Env, api: str
) -> None:
    # A long grace: a plugin that did not get SIGTERM would only die of SIGKILL, 20 s later.
    net = env.conflist(env.plugin("p1", ADD={"sleep": 60}))
    if api == "sync":
        cni = libcni.CNIConfig([env.plugins], cache_dir=env.cache, exec=RawExec(grace=20))
        op: Callable[[], Any] = lambda: cni.add_network_list(net, env.rt, timeout=0.5)  # noqa: E731
    else:
        acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache, exec=RawExec(grace=20))
        op = lambda: asyncio.run(acni.add_network_list(net, env.rt, timeout=0.5))  # noqa: E731
    start = time.monotonic()
    with pytest.raises(PluginTimeoutError) as info:
        _in_thread(op, block={signal.SIGTERM})
    assert time.monotonic() - start < 10
    assert info.value.signal == signal.SIGTERM, repr(info.value)
    assert wait_gone(env.pids()) == []


# -- §6.3: timeouts -----------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [math.inf, 1e9, 30 * 86400.0, 1e300])
@pytest.mark.parametrize("api", ["sync", "async"])
def test_very_long_timeouts_mean_no_practical_limit(env: Env, api: str, timeout: float) -> None:
    net = env.conflist(env.plugin("p1", ADD={"sleep": 0.3, "passthrough": True}))
    if api == "sync":
        result = env.cni.add_network_list(net, env.rt, timeout=timeout)
        env.cni.del_network_list(net, env.rt, timeout=timeout)
        cni = libcni.CNIConfig([env.plugins], cache_dir=env.cache, timeout=timeout)
        cni.add_network_list(net, env.rt)
    else:
        acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache)

        async def scenario() -> Any:
            res = await acni.add_network_list(net, env.rt, timeout=timeout)
            await acni.del_network_list(net, env.rt, timeout=timeout)
            return res

        result = asyncio.run(scenario())
    assert result.to_dict()["ips"]
    assert all(c["command"] in ("ADD", "DEL") for c in env.calls())


def _operations(
    cni: Any, net: libcni.NetworkConfigList, rt: RuntimeConf
) -> list[tuple[str, Callable[[float], Any]]]:
    one = net.plugins[0]
    return [
        ("add_network_list", lambda t: cni.add_network_list(net, rt, timeout=t)),
        ("check_network_list", lambda t: cni.check_network_list(net, rt, timeout=t)),
        ("del_network_list", lambda t: cni.del_network_list(net, rt, timeout=t)),
        ("add_network", lambda t: cni.add_network(one, rt, timeout=t)),
        ("check_network", lambda t: cni.check_network(one, rt, timeout=t)),
        ("del_network", lambda t: cni.del_network(one, rt, timeout=t)),
        ("validate_network_list", lambda t: cni.validate_network_list(net, timeout=t)),
        ("validate_network", lambda t: cni.validate_network(one, timeout=t)),
        ("get_version_info", lambda t: cni.get_version_info("p1", timeout=t)),
        ("gc_network_list", lambda t: cni.gc_network_list(net, timeout=t)),
        ("get_status_network_list", lambda t: cni.get_status_network_list(net, timeout=t)),
    ]


@pytest.mark.parametrize("timeout", [-1, -0.001, -math.inf, math.nan])
@pytest.mark.parametrize("api", ["sync", "async"])
def test_negative_or_nan_timeout_is_a_value_error_before_anything_runs(
    env: Env, api: str, timeout: float
) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    # Something cached, so that CHECK, DEL and GC would have work to do.
    env.cni.add_network_list(net, env.rt)
    stale = attrs_evolve(env.rt, container_id="stale")
    env.cni.add_network_list(net, stale)
    env.record.unlink()
    cni: Any = env.cni
    if api == "async":
        acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache)

        class Sync:
            def __getattr__(self, name: str) -> Any:
                return lambda *a, **k: asyncio.run(getattr(acni, name)(*a, **k))

        cni = Sync()
    for name, op in _operations(cni, net, env.rt):
        with pytest.raises(ValueError) as info:
            op(timeout)
        assert not isinstance(info.value, libcni.CNIError), name
        assert "timeout" in str(info.value), name
        assert env.calls() == [], f"{name} ran a plugin"
    assert env.entry_path(cid="stale").exists()
    with pytest.raises(ValueError):
        libcni.CNIConfig([env.plugins], timeout=timeout)
    with pytest.raises(ValueError):
        AsyncCNIConfig([env.plugins], timeout=timeout)


def attrs_evolve(rt: RuntimeConf, **changes: Any) -> RuntimeConf:
    import attrs

    return attrs.evolve(rt, **changes)


# -- §6.3: a thread-run Exec keeps the locks until its call returned -----------------------


def test_cancelled_thread_run_plugin_keeps_the_locks_until_it_returned(env: Env) -> None:
    net = env.conflist(env.plugin("p1", ADD={"sleep": 1.5, "passthrough": True}))
    exe = ThreadOnlyExec()
    acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache, exec=exe)

    async def scenario() -> None:
        add = asyncio.ensure_future(acni.add_network_list(net, env.rt))
        await env.await_call(lambda c: c.get("command") == "ADD")  # it runs, in its worker thread
        add.cancel()
        delete = asyncio.ensure_future(acni.del_network_list(net, env.rt))
        with pytest.raises(asyncio.CancelledError):
            await add
        await delete

    asyncio.run(scenario())
    (add_cmd, _, add_end), (del_cmd, del_start, _) = exe.log
    assert (add_cmd, del_cmd) == ("ADD", "DEL")
    assert del_start >= add_end, "DEL ran while the cancelled ADD's plugin was still running"
    assert not env.entry_path().exists()


# -- §6.3: output is bounded ------------------------------------------------------------------

_FLOOD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))
import libcni
from libcni import CNIConfig, RuntimeConf
from libcni.invoke import RawExec
plugins, cache, record = sys.argv[1:4]
net = libcni.conf_list_from_bytes(json.dumps({"cniVersion": "1.0.0", "name": "testnet",
    "plugins": [{"type": "flood"}]}))
cni = CNIConfig([plugins], cache_dir=cache, exec=RawExec(grace=0.3))
start = time.monotonic()
try:
    cni.add_network_list(net, RuntimeConf("ctr1", "/x", "eth0"), timeout=60)
    out = {"error": None}
except BaseException as e:
    out = {"error": type(e).__name__, "msg": str(e), "signal": getattr(e, "signal", None)}
out["elapsed"] = time.monotonic() - start
out["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


_ENDLESS = """#!/bin/sh
cat >/dev/null
echo '{{"pid": '$$'}}' >> {record}
exec yes flooding
"""


def test_plugin_flooding_stdout_endlessly_is_killed_and_memory_stays_bounded(env: Env) -> None:
    script = env.plugins / "flood"
    script.write_text(_ENDLESS.format(record=env.record))
    script.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, "-c", _FLOOD, str(env.plugins), str(env.cache), str(env.record)],
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["error"] == "PluginError", out
    assert "output too large" in out["msg"], out
    assert out["elapsed"] < 10, out
    assert out["maxrss_kib"] < 200 * 1024, out  # 16 MiB of output, not gigabytes
    assert wait_gone(env.pids()) == []
    assert not env.entry_path().exists()


def test_stdout_of_16_mib_is_still_accepted(env: Env) -> None:
    # The limit is on the output, not below it: a 16 MiB result is read whole.
    net = env.conflist(env.plugin("p1", ADD={"stdoutBytes": 16 * MiB}))
    with pytest.raises(PluginError) as info:
        env.cni.add_network_list(net, env.rt, timeout=30)
    assert "too large" not in str(info.value)  # invalid JSON, but read to the end
    net = env.conflist(env.plugin("p1", ADD={"stdoutBytes": 16 * MiB + 1}))
    with pytest.raises(PluginError, match="output too large"):
        env.cni.add_network_list(net, env.rt, timeout=30)


# -- §6.2: the environment is read once, safely ------------------------------------------


class _Hammer:
    """A thread adding and removing ``os.environ`` keys as fast as it can."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        keys = [f"LIBCNI_HAMMER_{i}" for i in range(300)]
        while not self.stop.is_set():
            for k in keys:
                os.environ[k] = "x"
            for k in keys:
                os.environ.pop(k, None)

    def __enter__(self) -> _Hammer:
        self.interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        sys.setswitchinterval(self.interval)


def test_environment_snapshot_survives_a_thread_changing_os_environ() -> None:
    with _Hammer():
        for _ in range(3000):
            env = rq.environ_snapshot()
            assert env["PATH"] == os.environ["PATH"]


def test_operations_survive_a_thread_changing_os_environ(env: Env) -> None:
    net = env.conflist(env.plugin("p1"), version="1.1.0")
    with _Hammer():
        # 15 rounds (45 plugin runs): an unsafe copy of os.environ fails within them
        # (checked by making environ_snapshot a plain dict(os.environ)).
        for i in range(15):
            rt = attrs_evolve(env.rt, container_id=f"c{i}")
            env.cni.add_network_list(net, rt)
            env.cni.check_network_list(net, rt)
            env.cni.del_network_list(net, rt)
        env.cni.get_status_network_list(net)
        env.cni.gc_network_list(net)
        env.cni.get_version_info("p1")
    assert len(env.calls()) == 15 * 3 + 2  # ADD, CHECK, DEL; STATUS, GC (VERSION: no record)


# -- §8: capability arguments must be JSON ------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [{1: "a", "1": "b"}, {"portMappings": [{"hostPort": 80, 80: "x"}]}],
    ids=["top", "nested"],
)
def test_capability_args_with_non_string_keys_are_refused_before_anything_runs(
    env: Env, args: dict[Any, Any]
) -> None:
    net = env.conflist({**env.plugin("p1"), "capabilities": {"portMappings": True}})
    rt = attrs_evolve(env.rt, capability_args=args)
    for op in (env.cni.add_network_list, env.cni.check_network_list, env.cni.del_network_list):
        with pytest.raises(ConfigError):
            op(net, rt)
    assert env.calls() == []
    assert not env.entry_path().exists()
