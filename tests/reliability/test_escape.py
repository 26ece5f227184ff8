"""Names and symlinks never make libcni touch a file outside its directories (behaviour.md §6.1, §8).

Container IDs, interface names and network names become cache file names;
plugin types become binary paths. Values that try to leave their directory
(``..``, ``../x``, ``/``, NUL, 300+ characters...) are refused by every
operation, not only ADD: nothing runs, and no file outside ``<cache>/locks``
is created, changed or removed. Symlinks planted at a cache entry, at the
results directory, at the locks directory or at a lock file are never followed
for a write (their targets stay as they were), nor for a read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import TESTPLUGIN

import libcni
from libcni import CacheError, CNIError, GCArgs, RuntimeConf

from .conftest import Env

pytestmark = pytest.mark.env(cls=Env)

BAD_NAMES = {
    "dotdot": "..",
    "dot": ".",
    "parent": "../x",
    "deep-parent": "../../../victim",
    "rooted": "/../../victim",
    "slash": "/",
    "absolute": "/etc/passwd",
    "inner-slash": "a/b",
    "nul": "x\0y",
    "long": "n" * 300,
    "empty": "",
}


def _snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[str, str]]:
    """Every path under ``root`` -> (kind, content digest or link target)."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path in skip:
                continue
            if path.is_symlink():
                out[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                out[str(path)] = ("dir", "")
            else:
                out[str(path)] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return out


class Planted:
    """An Env with one valid entry, traps for escaping names, and an "evil" plugin outside bin/."""

    def __init__(self, env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
        self.env = env
        # Any run of any plugin is recorded, also VERSION probes (no "record" key).
        monkeypatch.setenv("TESTPLUGIN_RECORD", str(env.record))
        self.net = env.conflist(env.plugin("p1"), version="1.1.0")
        env.cni.add_network_list(self.net, env.rt)
        results = env.results_dir()
        # Directories that make "<results>/testnet-<escaping ID>-eth0" resolve somewhere.
        (results / "testnet-..").mkdir()
        (results / "testnet-").mkdir()
        (env.cache / "victim-eth0").write_text("victim in the cache directory")
        (env.root / "victim-eth0").write_text("victim beside the cache directory")
        (env.root / "evil").write_bytes(TESTPLUGIN.read_bytes())
        (env.root / "evil").chmod(0o755)
        env.record.write_text("")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, tuple[str, str]]:
        return _snapshot(self.env.root, (self.env.record,))

    def assert_untouched(self) -> None:
        after = self.snapshot()
        changed = [p for p, v in self.before.items() if after.get(p) != v]
        assert changed == [], f"changed or removed: {changed}"
        locks = str(self.env.cache / "locks") + os.sep
        new = [p for p in after if p not in self.before and not p.startswith(locks)]
        assert new == [], f"created outside <cache>/locks: {new}"
        assert self.env.calls() == [], "a plugin ran"


def _operations(
    cni: libcni.CNIConfig, net: libcni.NetworkConfigList, rt: RuntimeConf
) -> dict[str, Callable[[], Any]]:
    single = net.plugins[0]
    if not single.name:
        single = libcni.inject_conf(single, {"name": net.name, "cniVersion": net.cni_version})
    return {
        "add": lambda: cni.add_network_list(net, rt),
        "check": lambda: cni.check_network_list(net, rt),
        "del": lambda: cni.del_network_list(net, rt),
        "cached-result": lambda: cni.get_network_list_cached_result(net, rt),
        "cached-config": lambda: cni.get_network_list_cached_config(net, rt),
        "add-single": lambda: cni.add_network(single, rt),
        "check-single": lambda: cni.check_network(single, rt),
        "del-single": lambda: cni.del_network(single, rt),
        "cached-result-single": lambda: cni.get_network_cached_result(single, rt),
        "cached-config-single": lambda: cni.get_network_cached_config(single, rt),
    }


def bounded(what: str, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    """``fn()``, failing the test (instead of hanging it) if it does not return in time.

    A hung call stays blocked in a daemon thread: it cannot keep the tests from ending.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", fn()))
        except BaseException as e:
            outcome.append(("error", e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{what} hung for {timeout}s (a deadlock?)")
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


def _refused(what: str, fn: Callable[[], Any]) -> None:
    try:
        got = bounded(what, fn)
    except CNIError:
        return
    raise AssertionError(f"{what} was not refused; it returned {got!r}")


@pytest.mark.parametrize("field", ["container_id", "ifname", "network"])
@pytest.mark.parametrize("bad", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_escaping_names_are_refused_by_every_operation(
    env: Env, monkeypatch: pytest.MonkeyPatch, field: str, bad: str
) -> None:
    planted = Planted(env, monkeypatch)
    rt = env.rt
    net = planted.net
    if field == "network":
        obj = json.loads(net.bytes)
        obj["name"] = bad
        obj["plugins"][0]["name"] = bad
        try:
            net = libcni.conf_list_from_bytes(json.dumps(obj))
        except CNIError:  # refused already when parsed
            planted.assert_untouched()
            return
    else:
        names = {"container_id": "ctr1", "ifname": "eth0", field: bad}
        rt = RuntimeConf(names["container_id"], "/var/run/netns/x", names["ifname"])
    for what, fn in _operations(env.cni, net, rt).items():
        _refused(f"{what} with {field}={bad!r}", fn)
    if field == "network":
        _refused("gc", lambda: env.cni.gc_network_list(net, GCArgs()))
    if field == "container_id" and bad:
        _refused("get_cached_attachments", lambda: env.cni.get_cached_attachments(bad))
    planted.assert_untouched()


BAD_TYPES = {
    "dotdot": "..",
    "dot": ".",
    "parent": "../evil",
    "deep-parent": "../../evil",
    "slash": "/",
    "inner-slash": "bin/p1",
    "nul": "p1\0",
    "long": "p" * 300,
}


@pytest.mark.parametrize("bad", list(BAD_TYPES.values()), ids=list(BAD_TYPES))
def test_escaping_plugin_types_are_refused_by_every_operation(
    env: Env, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    planted = Planted(env, monkeypatch)
    types = [bad, str(env.root / "evil")] if bad == "../evil" else [bad]
    for ptype in types:
        obj = {"cniVersion": "1.1.0", "name": "testnet", "plugins": [{"type": ptype}]}
        net = libcni.conf_list_from_bytes(json.dumps(obj))
        ops = _operations(env.cni, net, env.rt)
        del ops["cached-result"], ops["cached-config"]
        del ops["cached-result-single"], ops["cached-config-single"]
        ops["gc"] = lambda n=net: env.cni.gc_network_list(n)  # type: ignore[misc]
        ops["status"] = lambda n=net: env.cni.get_status_network_list(n)  # type: ignore[misc]
        ops["validate"] = lambda n=net: env.cni.validate_network_list(n)  # type: ignore[misc]
        ops["version"] = lambda t=ptype: env.cni.get_version_info(t)  # type: ignore[misc]
        for what, fn in ops.items():
            if what == "del":
                # DEL of the valid entry with an unusable plugin: refused, entry kept.
                _refused(f"{what} with type={ptype!r}", fn)
                continue
            _refused(f"{what} with type={ptype!r}", fn)
    planted.assert_untouched()


# -- symlinks --------------------------------------------------------------------------------


def _valid_entry(cid: str = "ctr1") -> bytes:
    return json.dumps(
        {
            "kind": "cniCacheV1",
            "containerId": cid,
            "networkName": "testnet",
            "ifName": "eth0",
            "config": "e30=",
            "result": {"cniVersion": "1.0.0", "ips": [{"address": "10.6.6.6/8"}]},
        }
    ).encode()


def test_symlink_at_an_entry_is_never_followed(env: Env) -> None:
    net = env.conflist(env.plugin("p1"))
    victim = env.root / "victim"
    victim.write_bytes(_valid_entry())
    entry = env.entry_path()
    entry.parent.mkdir(parents=True)

    entry.symlink_to(victim)
    with pytest.raises(CacheError) as info:
        env.cni.get_network_list_cached_result(net, env.rt)
    assert "symbolic link" in str(info.value)
    with pytest.raises(CacheError):
        env.cni.get_network_list_cached_config(net, env.rt)
    assert env.cni.get_cached_attachments() == []
    with pytest.raises(CacheError):
        env.cni.check_network_list(net, env.rt)

    env.cni.add_network_list(net, env.rt)  # replaces the link, never writes through it
    assert not entry.is_symlink() and entry.is_file()
    assert victim.read_bytes() == _valid_entry()

    entry.unlink()
    entry.symlink_to(victim)
    env.cni.del_network_list(net, env.rt)  # removes the link, not its target
    assert not entry.exists() and not entry.is_symlink()
    assert victim.read_bytes() == _valid_entry()
    dels = [c for c in env.calls() if c["command"] == "DEL"]
    assert "prevResult" not in dels[0]["stdin"], "DEL read the symlink's target"

    # A dangling link where an entry goes: ADD does not create its target.
    entry.symlink_to(env.root / "created-through-link")
    env.cni.add_network_list(net, env.rt)
    assert not (env.root / "created-through-link").exists()


@pytest.mark.parametrize("what", ["results", "locks", "lock-file", "network-lock-file"])
def test_symlinked_cache_directories_and_lock_files_are_never_followed(env: Env, what: str) -> None:
    net = env.conflist(env.plugin("p1"))
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "testnet-ctr1-eth0").write_bytes(_valid_entry())
    env.cache.mkdir()
    if what == "results":
        (env.cache / "results").symlink_to(elsewhere)
    elif what == "locks":
        (env.cache / "locks").symlink_to(elsewhere)
    elif what == "lock-file":
        (env.cache / "locks").mkdir()
        (env.cache / "locks" / "testnet-ctr1-eth0").symlink_to(elsewhere / "lock")
    else:
        (env.cache / "locks" / "networks").mkdir(parents=True)
        (env.cache / "locks" / "networks" / "testnet").symlink_to(elsewhere / "lock")
    before = _snapshot(elsewhere, ())

    with pytest.raises(CacheError) as info:
        env.cni.add_network_list(net, env.rt)
    assert "symbolic link" in str(info.value), str(info.value)
    ops = [env.cni.del_network_list]
    if what != "network-lock-file":  # CHECK takes no network lock
        ops.append(env.cni.check_network_list)
    for op in ops:
        with pytest.raises(CacheError):
            op(net, env.rt)
    if what == "results":
        with pytest.raises(CacheError):
            env.cni.get_network_list_cached_result(net, env.rt)
        listed = None
        with contextlib.suppress(CacheError):
            listed = env.cni.get_cached_attachments()
        assert not listed, "listed the entries of the symlink's target"
    assert _snapshot(elsewhere, ()) == before
    # Nothing ran: the configuration was refused before any plugin started.
    assert [c for c in env.calls() if c.get("command") in ("DEL", "CHECK")] == []


@pytest.mark.parametrize("command", ["DEL", "CHECK"])
def test_empty_interface_name_is_refused_without_deadlock(env: Env, command: str) -> None:
    # DEL does not validate names (behaviour.md §4.3) but the cache refuses an empty
    # one; the attachment lock must not turn into a second, exclusive, network lock.
    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, env.rt)
    rt = RuntimeConf("ctr1", "/var/run/netns/x", "")
    op = env.cni.del_network_list if command == "DEL" else env.cni.check_network_list
    with pytest.raises(libcni.ValidationError):
        bounded(f"{command} with an empty interface name", lambda: op(net, rt))
    assert [c["command"] for c in env.calls()] == ["ADD"]
    # The network is not left locked: GC (exclusive) still runs.
    bounded("GC after it", lambda: env.cni.gc_network_list(net, GCArgs()))
    assert env.cni.get_cached_attachments() == []


def test_empty_interface_name_is_refused_without_deadlock_async(env: Env) -> None:
    from libcni.aio import AsyncCNIConfig

    net = env.conflist(env.plugin("p1"))
    env.cni.add_network_list(net, env.rt)
    acni = AsyncCNIConfig([env.plugins], cache_dir=env.cache)
    rt = RuntimeConf("ctr1", "/var/run/netns/x", "")

    async def scenario() -> None:
        await asyncio.wait_for(acni.del_network_list(net, rt), 10)

    with pytest.raises(libcni.ValidationError):
        asyncio.run(scenario())


def test_symlink_inside_a_plugin_directory_is_followed(
    env: Env,
) -> None:
    # A symlink named like the plugin, inside a plugin directory, is the documented way
    # to install plugins: it is followed. Escaping happens only through the type.
    target = env.root / "real-p9"
    shutil.copy2(TESTPLUGIN, target)
    (env.plugins / "p9").symlink_to(target)
    net = env.conflist(env.plugin("p9"))
    assert env.cni.add_network_list(net, env.rt).to_dict()["ips"]
