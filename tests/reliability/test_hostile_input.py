"""Hostile input: every parser of outside input raises only libcni's documented errors.

Outside input is: configuration bytes and files, plugin results, cache files
(written by other runtimes, damaged, or planted), and the command line's
environment (``CAP_ARGS``, ``CNI_ARGS``, ``CNI_IFNAME``). Whatever they hold,
what comes out is a value or a :class:`libcni.CNIError` (``CLIError`` for the
command line's own parsers) — never ``RecursionError``, ``KeyError``,
``TypeError``, ``ValueError``, ``UnicodeDecodeError``... (HACKING.md).

The cache-file properties run the real operations with an in-process ``Exec``
(:class:`libcni.testing.MockExec`), so that hundreds of examples take seconds; whatever the
file holds, DEL succeeds and removes it (unless it names another attachment
sharing its file name, which DEL leaves alone).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import libcni
from libcni import (
    CNIConfig,
    CNIError,
    GCArgs,
    GCAttachment,
    RuntimeConf,
    conf_from_bytes,
    conf_list_from_bytes,
    create_result,
    load_conf_list,
    result_from_bytes,
)
from libcni.testing import MockExec, PluginCall
from libcni.version import ALL as VERSIONS

from .conftest import Env

pytestmark = pytest.mark.env(cls=Env)

try:
    from libcni import cli
except ImportError:  # pragma: no cover - the command line is another engineer's work
    cli = None  # type: ignore[assignment]

needs_cli = pytest.mark.skipif(cli is None, reason="libcni.cli is not there yet")

# LIBCNI_FUZZ_SCALE=20 runs twenty times as many examples (a longer hunt for bugs).
SCALE = float(os.environ.get("LIBCNI_FUZZ_SCALE", "1") or 1)
FAST = settings(
    max_examples=max(1, int(250 * SCALE)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SLOW = settings(
    max_examples=max(1, int(120 * SCALE)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

DEEP = 100_000
BIG = 50 * 1024 * 1024

# -- strategies ------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=15,
)
versions = st.sampled_from(
    [
        *VERSIONS,
        "",
        "1",
        "1.0",
        "0.4",
        "9.9.9",
        "1.0.0.0",
        "x",
        "1..0",
        "-1.0.0",
        " 1.0.0",
        "01.0.0",
        "1.0.0\0",
    ]
)
plausible_strings = st.sampled_from(
    [
        "10.1.2.3/24",
        "10.1.2.3",
        "fd00::2/64",
        "fd00::1",
        "0.0.0.0/0",
        "::/0",
        "10.0.0.256/8",
        "10.1.2.3/33",
        "eth0",
        "0a:58:0a:01:02:03",
        "/var/run/netns/x",
        "4",
        "6",
        "",
        "link",
        "host",
        "universe",
        "\0",
        "\ud800",
        "../..",
    ]
)
field_values = (
    json_values | plausible_strings | versions | st.integers(min_value=-(2**64), max_value=2**64)
)
leaf_keys = st.sampled_from(
    [
        "name",
        "mac",
        "mtu",
        "sandbox",
        "socketPath",
        "pciID",
        "address",
        "gateway",
        "interface",
        "version",
        "dst",
        "gw",
        "advmss",
        "priority",
        "table",
        "scope",
        "ip",
        "routes",
        "nameservers",
        "domain",
        "search",
        "options",
        "type",
    ]
)
leaf_objects = st.dictionaries(leaf_keys | st.text(max_size=4), field_values, max_size=6)
result_objects = st.fixed_dictionaries(
    {},
    optional={
        "cniVersion": versions | json_values,
        "interfaces": st.lists(leaf_objects, max_size=3) | json_values,
        "ips": st.lists(leaf_objects, max_size=3) | json_values,
        "routes": st.lists(leaf_objects, max_size=3) | json_values,
        "dns": leaf_objects | json_values,
        "ip4": leaf_objects | json_values,
        "ip6": leaf_objects | json_values,
        "extra": json_values,
    },
)
plugin_objects = st.fixed_dictionaries(
    {"type": st.just("p1") | json_values},
    optional={
        "name": st.text(max_size=8) | json_values,
        "cniVersion": versions | json_values,
        "capabilities": st.dictionaries(st.text(max_size=6), json_values, max_size=3) | json_values,
        "ipam": leaf_objects | json_values,
        "dns": leaf_objects | json_values,
        "prevResult": result_objects | json_values,
        "runtimeConfig": json_values,
        "args": json_values,
    },
)
list_objects = st.fixed_dictionaries(
    {"name": st.just("testnet") | json_values},
    optional={
        "cniVersion": versions | json_values,
        "cniVersions": st.lists(versions, max_size=4) | json_values,
        "plugins": st.lists(plugin_objects, max_size=3) | json_values,
        "disableCheck": st.sampled_from([True, False, "true", "FALSE", "yes", 1, None]),
        "disableGC": st.sampled_from([True, False, "true", "False", "no", 0, None]),
        "loadOnlyInlinedPlugins": st.sampled_from([True, False, "TRUE", "x", None]),
    },
)
cache_objects = st.fixed_dictionaries(
    {"kind": st.just("cniCacheV1") | json_values},
    optional={
        "containerId": st.just("ctr1") | json_values,
        "networkName": st.just("testnet") | json_values,
        "ifName": st.just("eth0") | json_values,
        "config": st.sampled_from(["", "e30=", "!!!", "eyJ0eXBlIjoicDEifQ==", "e30"]) | json_values,
        "netns": st.text(max_size=8) | json_values,
        "cniArgs": st.lists(st.lists(st.text(max_size=4) | json_values, max_size=3), max_size=3)
        | json_values,
        "capabilityArgs": st.dictionaries(st.text(max_size=6), json_values, max_size=3)
        | json_values,
        "result": result_objects | json_values,
    },
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


def _json_bytes(objects: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Encoded objects, sometimes cut short or with a byte changed, or plain random bytes."""
    encoded = objects.map(_dumps)
    return st.one_of(
        encoded,
        st.tuples(encoded, st.integers(min_value=0, max_value=200)).map(lambda t: t[0][: t[1]]),
        st.tuples(encoded, st.integers(min_value=0), st.binary(min_size=1, max_size=3)).map(
            lambda t: t[0][: t[1] % (len(t[0]) + 1)] + t[2] + t[0][t[1] % (len(t[0]) + 1) + 1 :]
        ),
        st.binary(max_size=200),
    )


# -- an in-process Exec ----------------------------------------------------------------------


_ADD_RESULT = b'{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.3/24"}]}'


def _plugin(call: PluginCall) -> bytes | None:
    """ADD answers a fixed result; every other command succeeds (VERSION: every version)."""
    return _ADD_RESULT if call.command == "ADD" else None


class Sandbox(harness.Env):
    """The tests' environment (``tests/harness.py``) with ``p1``, its CNIConfig running a MockExec."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, ("p1",), exec=MockExec(_plugin))


@contextlib.contextmanager
def sandbox() -> Iterator[Sandbox]:
    root = Path(tempfile.mkdtemp(prefix="libcni-fuzz-"))
    try:
        yield Sandbox(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _net(version: str = "1.0.0", name: str = "testnet", ptype: str = "p1") -> Any:
    return conf_list_from_bytes(
        _dumps({"cniVersion": version, "name": name, "plugins": [{"type": ptype}]})
    )


def only_cni_errors(fn: Callable[[], Any]) -> Any:
    """Call ``fn``; a ``CNIError`` is fine (returned), anything else fails the test."""
    try:
        return fn()
    except CNIError as e:
        return e


# -- configuration -------------------------------------------------------------------------


@FAST
@given(data=_json_bytes(plugin_objects))
@example(data=b"[" * DEEP)
@example(data=b'{"type":"p1","x":' * DEEP)
@example(data=b"\xff\xfe")
def test_fuzz_conf_from_bytes(data: bytes) -> None:
    conf = only_cni_errors(lambda: conf_from_bytes(data))
    if not isinstance(conf, CNIError):
        only_cni_errors(lambda: libcni.conf_list_from_conf(conf))
        only_cni_errors(lambda: libcni.inject_conf(conf, {"x": [1], "cniVersion": "1.0.0"}))


@FAST
@given(data=_json_bytes(list_objects))
@example(data=b"[" * DEEP)
@example(data=b'{"name":"n","plugins":' * DEEP)
def test_fuzz_conf_list_from_bytes(data: bytes) -> None:
    only_cni_errors(lambda: conf_list_from_bytes(data))


@SLOW
@given(
    files=st.lists(
        st.tuples(
            st.sampled_from(["a.conflist", "b.conf", "c.json", "d.conflist", "testnet/x.conf"]),
            _json_bytes(list_objects | plugin_objects),
        ),
        max_size=4,
    ),
    name=st.sampled_from(["testnet", "", "..", "../x", "a/b", "x\0y", "\ud800", "n" * 300])
    | st.text(max_size=8),
)
def test_fuzz_load_conf_list_from_files(files: list[tuple[str, bytes]], name: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        for fname, data in files:
            path = Path(d, fname)
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)
        only_cni_errors(lambda: load_conf_list(d, name))
        for fname, _ in files:
            only_cni_errors(lambda f=fname: libcni.conf_list_from_file(Path(d, f)))  # type: ignore[misc]
            only_cni_errors(lambda f=fname: libcni.conf_from_file(Path(d, f)))  # type: ignore[misc]


def test_deep_and_huge_configuration_is_refused_or_handled(tmp_path: Path) -> None:
    for deep in (b"[" * DEEP, b'{"a":' * DEEP, b"[" * DEEP + b"]" * DEEP):
        with pytest.raises(libcni.ConfigError):
            conf_list_from_bytes(deep)
        with pytest.raises(libcni.ConfigError):
            conf_from_bytes(deep)
        (tmp_path / "deep.conflist").write_bytes(deep)
        with pytest.raises(libcni.NotFoundError) as info:
            load_conf_list(tmp_path, "testnet")
        assert "deep.conflist" in str(info.value)
    # 50 MB: parsed (or refused with ConfigError), and a valid network beside it still loads.
    big = b'{"cniVersion":"1.0.0","name":"big","plugins":[{"type":"p1","x":"' + b"x" * BIG + b'"}]}'
    (tmp_path / "big.conflist").write_bytes(big)
    (tmp_path / "ok.conflist").write_bytes(
        _dumps({"cniVersion": "1.0.0", "name": "testnet", "plugins": [{"type": "p1"}]})
    )
    assert load_conf_list(tmp_path, "testnet").name == "testnet"
    got = only_cni_errors(lambda: load_conf_list(tmp_path, "big"))
    assert isinstance(got, (libcni.NetworkConfigList, libcni.ConfigError))
    del big


# -- results ---------------------------------------------------------------------------------


def _use_result(result: libcni.Result) -> None:
    only_cni_errors(result.to_json)
    for v in VERSIONS:
        converted = only_cni_errors(lambda v=v: result.as_version(v))  # type: ignore[misc]
        if not isinstance(converted, CNIError):
            json.loads(converted.to_json())


@FAST
@given(data=_json_bytes(result_objects), default=versions)
@example(data=b"[" * DEEP, default="1.0.0")
@example(data=b'{"cniVersion":"1.0.0","x":' * DEEP, default="")
@example(data=b"null", default="0.4.0")
def test_fuzz_result_from_bytes(data: bytes, default: str) -> None:
    result = only_cni_errors(lambda: result_from_bytes(data, default_version=default))
    if not isinstance(result, CNIError):
        _use_result(result)


@FAST
@given(obj=result_objects, version=versions)
def test_fuzz_create_result(obj: dict[str, Any], version: str) -> None:
    for data in (obj, _dumps(obj), _dumps(obj).decode("utf-8", "surrogatepass")):
        result = only_cni_errors(lambda d=data: create_result(version, d))  # type: ignore[misc]
        if not isinstance(result, CNIError):
            _use_result(result)


def test_deep_and_huge_results_are_refused_or_handled() -> None:
    for deep in (b"[" * DEEP, b'{"a":' * DEEP, "[" * DEEP):
        with pytest.raises(libcni.DecodeError):
            result_from_bytes(deep)
        with pytest.raises(libcni.DecodeError):
            create_result("1.0.0", deep)
    big = b'{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.3/24"}],"x":"' + b"x" * BIG + b'"}'
    result = result_from_bytes(big)
    assert result.as_version("0.4.0").to_dict()["ips"]


# -- plugin replies: VERSION and error objects --------------------------------------------------

version_replies = st.fixed_dictionaries(
    {},
    optional={
        "cniVersion": versions | json_values,
        "supportedVersions": st.lists(versions | json_values, max_size=4) | json_values,
        "code": json_values,
        "msg": json_values,
    },
)


def _replying(reply: bytes) -> MockExec:
    """Answers VERSION with ``reply``, the rest as :func:`_plugin`."""
    return MockExec(lambda call: reply if call.command == "VERSION" else _plugin(call))


@FAST
@given(reply=_json_bytes(version_replies), version=versions)
@example(reply=b"[" * DEEP, version="1.0.0")
def test_fuzz_version_replies(reply: bytes, version: str) -> None:
    with sandbox() as sb:
        cni = CNIConfig([sb.plugins], cache_dir=sb.cache, exec=_replying(reply))
        info = only_cni_errors(lambda: cni.get_version_info("p1"))
        if not isinstance(info, CNIError):
            for v in VERSIONS:
                only_cni_errors(lambda v=v: info.supports(v))  # type: ignore[misc]
        net = only_cni_errors(lambda: _net(version))
        if not isinstance(net, CNIError):
            only_cni_errors(lambda: cni.validate_network_list(net))


@FAST
@given(stdout=_json_bytes(version_replies))
@example(stdout=b"[" * DEEP)
@example(stdout=b'{"code":' * DEEP)
def test_fuzz_plugin_error_objects(stdout: bytes) -> None:
    from libcni.invoke._errobj import decode_error_object

    decoded = decode_error_object(stdout)
    if not isinstance(decoded, str):
        code, msg, details = decoded
        assert type(code) is int and isinstance(msg, str) and isinstance(details, str)


# -- cache files -----------------------------------------------------------------------------


def _names_another_attachment(data: bytes) -> bool:
    """Whether cache file ``data`` names another attachment than testnet/ctr1/eth0 inside.

    Two attachments can share a file name (behaviour.md §7): such an entry is
    treated as absent by testnet/ctr1/eth0's operations, and never removed by them.
    """
    from libcni.cache._entry import loads

    try:
        obj = loads(data, "<fuzz>")
    except CNIError:
        return False
    if not isinstance(obj, dict) or obj.get("kind") != "cniCacheV1":
        return False
    asked = {"networkName": "testnet", "containerId": "ctr1", "ifName": "eth0"}
    return any(isinstance(obj.get(k), str) and obj[k] not in ("", v) for k, v in asked.items())


def _every_cache_operation(sb: Sandbox, version: str, another: bool = False) -> None:
    """Every getter, CHECK, GC, the listings and DEL on the planted entry of testnet/ctr1/eth0.

    ``another``: the entry names another attachment (same file name), which
    DEL must leave alone.
    """
    net = _net(version)
    rt = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0")
    only_cni_errors(lambda: sb.cni.get_network_list_cached_result(net, rt))
    only_cni_errors(lambda: sb.cni.get_network_list_cached_config(net, rt))
    single = net.plugins[0]
    only_cni_errors(lambda: sb.cni.get_network_cached_result(single, rt))
    only_cni_errors(lambda: sb.cni.get_network_cached_config(single, rt))
    for cid in ("", "ctr1", "ctr"):
        listed = only_cni_errors(lambda c=cid: sb.cni.get_cached_attachments(c))  # type: ignore[misc]
        assert not isinstance(listed, CNIError), listed
    only_cni_errors(lambda: sb.cni.check_network_list(net, rt))
    only_cni_errors(lambda: sb.cni.gc_network_list(net, GCArgs([GCAttachment("ctr1", "eth0")])))
    # Whatever the entry holds, DEL succeeds and forgets it (unless it is another's).
    sb.cni.del_network_list(net, rt)
    assert sb.entry_path().exists() == another
    assert sb.cni.get_network_list_cached_result(net, rt) is None


@SLOW
@given(
    data=_json_bytes(cache_objects), version=st.sampled_from(["0.2.0", "0.4.0", "1.0.0", "1.1.0"])
)
@example(data=b"", version="1.0.0")
@example(data=b"[" * DEEP, version="1.0.0")
@example(data=b'{"kind":"cniCacheV1","result":' * DEEP, version="1.0.0")
@example(
    data=b'{"kind":"cniCacheV1","result":{"cniVersion":"1.0.0"},"containerId":"x"}', version="0.2.0"
)
def test_fuzz_cache_file_contents(data: bytes, version: str) -> None:
    with sandbox() as sb:
        sb.entry_path().parent.mkdir(parents=True)
        sb.entry_path().write_bytes(data)
        _every_cache_operation(sb, version, _names_another_attachment(data))


@SLOW
@given(result=result_objects, version=st.sampled_from(["0.2.0", "0.4.0", "1.0.0", "1.1.0"]))
def test_fuzz_legacy_bare_result_cache_files(result: dict[str, Any], version: str) -> None:
    with sandbox() as sb:
        sb.entry_path().parent.mkdir(parents=True)
        sb.entry_path().write_bytes(_dumps(result))
        _every_cache_operation(sb, version)


def test_deep_huge_and_special_cache_files(tmp_path: Path) -> None:
    big_result = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}], "x": "x" * BIG}
    big = _dumps(
        {
            "kind": "cniCacheV1",
            "containerId": "ctr1",
            "networkName": "testnet",
            "ifName": "eth0",
            "config": "e30=",
            "result": big_result,
        }
    )
    for content in (b"[" * DEEP, b'{"kind":"cniCacheV1","capabilityArgs":' * DEEP, big):
        with sandbox() as sb:
            sb.entry_path().parent.mkdir(parents=True)
            sb.entry_path().write_bytes(content)
            _every_cache_operation(sb, "1.0.0")
    # A FIFO never blocks a reader; DEL removes it.
    with sandbox() as sb:
        sb.entry_path().parent.mkdir(parents=True)
        os.mkfifo(sb.entry_path())
        _every_cache_operation(sb, "1.0.0")


def test_temporary_files_in_the_cache_are_never_taken_for_entries() -> None:
    with sandbox() as sb:
        net = _net()
        rt = RuntimeConf("ctr1", "", "eth0")
        sb.cni.add_network_list(net, rt)
        good = sb.entry_path().read_bytes()
        results = sb.entry_path().parent
        # What killed writes leave: a complete and a partial copy under temporary names.
        (results / ".tmp-0123456789abcdef").write_bytes(good)
        (results / ".tmp-fedcba9876543210").write_bytes(good[:10])
        (results / ".testnet-ctr2-eth0").write_bytes(good.replace(b"ctr1", b"ctr2"))
        listed = [(a.network, a.container_id, a.ifname) for a in sb.cni.get_cached_attachments()]
        assert listed == [("testnet", "ctr1", "eth0")]
        assert [a.container_id for a in sb.cni.get_cached_attachments("ctr2")] == []
        assert sb.cni.get_network_list_cached_result(net, RuntimeConf("ctr2", "", "eth0")) is None
        sb.cni.gc_network_list(net)
        assert sb.cni.get_cached_attachments() == []


def test_stale_temporary_files_are_removed_and_fresh_ones_kept() -> None:
    with sandbox() as sb:
        sb.cni.add_network_list(_net(), RuntimeConf("ctr1", "", "eth0"))
        results = sb.entry_path().parent
        stale, fresh = results / ".tmp-00000000000000aa", results / ".tmp-00000000000000bb"
        stale.write_bytes(b'{"kind":"cniCa')
        fresh.write_bytes(b'{"kind":"cniCa')  # a write in progress in another process
        old = os.stat(stale).st_mtime - 3600
        os.utime(stale, (old, old))
        other = results / ".not-ours"
        other.write_bytes(b"x")
        os.utime(other, (old, old))
        assert len(sb.cni.get_cached_attachments()) == 1  # a read: temporaries never listed
        assert stale.exists()  # ... and reads do not delete
        sb.cni.gc_network_list(_net(), GCArgs([GCAttachment("ctr1", "eth0")]))
        assert sorted(os.listdir(results)) == sorted(
            [".not-ours", fresh.name, sb.entry_path().name]
        )


# -- the command line ------------------------------------------------------------------------

env_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=30
)
cap_args_text = st.one_of(
    env_text,
    json_values.map(json.dumps),
    st.dictionaries(
        st.sampled_from(["portMappings", "mac", "ips", "bandwidth"]), json_values, max_size=3
    ).map(json.dumps),
    st.sampled_from(
        [
            "NaN",
            '{"a": NaN}',
            '{"a": Infinity}',
            '{"a": 1e999}',
            "[" * DEEP,
            "null",
            '{"a": "\\ud800"}',
        ]
    ),
)
cni_args_text = st.one_of(
    env_text,
    st.lists(st.tuples(env_text, env_text), max_size=3).map(
        lambda pairs: ";".join(f"{k}={v}" for k, v in pairs)
    ),
)


@needs_cli
@FAST
@given(text=cap_args_text)
def test_fuzz_cli_cap_args(text: str) -> None:
    try:
        value = cli.parse_cap_args(text)
    except cli.CLIError:
        return
    assert isinstance(value, dict)


@needs_cli
@FAST
@given(text=cni_args_text)
def test_fuzz_cli_cni_args(text: str) -> None:
    try:
        pairs = cli.parse_cni_args(text)
    except cli.CLIError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in pairs)


_BUILTIN_ERRORS = tuple(
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
)


@needs_cli
@SLOW
@given(
    command=st.sampled_from(["add", "check", "del"]),
    cap_args=cap_args_text,
    cni_args=cni_args_text,
    ifname=st.sampled_from(["eth0", "", "..", "../x", "a/b", "x" * 300, "e th0"]) | env_text,
    network=st.sampled_from(["testnet", "..", "../testnet", "a" * 300]) | env_text,
)
def test_fuzz_cli_environment_gives_one_line_errors(
    command: str, cap_args: str, cni_args: str, ifname: str, network: str
) -> None:
    with sandbox() as sb, pytest.MonkeyPatch.context() as mp:
        netdir = sb.root / "net.d"
        netdir.mkdir()
        (netdir / "testnet.conflist").write_bytes(
            _dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "testnet",
                    "plugins": [
                        {"type": "p1", "capabilities": {"portMappings": True, "mac": True}}
                    ],
                }
            )
        )

        class FakeCNI(CNIConfig):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["exec"] = sb.exec
                super().__init__(*args, **kwargs)

        mp.setattr(cli._cni, "CNIConfig", FakeCNI)
        mp.setenv("NETCONFPATH", str(netdir))
        mp.setenv("CNI_PATH", str(sb.plugins))
        mp.setenv("CNI_CACHE_DIR", str(sb.cache))
        mp.setenv("CAP_ARGS", cap_args)
        mp.setenv("CNI_ARGS", cni_args)
        mp.setenv("CNI_IFNAME", ifname)
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            # "--": a network name may start with "-" (usage errors are not the point here).
            status = cli.main([command, "--", network, "/var/run/netns/fuzz"])
        text = err.getvalue()
        assert status in (0, 1), (status, text)
        assert "Traceback" not in text
        for line in text.splitlines():
            assert line.startswith("libcni: "), text
            assert not line.startswith(tuple(f"libcni: {n}" for n in _BUILTIN_ERRORS)), text
        if status == 0 and command == "add":
            assert sb.entry_path(
                net="testnet",
                cid=cli.container_id_for_netns("/var/run/netns/fuzz"),
                ifname=ifname or "eth0",
            ).exists()
        # Nothing is ever written outside the cache directory's own sub-directories.
        for dirpath, _, filenames in os.walk(sb.cache):
            for f in filenames:
                assert Path(dirpath).parent == sb.cache or Path(dirpath).parent.name in (
                    "locks",
                    "records",
                ), (dirpath, f)


@needs_cli
@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', "NaN"])
def test_cli_cap_args_refuses_what_json_does_not_allow(text: str) -> None:
    # Go's encoding/json (cnitool) refuses these; accepted, they could not be cached.
    with pytest.raises(cli.CLIError):
        cli.parse_cap_args(text)


# -- runtime values, results and names that cannot be encoded -----------------------------------


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), {1, 2}, b"bytes", object()],
    ids=["nan", "infinity", "set", "bytes", "object"],
)
def test_unencodable_capability_args_are_refused_before_any_plugin_runs(
    env: Env, value: Any
) -> None:
    # Like CNI_ARGS (behaviour.md §6.2): a value that cannot reach the plugin or the
    # cache is refused before anything runs, not after every plugin has run.
    net = env.conflist(env.plugin("p1"))
    rt = RuntimeConf("ctr1", "", "eth0", capability_args={"portMappings": value})
    with pytest.raises(libcni.ConfigError):
        env.cni.add_network_list(net, rt)
    assert env.calls() == [], "plugins ran although the ADD could never be cached"


@pytest.mark.parametrize("where", ["interface-name", "unknown-field", "dns-domain"])
def test_result_with_a_lone_surrogate_escape_can_be_deleted(env: Env, where: str) -> None:
    # "\ud800" is valid JSON text but no valid Unicode: Go decodes it as U+FFFD. A
    # result holding one must not make every later DEL (and the next plugin) fail.
    result: dict[str, Any] = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]}
    if where == "interface-name":
        result["interfaces"] = [{"name": "\ud800"}]
    elif where == "unknown-field":
        result["vendor"] = {"note": "a\udfffb"}
    else:
        result["dns"] = {"domain": "\ud800.example"}
    stdout = json.dumps(result)  # ASCII, with the escapes
    net = env.conflist(env.plugin("p1", ADD={"stdout": stdout}), env.plugin("p2"))
    env.cni.add_network_list(net, env.rt)
    cached = env.cni.get_network_list_cached_result(net, env.rt)
    assert cached is not None
    env.cni.check_network_list(net, env.rt)
    env.cni.del_network_list(net, env.rt)
    assert not env.entry_path().exists()
    assert [c["command"] for c in env.calls()] == ["ADD", "ADD", "CHECK", "CHECK", "DEL", "DEL"]
