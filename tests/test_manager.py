"""NetworkManager (behaviour.md §11) with the real test plugin (tests/plugins/testplugin).

The plugin directory holds ``testplugin`` and ``loopback`` (a link to the test
plugin, so that the loopback network runs a real process we can record). Every
plugin run is appended to a record file (``TESTPLUGIN_RECORD``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import attrs
import harness
import pytest

import libcni
from libcni import (
    AlreadyAttachedError,
    ConfigError,
    GCError,
    NetworkRequest,
    NotReadyError,
    SetupError,
    TeardownError,
    ValidationError,
)
from libcni.cache import CacheEntry, ResultCache

PLUGIN = harness.TESTPLUGIN
Env = harness.ManagerEnv
pytestmark = pytest.mark.env(cls=Env)


def fail(command: str = "ADD", code: int = 11, msg: str = "boom") -> dict[str, Any]:
    return {"type": "testplugin", "test": {command: {"error": {"code": code, "msg": msg}}}}


# -- §11.1 configuration --------------------------------------------------------------


def test_usable_networks_in_file_order_and_skipped_files_with_reasons(env: Env) -> None:
    env.write("10-a.conflist", "a")
    (env.conf / "20-broken.conflist").write_text("{not json")
    env.write("30-nobin.conflist", "nobin", {"type": "no-such-plugin"})
    env.write("40-b.conflist", "b")
    (env.conf / "50-c.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "c", "type": "testplugin"})
    )
    (env.conf / "60-ignored.txt").write_text("{}")
    loaded = env.manager().networks()
    assert list(loaded.networks) == ["a", "b", "c"]
    assert loaded.defaults == ("a", "b", "c")
    assert set(loaded.skipped) == {
        str(env.conf / "20-broken.conflist"),
        str(env.conf / "30-nobin.conflist"),
    }
    assert "no-such-plugin" in loaded.skipped[str(env.conf / "30-nobin.conflist")]
    assert env.runs() == []  # no VERSION probe, nothing runs


def test_first_usable_file_wins_a_duplicate_name(env: Env) -> None:
    env.write("10-dup.conflist", "dup", {"type": "no-such-plugin"})  # unusable: hides nothing
    env.write("20-dup.conflist", "dup", {"type": "testplugin", "which": "second"})
    env.write("30-dup.conflist", "dup", {"type": "testplugin", "which": "third"})
    loaded = env.manager().networks()
    assert loaded.networks["dup"].plugins[0].raw["which"] == "second"
    assert "already defined" in loaded.skipped[str(env.conf / "30-dup.conflist")]
    assert str(env.conf / "10-dup.conflist") in loaded.skipped


def test_default_networks_max_networks_and_named_defaults(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    assert env.manager(max_networks=1).networks().defaults == ("a",)
    assert env.manager(max_networks=0).networks().defaults == ("a", "b")
    assert env.manager(default_networks=["b", "a"]).networks().defaults == ("b", "a")


def test_every_kind_of_change_is_seen_by_the_next_operation(env: Env) -> None:
    m = env.manager()
    assert m.networks().networks == {}
    a = env.write("10-a.conflist", "a")  # created
    assert list(m.networks().networks) == ["a"]
    # Rewritten in place, same size, at once (within the timestamp granularity).
    a.write_text(a.read_text().replace('"a"', '"x"'))
    assert list(m.networks().networks) == ["x"]
    # Rewritten with an old modification time: inode, size and ctime say nothing new... but
    # the content changes are still seen because ctime moves.
    old = time.time() - 3600
    a.write_text(a.read_text().replace('"x"', '"y"'))
    os.utime(a, (old, old))
    assert list(m.networks().networks) == ["y"]
    # Renamed out, then in.
    a.rename(env.root / "away.conflist")
    assert m.networks().networks == {}
    (env.root / "away.conflist").rename(env.conf / "20-y.conflist")
    assert list(m.networks().networks) == ["y"]
    # Deleted.
    (env.conf / "20-y.conflist").unlink()
    assert m.networks().networks == {}
    # The directory removed and re-created.
    env.write("10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]
    for p in env.conf.iterdir():
        p.unlink()
    env.conf.rmdir()
    assert m.networks().networks == {}
    env.conf.mkdir()
    env.write("10-b.conflist", "b")
    assert list(m.networks().networks) == ["b"]


def test_same_size_rewrite_long_after_the_previous_check_is_seen(env: Env) -> None:
    """The old mtime case: signature identical except mtime/ctime, which do move."""
    a = env.write("10-a.conflist", "a")
    past = time.time() - 10
    os.utime(a, (past, past))
    m = env.manager()
    assert list(m.networks().networks) == ["a"]
    assert list(m.networks().networks) == ["a"]  # stable: no reload needed
    a.write_text(a.read_text().replace('"a"', '"b"'))
    assert list(m.networks().networks) == ["b"]


def test_unchanged_configuration_is_not_reloaded(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    a = env.write("10-a.conflist", "a")
    past = time.time() - 10
    os.utime(a, (past, past))
    os.utime(env.conf, (past, past))
    os.utime(env.bin, (past, past))
    m = env.manager()
    first = m.networks()
    # Checked long after anything was modified: the same object comes back.
    state = m._state.watcher._state
    assert state is not None
    m._state.watcher._state = attrs.evolve(state, checked_at=time.time_ns() + 3600 * 10**9)
    assert m.networks() is first


def test_drop_in_directory_changes_are_seen(env: Env) -> None:
    (env.conf / "10-d.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "d"}))
    m = env.manager()
    loaded = m.networks()
    assert "d" not in loaded.networks and str(env.conf / "10-d.conflist") in loaded.skipped
    (env.conf / "d").mkdir()
    (env.conf / "d" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 1}))
    assert m.networks().networks["d"].plugins[0].raw["k"] == 1
    (env.conf / "d" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 2}))
    assert m.networks().networks["d"].plugins[0].raw["k"] == 2
    (env.conf / "d" / "20-q.conf").write_text(json.dumps({"type": "testplugin", "k": 3}))
    assert len(m.networks().networks["d"].plugins) == 2


def test_drop_in_directory_created_later_or_changed_is_seen_with_old_timestamps(
    env: Env,
) -> None:
    # Every modification time is old, so the "modified recently" rule reloads nothing:
    # the change check itself must see the drop-in directory appear (it is stat'ed only
    # when the configuration directory's listing holds it) and a file in it change.
    w = env.manager()._state.watcher
    past = time.time() - 60

    def age() -> None:
        for p in (env.conf, *env.conf.rglob("*"), env.bin):
            os.utime(p, (past, past))

    def current() -> libcni.LoadedNetworks:
        loaded = w.current()
        assert w._state is not None
        w._state = attrs.evolve(w._state, checked_at=time.time_ns() + 3600 * 10**9)
        return loaded

    (env.conf / "10-d.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "d"}))
    age()
    current()
    first = current()  # now watching d's drop-in directory too
    assert "d" not in first.networks
    assert current() is first  # nothing changed: no reload
    (env.conf / "d").mkdir()
    (env.conf / "d" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": 1}))
    age()
    second = current()
    assert second.networks["d"].plugins[0].raw["k"] == 1
    assert current() is second
    # Rewritten in place and aged: only the file itself tells (not its directories).
    p = env.conf / "d" / "10-p.conf"
    p.write_text(json.dumps({"type": "testplugin", "k": 22}))
    os.utime(p, (past, past))
    assert current().networks["d"].plugins[0].raw["k"] == 22


def test_file_created_renamed_or_deleted_is_seen_with_old_timestamps(env: Env) -> None:
    # The directory's names are listed again only when its stat changed: creating,
    # renaming or deleting a file changes it even when every mtime is set back.
    w = env.manager()._state.watcher
    past = time.time() - 60

    def current() -> libcni.LoadedNetworks:
        for p in (env.conf, *env.conf.iterdir(), env.bin):
            os.utime(p, (past, past))
        loaded = w.current()
        assert w._state is not None
        w._state = attrs.evolve(w._state, checked_at=time.time_ns() + 3600 * 10**9)
        return loaded

    a = env.write("10-a.conflist", "a")
    current()
    assert list(current().networks) == ["a"]
    env.write("20-b.conflist", "b")
    assert list(current().networks) == ["a", "b"]
    a.rename(env.conf / "30-a.conflist")
    assert list(current().networks) == ["b", "a"]
    (env.conf / "20-b.conflist").unlink()
    assert list(current().networks) == ["a"]


def test_directory_modified_just_before_its_listing_is_listed_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection (as the same-size rewrite test): the directory's stat is frozen
    while a file is created in it, as a creation within the timestamp granularity
    would leave it. Modified that recently, the directory is listed again, so the new
    file is watched: its later in-place rewrite is seen."""
    from libcni.manager import _config

    w = env.manager()._state.watcher
    env.write("10-a.conflist", "a")
    w.current()
    frozen = _config._stat(str(env.conf))
    real = _config._stat
    monkeypatch.setattr(_config, "_stat", lambda p: frozen if p == str(env.conf) else real(p))
    b = env.write("20-b.conflist", "b")
    assert list(w.current().networks) == ["a", "b"]

    def later() -> libcni.LoadedNetworks:
        loaded = w.current()
        assert w._state is not None  # from now on nothing counts as recently modified
        w._state = attrs.evolve(w._state, checked_at=time.time_ns() + 3600 * 10**9)
        return loaded

    later()  # now watching b's drop-in directory too
    stable = later()
    assert later() is stable
    b.write_text(b.read_text().replace('"b"', '"b2"'))
    assert list(later().networks) == ["a", "b2"]


def test_plugin_installed_later_makes_a_file_usable(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "later"})
    m = env.manager()
    assert "a" not in m.networks().networks
    (env.bin / "later").symlink_to(PLUGIN)
    assert "a" in m.networks().networks


# -- §11.2 setup ----------------------------------------------------------------------


def test_setup_loopback_first_then_networks_with_generated_names(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager()
    view = m.setup("c1", "/var/run/netns/c1")
    assert env.calls() == [
        ("ADD", "cni-loopback", "lo"),
        ("ADD", "a", "eth0"),
        ("ADD", "b", "eth1"),
    ]
    assert [(a.network, a.ifname) for a in view.attachments] == [
        ("cni-loopback", "lo"),
        ("a", "eth0"),
        ("b", "eth1"),
    ]
    assert env.cached() == ["a-c1-eth0", "b-c1-eth1", "cni-loopback-c1-lo"]
    lo_req = env.runs()[0]["stdin"]
    assert lo_req == {"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"}


def test_requested_names_are_reserved_before_generated_ones(env: Env) -> None:
    for n in "abc":
        env.write(f"10-{n}.conflist", n)
    m = env.manager(loopback=False)
    view = m.setup("c1", "ns", networks=["a", NetworkRequest("b", "eth0"), "c"])
    assert [(a.network, a.ifname) for a in view.attachments] == [
        ("a", "eth1"),
        ("b", "eth0"),
        ("c", "eth2"),
    ]


def test_interface_prefix(env: Env) -> None:
    env.write("10-a.conflist", "a")
    view = env.manager(interface_prefix="net").setup("c1", "ns")
    assert [a.ifname for a in view.attachments] == ["lo", "net0"]


@pytest.mark.parametrize(
    ("networks", "error"),
    [
        ([NetworkRequest("a", "eth5"), NetworkRequest("b", "eth5")], ConfigError),
        ([NetworkRequest("a", "lo")], ConfigError),  # loopback has it
        (["a", "nope"], ConfigError),
        ([NetworkRequest("a", "bad/name")], ValidationError),
        ([NetworkRequest("a", "x" * 16)], ValidationError),
    ],
)
def test_bad_requests_fail_before_anything_runs(
    env: Env, networks: list[Any], error: type[Exception]
) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    with pytest.raises(error):
        env.manager().setup("c1", "ns", networks=networks)
    assert env.runs() == []
    assert env.cached() == []


def test_unknown_network_error_names_it(env: Env) -> None:
    env.write("10-a.conflist", "a")
    with pytest.raises(ConfigError, match="'nope'"):
        env.manager().setup("c1", "ns", networks=["nope"])


def test_second_setup_without_teardown_is_already_attached(env: Env) -> None:
    env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", "ns")
    before = len(env.runs())
    with pytest.raises(AlreadyAttachedError) as info:
        m.setup("c1", "ns")
    assert (info.value.network, info.value.ifname) == ("cni-loopback", "lo")
    assert len(env.runs()) == before  # nothing ran
    m.teardown("c1")
    m.setup("c1", "ns")  # fine after a teardown


def test_args_and_capability_args_per_request(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "capabilities": {"mac": True}})
    env.write("20-b.conflist", "b", {"type": "testplugin", "capabilities": {"mac": True}})
    m = env.manager(loopback=False)
    m.setup(
        "c1",
        "ns",
        networks=[
            NetworkRequest("a", args=[("K2", "v2")]),
            NetworkRequest("b", capability_args={"mac": "0a:00:00:00:00:bb"}),
        ],
        args=[("K1", "v1")],
        capability_args={"mac": "0a:00:00:00:00:aa"},
    )
    a, b = env.runs()
    assert a["env"]["CNI_ARGS"] == "K1=v1;K2=v2"
    assert a["stdin"]["runtimeConfig"] == {"mac": "0a:00:00:00:00:aa"}
    assert b["env"]["CNI_ARGS"] == "K1=v1"
    assert b["stdin"]["runtimeConfig"] == {"mac": "0a:00:00:00:00:bb"}


def test_failed_setup_rolls_back_every_attempted_network_in_reverse(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b", fail())
    env.write("30-c.conflist", "c")
    m = env.manager()
    with pytest.raises(SetupError) as info:
        m.setup("c1", "ns")
    err = info.value
    assert err.code == 11 and err.cause.msg == "boom"
    assert [(a.network, a.ifname) for a in err.partial] == [("cni-loopback", "lo"), ("a", "eth0")]
    assert err.rollback_errors == []
    assert env.calls() == [
        ("ADD", "cni-loopback", "lo"),
        ("ADD", "a", "eth0"),
        ("ADD", "b", "eth1"),
        ("DEL", "b", "eth1"),  # the failed one included
        ("DEL", "a", "eth0"),
        ("DEL", "cni-loopback", "lo"),
    ]
    assert env.cached() == []
    assert "boom" in str(err)


def test_rollback_runs_every_del_and_keeps_entries_whose_del_failed(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("DEL", 7, "del of a failed"))
    env.write("20-b.conflist", "b")
    env.write("30-c.conflist", "c", fail("ADD"))
    m = env.manager()
    with pytest.raises(SetupError) as info:
        m.setup("c1", "ns")
    assert [e.msg for e in info.value.rollback_errors] == ["del of a failed"]
    assert [c for c in env.calls() if c[0] == "DEL"] == [
        ("DEL", "c", "eth2"),
        ("DEL", "b", "eth1"),
        ("DEL", "a", "eth0"),
        ("DEL", "cni-loopback", "lo"),
    ]
    assert env.cached() == ["a-c1-eth0"]  # kept so that teardown can retry
    assert "rollback" in str(info.value) and "del of a failed" in str(info.value)


def test_setup_timeout_bounds_all_adds_together(env: Env) -> None:
    slow = {"type": "testplugin", "test": {"ADD": {"sleep": 0.6, "passthrough": True}}}
    env.write("10-a.conflist", "a", slow)
    env.write("20-b.conflist", "b", slow)
    m = env.manager(loopback=False)
    start = time.monotonic()
    with pytest.raises(SetupError) as info:
        m.setup("c1", "ns", timeout=1.0)
    # Each ADD alone fits in the timeout; both together do not.
    assert isinstance(info.value.cause, TimeoutError)
    assert time.monotonic() - start < 2.5
    assert env.cached() == []
    # The rollback DELs ran even though no time was left for ADDs.
    assert [c for c in env.calls() if c[0] == "DEL"] == [("DEL", "b", "eth1"), ("DEL", "a", "eth0")]


def test_parallel_setup_runs_networks_at_the_same_time(env: Env) -> None:
    slow = {"type": "testplugin", "test": {"ADD": {"sleep": 0.5, "passthrough": True}}}
    for n in "abc":
        env.write(f"10-{n}.conflist", n, slow)
    m = env.manager()
    start = time.monotonic()
    view = m.setup("c1", "ns", parallel=True)
    elapsed = time.monotonic() - start
    assert elapsed < 1.3  # serially: 1.5 s at least
    assert [a.ifname for a in view.attachments] == ["lo", "eth0", "eth1", "eth2"]
    assert env.calls()[0] == ("ADD", "cni-loopback", "lo")  # loopback first, alone


def test_parallel_failure_does_not_cancel_the_others(env: Env) -> None:
    env.write("10-a.conflist", "a", fail())
    env.write(
        "20-b.conflist",
        "b",
        {"type": "testplugin", "test": {"ADD": {"sleep": 0.4, "passthrough": True}}},
    )
    m = env.manager()
    with pytest.raises(SetupError) as info:
        m.setup("c1", "ns", parallel=True)
    adds = [c for c in env.calls() if c[0] == "ADD"]
    assert sorted(adds) == sorted(
        [("ADD", "cni-loopback", "lo"), ("ADD", "a", "eth0"), ("ADD", "b", "eth1")]
    )
    assert [(a.network) for a in info.value.partial] == ["cni-loopback", "b"]
    dels = [c for c in env.calls() if c[0] == "DEL"]
    assert dels == [("DEL", "b", "eth1"), ("DEL", "a", "eth0"), ("DEL", "cni-loopback", "lo")]
    assert env.cached() == []


def test_setup_without_networks_is_not_ready_when_nothing_is_usable(env: Env) -> None:
    (env.conf / "10-bad.conflist").write_text("{")
    with pytest.raises(NotReadyError) as info:
        env.manager().setup("c1", "ns")
    assert info.value.code == 50
    assert "10-bad.conflist" in str(info.value)
    assert env.runs() == []


# -- the merged view ------------------------------------------------------------------


def result(*ifaces: dict[str, Any], ips: list[dict[str, Any]], dns: Any = None) -> dict[str, Any]:
    r: dict[str, Any] = {"cniVersion": "1.0.0", "interfaces": list(ifaces), "ips": ips}
    if dns:
        r["dns"] = dns
    return r


def test_merged_view_assigns_ips_within_their_own_attachment(env: Env) -> None:
    ra = result(
        {"name": "br0", "mac": "aa:00"},
        {"name": "veth1"},
        {"name": "eth0", "mac": "02:00", "sandbox": "/ns"},
        ips=[{"address": "10.0.0.2/24", "interface": 2}],
        dns={"nameservers": ["10.0.0.1"]},
    )
    # Its index 0 points at its own first interface, not at a's.
    rb = result(
        {"name": "eth1", "mac": "02:01", "sandbox": "/ns"},
        ips=[
            {"address": "10.1.0.2/24", "interface": 0},
            {"address": "fd00::2/64"},  # no index: the attachment's own interface
            {"address": "10.9.0.2/24", "interface": 7},  # invalid index: the same
        ],
    )
    rc = result(ips=[{"address": "10.2.0.2/16"}])  # no interfaces at all
    env.write("10-a.conflist", "a", {"type": "testplugin", "test": {"ADD": {"result": ra}}})
    env.write("20-b.conflist", "b", {"type": "testplugin", "test": {"ADD": {"result": rb}}})
    env.write("30-c.conflist", "c", {"type": "testplugin", "test": {"ADD": {"result": rc}}})
    m = env.manager()
    view = m.setup("c1", "ns")
    # Host-side ones excluded; "lo" (the test plugin's loopback result names it, without
    # a sandbox) counts because it is named as its attachment.
    assert set(view.interfaces) == {"lo", "eth0", "eth1", "eth2"}
    assert [str(i) for i in view.interfaces["lo"].ips] == ["10.1.2.3/24"]
    eth0, eth1, eth2 = (view.interfaces[n] for n in ("eth0", "eth1", "eth2"))
    assert (eth0.network, eth0.mac, eth0.sandbox) == ("a", "02:00", "/ns")
    assert [str(i) for i in eth0.ips] == ["10.0.0.2/24"]
    assert [str(i) for i in eth1.ips] == ["10.1.0.2/24", "fd00::2/64", "10.9.0.2/24"]
    assert (eth2.network, eth2.mac, [str(i) for i in eth2.ips]) == ("c", "", ["10.2.0.2/16"])
    # Loopback (the test plugin's default result, 10.1.2.3) is not among the ips.
    assert [str(i) for i in view.ips] == [
        "10.0.0.2/24",
        "10.1.0.2/24",
        "fd00::2/64",
        "10.9.0.2/24",
        "10.2.0.2/16",
    ]
    assert str(view.ip()) == "10.0.0.2/24"
    assert str(view.ip(6)) == "fd00::2/64"
    assert view.ip(4) == view.ip()
    assert [d.nameservers for d in view.dns] == [("10.0.0.1",)]
    # inspect gives the same view from the cache.
    again = m.inspect("c1")
    assert again.interfaces == view.interfaces and again.ips == view.ips
    assert [(a.network, a.ifname) for a in again.attachments] == [
        (a.network, a.ifname) for a in view.attachments
    ]


def test_old_version_results_are_read_through_their_1x_form(env: Env) -> None:
    r = {"cniVersion": "0.2.0", "ip4": {"ip": "10.3.0.2/24"}}
    env.write(
        "10-a.conflist",
        "a",
        {"type": "testplugin", "test": {"ADD": {"result": r}}},
        version="0.2.0",
    )
    view = env.manager(loopback=False).setup("c1", "ns")
    assert [str(i) for i in view.ips] == ["10.3.0.2/24"]
    assert view.attachments[0].result.cni_version == "0.2.0"


# -- §11.3 teardown, check, inspect -----------------------------------------------------


def test_teardown_in_reverse_natural_order_lo_last(env: Env) -> None:
    for i in range(12):
        env.write(f"{i:02d}.conflist", f"n{i}")
    m = env.manager()
    m.setup("c1", "ns")
    env.record.unlink()
    m.teardown("c1", "ns")
    assert [c[2] for c in env.calls()] == [f"eth{i}" for i in range(11, -1, -1)] + ["lo"]
    assert env.cached() == []
    assert m.inspect("c1").attachments == ()


def test_inspect_and_check_order_lo_first_then_natural(env: Env) -> None:
    for i in range(11):
        env.write(f"{i:02d}.conflist", f"n{i}")
    m = env.manager()
    m.setup("c1", "ns")
    assert [a.ifname for a in m.inspect("c1").attachments] == ["lo"] + [
        f"eth{i}" for i in range(11)
    ]
    env.record.unlink()
    m.check("c1", "ns")
    assert [c for c in env.calls()] == [("CHECK", "cni-loopback", "lo")] + [
        ("CHECK", f"n{i}", f"eth{i}") for i in range(11)
    ]


def test_teardown_uses_the_cached_configuration_after_the_file_changed_or_vanished(
    env: Env,
) -> None:
    a = env.write("10-a.conflist", "a", {"type": "testplugin", "gen": "old"})
    b = env.write("20-b.conflist", "b", {"type": "testplugin", "gen": "old"})
    m = env.manager(loopback=False)
    m.setup("c1", "ns", args=[("K", "V")], capability_args={"x": 1})
    a.write_text(
        json.dumps(
            {"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "testplugin", "gen": "new"}]}
        )
    )
    b.unlink()
    env.record.unlink()
    m.teardown("c1", "ns")
    runs = env.runs()
    assert [(r["stdin"]["name"], r["stdin"]["gen"]) for r in runs] == [("b", "old"), ("a", "old")]
    assert all(r["env"]["CNI_ARGS"] == "K=V" for r in runs)
    assert env.cached() == []


def _teardown_while_b_dels(env: Env, cid: str, meanwhile: Any) -> dict[str, Any]:
    """Tear down ``cid`` (networks ``a`` on eth0, ``b`` on eth1) in a thread; run
    ``meanwhile()`` while b's DEL plugin runs, i.e. after the teardown listed the
    cache and before a's DEL reads its entry. Returns the request a's DEL got."""
    m = env.manager(loopback=False)
    m.setup(cid, "ns")
    env.record.unlink()
    done: list[BaseException | None] = []

    def teardown() -> None:
        try:
            m.teardown(cid, "ns")
            done.append(None)
        except BaseException as e:  # pragma: no cover - reported below
            done.append(e)

    t = threading.Thread(target=teardown)
    t.start()
    deadline = time.monotonic() + 30
    while not any(r["stdin"]["name"] == "b" for r in env.runs()):  # b's DEL started
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.005)
    meanwhile()
    t.join(30)
    assert done == [None]
    assert [(r["command"], r["stdin"]["name"]) for r in env.runs()] == [("DEL", "b"), ("DEL", "a")]
    stdin: dict[str, Any] = env.runs()[1]["stdin"]
    return stdin


def test_teardown_del_reads_an_entry_rewritten_after_the_listing(env: Env) -> None:
    # The teardown lists the entries under the container lock and each DEL reuses its
    # listed entry only while its file is the one listed, unchanged: an entry rewritten
    # meanwhile (here by a direct CNIConfig user) gives DEL the new prevResult.
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b", {"type": "testplugin", "test": {"DEL": {"sleep": 1.0}}})
    cache = ResultCache(env.cache)
    new = {"cniVersion": "1.0.0", "ips": [{"address": "10.9.9.9/24"}]}

    def rewrite() -> None:
        with cache.lock("a", "c1", "eth0"):
            entry = cache.read("a", "c1", "eth0")
            assert entry is not None
            cache.write(attrs.evolve(entry, result=new))

    request = _teardown_while_b_dels(env, "c1", rewrite)
    assert request["prevResult"]["ips"] == [{"address": "10.9.9.9/24"}]
    assert env.cached() == []


def test_teardown_del_leaves_another_attachments_entry_written_after_the_listing(
    env: Env,
) -> None:
    # Network "a" + container "c-1" and network "a-c" + container "1" share the file
    # name a-c-1-eth0. Replaced meanwhile by the other attachment's entry, the listed
    # entry is not reused: a's DEL runs without prevResult and leaves the other's entry.
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b", {"type": "testplugin", "test": {"DEL": {"sleep": 1.0}}})
    cache = ResultCache(env.cache)
    other = {"cniVersion": "1.0.0", "ips": [{"address": "10.7.7.7/24"}]}

    def replace() -> None:
        with cache.lock("a", "c-1", "eth0"):
            assert cache.remove("a", "c-1", "eth0")
            cache.write(CacheEntry("1", "a-c", "eth0", b"{}", result=other))

    request = _teardown_while_b_dels(env, "c-1", replace)
    assert "prevResult" not in request
    kept = cache.read("a-c", "1", "eth0")
    assert kept is not None and kept.result == other


def test_teardown_falls_back_to_the_current_file_when_the_cache_has_no_usable_config(
    env: Env,
) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin", "gen": "current"})
    m = env.manager(loopback=False)
    m.setup("c1", "ns")
    path = env.cache / "results" / "a-c1-eth0"
    entry = json.loads(path.read_text())
    entry["config"] = "bm90IGpzb24="  # base64 of "not json"
    path.write_text(json.dumps(entry))
    env.record.unlink()
    m.teardown("c1")
    assert [r["stdin"]["gen"] for r in env.runs()] == ["current"]
    assert env.cached() == []


def test_teardown_runs_every_del_and_raises_all_failures(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("DEL", 7, "a failed"))
    env.write("20-b.conflist", "b")
    env.write("30-c.conflist", "c", fail("DEL", 5, "c failed"))
    m = env.manager()
    m.setup("c1", "ns")
    env.record.unlink()
    with pytest.raises(TeardownError) as info:
        m.teardown("c1", "ns")
    assert [e.msg for e in info.value.errors] == ["c failed", "a failed"]
    assert [c[2] for c in env.calls()] == ["eth2", "eth1", "eth0", "lo"]
    assert env.cached() == ["a-c1-eth0", "c-c1-eth2"]
    assert "a failed" in str(info.value) and "c failed" in str(info.value)


def test_teardown_of_given_networks_and_of_nothing(env: Env) -> None:
    env.write("10-a.conflist", "a")
    env.write("20-b.conflist", "b")
    m = env.manager()
    m.setup("c1", "ns")
    m.teardown("c1", networks=["a", "not-attached"])
    assert env.cached() == ["b-c1-eth1", "cni-loopback-c1-lo"]
    m.teardown("c1")
    m.teardown("c1")  # nothing cached: fine
    m.teardown("never-seen")
    assert env.cached() == []


def test_teardown_check_inspect_and_gc_work_with_no_usable_configuration(env: Env) -> None:
    a = env.write("10-a.conflist", "a")
    m = env.manager()
    m.setup("c1", "ns")
    m.setup("c2", "ns")
    a.unlink()
    with pytest.raises(NotReadyError):
        m.status()
    assert [x.network for x in m.inspect("c1").attachments] == ["cni-loopback", "a"]
    m.check("c1", "ns")
    m.gc(["c1"])
    assert env.cached() == ["a-c1-eth0", "cni-loopback-c1-lo"]
    m.teardown("c1", "ns")
    assert env.cached() == []


def test_check_raises_the_first_failure(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("CHECK", 11, "a not ok"))
    env.write("20-b.conflist", "b", fail("CHECK", 11, "b not ok"))
    m = env.manager()
    m.setup("c1", "ns")
    with pytest.raises(libcni.PluginError, match="a not ok"):
        m.check("c1", "ns")


# -- §11.4 status and gc ----------------------------------------------------------------


def test_status_messages_say_what_to_do(env: Env) -> None:
    m = env.manager()
    with pytest.raises(NotReadyError, match="no network configuration found") as info:
        m.status()
    assert info.value.code == 50
    (env.conf / "10-bad.conflist").write_text("{")
    with pytest.raises(NotReadyError, match=r"10-bad\.conflist"):
        m.status()
    env.write("20-a.conflist", "a")
    m.status()
    with pytest.raises(NotReadyError, match="'zz'"):
        env.manager(default_networks=["a", "zz"]).status()
    (env.bin / "loopback").unlink()
    with pytest.raises(NotReadyError, match="loopback plugin"):
        m.status()
    env.manager(loopback=False).status()


def test_loopback_plugin_removed_is_seen_by_the_next_setup_with_old_timestamps(env: Env) -> None:
    # Readiness is remembered for the configuration loaded; removing the loopback
    # plugin changes the plugin directory, which reloads it, so the next setup knows.
    env.write("10-a.conflist", "a")
    m = env.manager()
    w = m._state.watcher
    past = time.time() - 60

    def aged() -> None:
        for p in (env.conf, *env.conf.iterdir(), env.bin):
            os.utime(p, (past, past), follow_symlinks=False)
        m.networks()
        assert w._state is not None
        w._state = attrs.evolve(w._state, checked_at=time.time_ns() + 3600 * 10**9)

    aged()
    m.setup("c1", "ns")
    m.teardown("c1", "ns")
    (env.bin / "loopback").unlink()
    aged()
    with pytest.raises(NotReadyError, match="loopback plugin"):
        m.setup("c2", "ns")
    assert env.cached() == []


def test_status_runs_status_of_default_networks_at_1_1_0(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("STATUS", 50, "no IPs left"), version="1.1.0")
    m = env.manager()
    with pytest.raises(NotReadyError, match="no IPs left") as info:
        m.status()
    assert isinstance(info.value.cause, libcni.PluginError)
    assert [c[0] for c in env.calls()] == ["STATUS"]


def test_status_limited_connectivity_is_ready_and_logged(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.write("10-a.conflist", "a", fail("STATUS", 51, "limited"), version="1.1.0")
    env.manager().status()
    assert "limited connectivity" in caplog.text


def test_gc_across_configured_and_cache_only_networks(env: Env) -> None:
    env.write("10-a.conflist", "a", version="1.1.0")
    b = env.write("20-b.conflist", "b", version="1.1.0")
    m = env.manager()
    m.setup("live", "ns")
    m.setup("dead", "ns")
    b.unlink()  # b is now known only from the cache
    env.record.unlink()
    m.gc(["live"])
    assert env.cached() == [
        "a-live-eth0",
        "b-live-eth1",
        "cni-loopback-live-lo",
    ]
    dels = {(c[1], c[2]) for c in env.calls() if c[0] == "DEL"}
    assert dels == {("a", "eth0"), ("b", "eth1"), ("cni-loopback", "lo")}
    gcs = [r for r in env.runs() if r["command"] == "GC"]
    by_net = {r["stdin"]["name"]: r["stdin"]["cni.dev/valid-attachments"] for r in gcs}
    assert by_net == {
        "a": [{"containerID": "live", "ifname": "eth0"}],
        "b": [{"containerID": "live", "ifname": "eth1"}],
    }


def test_gc_collects_every_network_and_raises_all_failures(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("GC", 7, "gc a failed"), version="1.1.0")
    env.write("20-b.conflist", "b", fail("GC", 7, "gc b failed"), version="1.1.0")
    m = env.manager()
    m.setup("dead", "ns")
    with pytest.raises(GCError) as info:
        m.gc([])
    assert sorted(e.msg for e in info.value.errors) == ["gc a failed", "gc b failed"]
    assert env.cached() == []


# -- errors ----------------------------------------------------------------------------


def test_new_errors_pickle_and_keep_their_fields() -> None:
    import pickle

    cause = libcni.PluginError("x", code=11)
    e = SetupError("c1", cause, (), [libcni.PluginError("y")])
    back = pickle.loads(pickle.dumps(e))
    assert back.cause.msg == "x" and back.rollback_errors[0].msg == "y" and back.code == 11
    assert NotReadyError("m").code == 50


def test_same_size_rewrite_within_the_timestamp_granularity_is_seen(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite that leaves size, inode, mtime and ctime as they were is still seen.

    Fault injection, because no real file system here can produce it on
    demand: this kernel gives a fine-grained timestamp to any write after a
    stat (multigrain timestamps), so two real writes never look alike. Other
    kernels and file systems (coarse ticks, 1 s or 2 s granularity) do it
    all the time. We freeze what stat says about the file, and make a tick a minute long:
    the rewrite comes within two ticks of the last check however slow the machine.
    """
    from libcni.manager import _config

    monkeypatch.setattr(_config, "RECENT_FINE", 60 * 10**9)
    monkeypatch.setattr(_config, "RECENT", 60 * 10**9)
    m = env.manager()
    a = env.write("10-a.conflist", "a")
    assert list(m.networks().networks) == ["a"]
    assert list(m.networks().networks) == ["a"]  # now watching a's drop-in directory too
    frozen = _config._stat(str(a))
    real = _config._stat
    monkeypatch.setattr(_config, "_stat", lambda p: frozen if p == str(a) else real(p))
    a.write_text(a.read_text().replace('"a"', '"b"'))
    assert list(m.networks().networks) == ["b"]


def test_teardown_runs_the_drop_in_plugins_add_ran(env: Env) -> None:
    """A network whose plugin comes from its drop-in directory: DEL runs that plugin,
    also once the list file is gone (never a DEL that runs nothing)."""
    (env.conf / "10-d.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "d"}))
    (env.conf / "d").mkdir()
    (env.conf / "d" / "10-p.conf").write_text(json.dumps({"type": "testplugin", "k": "drop"}))
    m = env.manager(loopback=False)
    m.setup("c1", "ns")
    m.setup("c2", "ns")
    env.record.unlink()
    m.teardown("c1")
    assert [(r["command"], r["stdin"].get("k")) for r in env.runs()] == [("DEL", "drop")]
    (env.conf / "10-d.conflist").unlink()
    env.record.unlink()
    try:
        m.teardown("c2")
    except TeardownError as e:  # the cache holds no plugin and no file names d any more
        assert "no plugins" in str(e) or "no configuration" in str(e)
        assert env.cached() == ["d-c2-eth0"]
        assert env.runs() == []
    else:  # the configuration cached at ADD holds the drop-in plugin (behaviour.md §7)
        assert [(r["command"], r["stdin"].get("k")) for r in env.runs()] == [("DEL", "drop")]
        assert env.cached() == []


def test_setup_sends_no_status(env: Env) -> None:
    env.write("10-a.conflist", "a", fail("STATUS", 50, "not ready"), version="1.1.0")
    env.manager().setup("c1", "ns")
    assert [c[0] for c in env.calls()] == ["ADD", "ADD"]


def test_libcni_exports_every_public_name_of_the_manager_lazily() -> None:
    """``libcni`` lists the manager's names by hand (to import it lazily): they must match."""
    import subprocess
    import sys

    import libcni
    import libcni.manager

    # Args and CapabilityArgs are libcni.values' (light, imported by libcni itself).
    eager = {"Args", "CapabilityArgs"}
    public = set(libcni.manager.__all__) - {"LOOPBACK_NETWORK"} - eager
    assert public == {n for n, module in libcni._LAZY.items() if module == ".manager"}
    assert all(getattr(libcni, name) is getattr(libcni.manager, name) for name in eager)
    assert public <= set(libcni.__all__)
    for name in public:
        assert getattr(libcni, name) is getattr(libcni.manager, name)
    # ... and `import libcni` alone does not load it.
    code = "import sys, libcni; print('libcni.manager' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
