"""The container runtime that the kill test kills (tests/reliability/killtest.py).

Usage (inside the test's throwaway "host" network namespace)::

    python kill_runtime.py run REQUEST_JSON   # one setup or ADD, killed by the test
    python kill_runtime.py gc REQUEST_JSON    # the restarted runtime: gc, nothing else

``REQUEST_JSON`` is one JSON object::

    {"op": "setup" | "add",
     "conf_dir": "...", "plugin_dirs": ["..."], "cache_dir": "...",
     "network": "...",              # the bridge network (a file of conf_dir)
     "plugin_types": ["bridge", "portmap"],   # its plugins, in order
     "container_id": "...", "netns": "/run/netns/...",
     "capability_args": {...},
     "events": "/path/events.log",  # run: where the runtime logs what it does
     "kill_at": null | "lock" | "first-plugin" | "after-plugin:TYPE"
                | "cache-temp" | "after-cache",   # others: ignored here
                                  # (the test's host-local wrapper acts on them)
     "valid_containers": [...]}     # gc

``run`` prepares everything (imports libcni, loads the configuration, runs
the operation once with a ``MockExec`` in a scratch cache so that what libcni
imports at first use is imported, as in a runtime that has been running), prints
``ready <pid> <libcni file>``, waits for a line on stdin, then performs the
operation: ``op`` ``setup`` is ``NetworkManager.setup`` (loopback, then the
bridge network as ``eth0``), ``add`` is ``CNIConfig.add_network_list`` of the
bridge network as ``eth0``. It prints ``done <seconds>`` when it returns.

What it did is logged to ``events``, one line per event, each written with
one ``write`` of an ``O_APPEND`` file (a SIGKILL never leaves half a line)::

    go                      the operation starts
    start TYPE COMMAND      a plugin is about to run (RawExec.exec_plugin called)
    end TYPE COMMAND ok|error
    done                    the operation returned

The runtime logs nothing after it is killed, so the last line says where it
was when it died. The plugins run with libcni's default executor
(``RawExec``); only its ``exec_plugin`` method is wrapped, to log.

**Fault injection** (``kill_at``): the runtime kills itself with SIGKILL at
an exact instant of the ADD of the bridge network, which random kills
rarely hit. The hooks wrap, in this process only, ``RawExec.exec_plugin``
and functions of the standard library (no libcni file is changed):

- ``lock``: right after ``fcntl.flock`` took the exclusive lock of the
  attachment's lock file (``<cache>/locks/<network>-<id>-eth0``): after the
  locks, before the write-ahead record (behaviour.md §4.1);
- ``first-plugin``: when the first plugin of the network is about to run
  (after the record, if the library writes one);
- ``after-plugin:TYPE``: right after plugin ``TYPE`` returned its result;
- ``cache-temp``: inside the cache write, when the temporary file is written
  and is about to be renamed over the entry (``os.rename``/``os.replace``
  into ``<cache>/results/<network>-<id>-eth0``);
- ``after-cache``: right after that rename returned (the entry is complete;
  whatever the library does after it, such as ending the record, is not).

A hook that never fires lets the operation run to its end (``done``).

``gc`` is the runtime after a restart: a fresh process with the same cache
and configuration directories runs ``NetworkManager(...).gc(valid_containers)``
and nothing else, then prints ``{"ok": true}`` or ``{"ok": false, "error":
...}`` as JSON (with ``"libcni"``: the file of the libcni it imported).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import tempfile
import time
from typing import Any


def _log(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - never reached


def _path_of(name: Any, dir_fd: int | None) -> str:
    """The absolute path ``name`` means (relative to ``dir_fd`` when given)."""
    path = os.fsdecode(name)
    if os.path.isabs(path):
        return os.path.normpath(path)
    base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.getcwd()
    return os.path.normpath(os.path.join(base, path))


def _install_hooks(req: dict[str, Any], events: int) -> None:
    """Wrap ``RawExec.exec_plugin`` (to log, and for the plugin instants) and the
    standard-library calls of the other instants."""
    from libcni.invoke import RawExec

    kill_at: str = req.get("kill_at") or ""
    cache = os.path.realpath(req["cache_dir"])
    attachment = f"{req['network']}-{req['container_id']}-eth0"
    lock_path = os.path.join(cache, "locks", attachment)
    entry_path = os.path.join(cache, "results", attachment)
    network_types: list[str] = req["plugin_types"]
    real_exec = RawExec.exec_plugin

    def exec_plugin(
        self: Any, path: str, stdin: bytes, env: Any, timeout: Any, **options: Any
    ) -> bytes:
        ptype = os.path.basename(path)
        command = env.get("CNI_COMMAND", "?")
        mine = command == "ADD" and ptype in network_types
        if mine and kill_at == "first-plugin" and ptype == network_types[0]:
            _die()
        _log(events, f"start {ptype} {command}")
        try:
            out: bytes = real_exec(self, path, stdin, env, timeout, **options)  # pass_fd
        except BaseException:
            _log(events, f"end {ptype} {command} error")
            raise
        _log(events, f"end {ptype} {command} ok")
        if mine and kill_at in (f"after-plugin:{ptype}",):
            _die()
        return out

    RawExec.exec_plugin = exec_plugin  # type: ignore[method-assign]

    if kill_at == "lock":
        real_flock = fcntl.flock

        def flock(fd: Any, op: int) -> None:
            real_flock(fd, op)
            if op & fcntl.LOCK_EX and os.readlink(f"/proc/self/fd/{int(fd)}") == lock_path:
                _die()

        fcntl.flock = flock

    if kill_at in ("cache-temp", "after-cache"):
        for fname in ("rename", "replace"):
            real = getattr(os, fname)

            def moved(
                src: Any,
                dst: Any,
                *,
                src_dir_fd: Any = None,
                dst_dir_fd: Any = None,
                _real: Any = real,
            ) -> None:
                target = _path_of(dst, dst_dir_fd) == entry_path
                if target and kill_at == "cache-temp":
                    _die()
                _real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                if target and kill_at == "after-cache":
                    _die()

            setattr(os, fname, moved)


def _operation(req: dict[str, Any], cache_dir: str, exec: Any = None) -> Any:
    """The operation of ``req`` on ``cache_dir``, ready to run (its configuration loaded)."""
    import libcni

    caps = req.get("capability_args") or {}
    if req["op"] == "setup":
        manager = libcni.NetworkManager(
            req["conf_dir"], req["plugin_dirs"], cache_dir=cache_dir, loopback=True, exec=exec
        )
        manager.networks()
        return lambda cid, netns: manager.setup(cid, netns, capability_args=caps)
    cni = libcni.CNIConfig(req["plugin_dirs"], cache_dir=cache_dir, exec=exec)
    net = libcni.load_conf_list(req["conf_dir"], req["network"])
    return lambda cid, netns: cni.add_network_list(
        net, libcni.RuntimeConf(cid, netns, "eth0", capability_args=caps)
    )


def _warm_up(req: dict[str, Any]) -> None:
    """Run the operation once with no process (``MockExec``) in a scratch cache.

    libcni imports some modules at their first use (the cache's encoder, at
    the first cache write): a runtime that has been running a while has them,
    so that the random kills land where a running runtime spends its time.
    """
    from libcni.testing import MockExec

    def plugin(call: Any) -> Any:
        if call.command == "ADD" and call.stdin.get("type") == "bridge":
            return {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": "/run/netns/warm-up"}],
                "ips": [{"address": "10.99.0.250/24", "interface": 0}],
            }
        return None

    with tempfile.TemporaryDirectory(prefix="kill-warm-up-") as scratch:
        _operation(req, scratch, MockExec(plugin))("warm-up", "/run/netns/warm-up")


def run(req: dict[str, Any]) -> int:
    import libcni

    events = os.open(req["events"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _warm_up(req)
    op = _operation(req, req["cache_dir"])

    def operation() -> None:
        op(req["container_id"], req["netns"])

    _install_hooks(req, events)
    sys.stdout.write(f"ready {os.getpid()} {libcni.__file__}\n")
    sys.stdout.flush()
    if not sys.stdin.readline():
        return 2  # the test went away
    start = time.monotonic()
    _log(events, "go")
    operation()
    _log(events, "done")
    sys.stdout.write(f"done {time.monotonic() - start:.6f}\n")
    sys.stdout.flush()
    return 0


def gc(req: dict[str, Any]) -> int:
    import libcni

    manager = libcni.NetworkManager(
        req["conf_dir"], req["plugin_dirs"], cache_dir=req["cache_dir"], loopback=True
    )
    try:
        manager.gc(req.get("valid_containers") or [])
    except Exception as e:
        errors = [str(x) for x in getattr(e, "errors", None) or []]
        reply: dict[str, Any] = {"ok": False, "error": f"{type(e).__name__}: {e}", "errors": errors}
    else:
        reply = {"ok": True}
    reply["libcni"] = libcni.__file__
    print(json.dumps(reply))
    return 0


def main(argv: list[str]) -> int:
    req = json.loads(argv[1])
    if argv[0] == "run":
        return run(req)
    if argv[0] == "gc":
        return gc(req)
    raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
