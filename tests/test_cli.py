"""The ``libcni`` command line (cnitool-compatible), run in-process and as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import harness
import pytest
from harness import run_cli

from libcni.cli import (
    CLIError,
    build_parser,
    container_id_for_netns,
    main,
    netns_path,
    parse_cap_args,
    parse_cni_args,
)

ALL_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
PORTS = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]


def hand_container_id(netns: str) -> str:
    return "cnitool-" + hashlib.sha512(netns.encode()).hexdigest()[:20]


class Env(harness.Env):
    """The tests' environment (``tests/harness.py``), with a network of ``testplugin`` itself.

    Its directories are wired into ``os.environ`` (``cnitool`` reads them there);
    plugins are found in ``tests/plugins`` (``CNI_PATH``), so none is installed.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(root, types=(), conf=True)
        self.network()

    def wire(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NETCONFPATH", str(self.conf))
        monkeypatch.setenv("CNI_PATH", str(harness.TESTS / "plugins"))
        # Never the machine's /var/lib/cni, even for the tests that run as root.
        monkeypatch.setenv("CNI_CACHE_DIR", str(self.cache))
        for var in ("CNI_ARGS", "CAP_ARGS", "CNI_IFNAME", "TESTPLUGIN_RECORD"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.chdir(self.root)

    def network(self, name: str = "tnet", version: str = "1.0.0", **extra: Any) -> str:
        plugin: dict[str, Any] = {
            "type": "testplugin",
            "record": str(self.record),
            "capabilities": {"portMappings": True},
        }
        plugin.update(extra)
        self.write(f"10-{name}.conflist", name, plugin, version=version)
        return name


pytestmark = pytest.mark.env(cls=Env)


def run(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m libcni ARGS`` with the current (monkeypatched) environment."""
    return run_cli(*args, **(extra_env or {}))


def assert_one_line_error(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("libcni: "), stderr
    for needle in needles:
        assert needle in lines[0], stderr


# -- cnitool's derivations -----------------------------------------------------


@pytest.mark.parametrize(
    "netns",
    ["/var/run/netns/test", "/run/netns/a-b_c.1", "/proc/1234/ns/net", "/tmp/ünïcode"],
)
def test_container_id_is_cnitools(netns: str) -> None:
    assert container_id_for_netns(netns) == hand_container_id(netns)
    assert len(container_id_for_netns(netns)) == len("cnitool-") + 20


def test_container_id_of_a_known_path() -> None:
    # sha512("/var/run/netns/test") starts with 7b8a61d5d8e94d07cbe4.
    assert container_id_for_netns("/var/run/netns/test") == "cnitool-7b8a61d5d8e94d07cbe4"


def test_netns_path_is_made_absolute_and_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert netns_path("ns1") == str(tmp_path / "ns1")
    assert netns_path("./a/../ns1/") == str(tmp_path / "ns1")
    assert netns_path("//run//netns/x") == "/run/netns/x"  # as Go's filepath.Clean
    assert container_id_for_netns("ns1") == hand_container_id(str(tmp_path / "ns1"))


def test_parse_cni_args() -> None:
    assert parse_cni_args("") == []
    assert parse_cni_args("A=1") == [("A", "1")]
    assert parse_cni_args("IgnoreUnknown=1;K8S_POD_NAME=web") == [
        ("IgnoreUnknown", "1"),
        ("K8S_POD_NAME", "web"),
    ]


@pytest.mark.parametrize("text", ["A", "A=", "=1", "A=1=2", "A=1;", ";A=1", "A=1;;B=2"])
def test_parse_cni_args_refuses_what_cnitool_refuses(text: str) -> None:
    with pytest.raises(CLIError, match="invalid CNI_ARGS pair"):
        parse_cni_args(text)


def test_parse_cap_args() -> None:
    assert parse_cap_args("") == {}
    assert parse_cap_args("null") == {}
    assert parse_cap_args(json.dumps({"portMappings": PORTS})) == {"portMappings": PORTS}
    for bad in ("{", "[1]", '"x"', "1", "[" * 100000):
        with pytest.raises(CLIError, match="CAP_ARGS"):
            parse_cap_args(bad)


# -- add, check, del -----------------------------------------------------------


def test_add_prints_the_result_and_caches_it(env: Env) -> None:
    proc = run("add", "tnet", "/var/run/netns/ctr1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    result = json.loads(proc.stdout)
    assert result["cniVersion"] == "1.0.0"
    assert result["ips"] == [{"address": "10.1.2.3/24", "interface": 0}]
    assert result["interfaces"] == [{"name": "eth0"}]
    assert proc.stdout.startswith("{\n    ")  # indented, as cnitool prints it

    cid = hand_container_id("/var/run/netns/ctr1")
    entry = json.loads(env.entry_path("tnet", cid).read_text())
    assert entry["kind"] == "cniCacheV1"
    assert entry["containerId"] == cid
    assert entry["networkName"] == "tnet"
    assert entry["ifName"] == "eth0"
    assert entry["netns"] == "/var/run/netns/ctr1"
    assert entry["result"]["ips"][0]["address"] == "10.1.2.3/24"

    [call] = env.calls()
    assert call["command"] == "ADD"
    assert call["env"]["CNI_CONTAINERID"] == cid
    assert call["env"]["CNI_NETNS"] == "/var/run/netns/ctr1"
    assert call["env"]["CNI_IFNAME"] == "eth0"
    assert call["env"]["CNI_PATH"] == os.environ["CNI_PATH"]


def test_add_in_process(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["add", "tnet", "/var/run/netns/ctr1"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out)["ips"][0]["address"] == "10.1.2.3/24"
    assert env.entry_path("tnet", hand_container_id("/var/run/netns/ctr1")).is_file()


def test_check_and_del_print_nothing(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    netns = "/var/run/netns/ctr2"
    cid = hand_container_id(netns)
    assert main(["add", "tnet", netns]) == 0
    capsys.readouterr()

    assert main(["check", "tnet", netns]) == 0
    assert capsys.readouterr() == ("", "")

    proc = run("del", "tnet", netns)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert not env.entry_path("tnet", cid).exists()

    calls = env.calls()
    assert [c["command"] for c in calls] == ["ADD", "CHECK", "DEL"]
    assert {c["env"]["CNI_CONTAINERID"] for c in calls} == {cid}
    # CHECK and DEL get the cached result as prevResult.
    assert calls[1]["stdin"]["prevResult"]["ips"][0]["address"] == "10.1.2.3/24"
    assert calls[2]["stdin"]["prevResult"]["ips"][0]["address"] == "10.1.2.3/24"


def test_cni_args_and_cap_args_reach_the_plugin(env: Env) -> None:
    proc = run(
        "add",
        "tnet",
        "/var/run/netns/ctr3",
        extra_env={
            "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web",
            "CAP_ARGS": json.dumps({"portMappings": PORTS, "bandwidth": {"rate": 1}}),
        },
    )
    assert proc.returncode == 0, proc.stderr
    [call] = env.calls()
    assert call["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
    # Only the capabilities the plugin declares reach it.
    assert call["stdin"]["runtimeConfig"] == {"portMappings": PORTS}
    entry = json.loads(env.entry_path("tnet", hand_container_id("/var/run/netns/ctr3")).read_text())
    assert entry["cniArgs"] == [["IgnoreUnknown", "1"], ["K8S_POD_NAME", "web"]]
    assert entry["capabilityArgs"]["portMappings"] == PORTS


def test_del_and_check_without_cni_args_or_cap_args_use_those_cached_at_add(env: Env) -> None:
    # cnitool's documented add/del: del without CAP_ARGS would leave portmap's rules.
    netns = "/var/run/netns/ctr4"
    cached = {
        "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web",
        "CAP_ARGS": json.dumps({"portMappings": PORTS}),
    }
    assert run("add", "tnet", netns, extra_env=cached).returncode == 0
    for command in ("check", "del"):
        proc = run(command, "tnet", netns)
        assert (proc.returncode, proc.stderr) == (0, ""), command
    _, check, delete = env.calls()
    for call in (check, delete):
        assert call["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=web"
        assert call["stdin"]["runtimeConfig"] == {"portMappings": PORTS}
    # Given, they win: CAP_ARGS alone means "these, and no CNI_ARGS".
    assert run("add", "tnet", netns, extra_env=cached).returncode == 0
    mine = [{"hostPort": 9090, "containerPort": 90, "protocol": "udp"}]
    proc = run("del", "tnet", netns, extra_env={"CAP_ARGS": json.dumps({"portMappings": mine})})
    assert proc.returncode == 0, proc.stderr
    last = env.calls()[-1]
    assert last["command"] == "DEL" and last["stdin"]["runtimeConfig"] == {"portMappings": mine}
    assert "CNI_ARGS" not in last["env"] or last["env"]["CNI_ARGS"] == ""
    # Nothing cached: nothing to take (a second DEL succeeds, without them).
    proc = run("del", "tnet", netns)
    assert proc.returncode == 0, proc.stderr
    assert "runtimeConfig" not in env.calls()[-1]["stdin"]


def test_ifname_from_env_and_option(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = hand_container_id("/var/run/netns/ctr4")
    monkeypatch.setenv("CNI_IFNAME", "net1")
    assert main(["add", "tnet", "/var/run/netns/ctr4"]) == 0
    assert env.entry_path("tnet", cid, "net1").is_file()
    # --ifname (or -i) wins over CNI_IFNAME; an unset CNI_IFNAME means eth0.
    assert main(["add", "tnet", "/var/run/netns/ctr4", "--ifname", "net2"]) == 0
    assert main(["add", "-i", "net3", "tnet", "/var/run/netns/ctr4"]) == 0
    monkeypatch.delenv("CNI_IFNAME")
    assert main(["add", "tnet", "/var/run/netns/ctr4"]) == 0
    assert [c["env"]["CNI_IFNAME"] for c in env.calls()] == ["net1", "net2", "net3", "eth0"]
    for ifname in ("net1", "net2", "net3", "eth0"):
        assert env.entry_path("tnet", cid, ifname).is_file()


def test_relative_netns_is_made_absolute(env: Env) -> None:
    proc = run("add", "tnet", "ns-here")
    assert proc.returncode == 0, proc.stderr
    [call] = env.calls()
    absolute = str(env.root / "ns-here")
    assert call["env"]["CNI_NETNS"] == absolute
    assert call["env"]["CNI_CONTAINERID"] == hand_container_id(absolute)


def test_cache_dir_option_wins_over_the_environment(env: Env, tmp_path: Path) -> None:
    other = tmp_path / "other-cache"
    for argv in (
        ["--cache-dir", str(other), "add", "tnet", "/var/run/netns/a"],
        ["add", "--cache-dir", str(other), "tnet", "/var/run/netns/b"],
    ):
        assert main(argv) == 0
    names = sorted(p.name for p in (other / "results").iterdir())
    assert names == sorted(
        f"tnet-{hand_container_id(n)}-eth0" for n in ("/var/run/netns/a", "/var/run/netns/b")
    )
    assert not env.cache.exists()


# -- errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra_env", "needle"),
    [
        ({"CNI_ARGS": "A=1;B"}, "invalid CNI_ARGS pair 'B'"),
        ({"CNI_ARGS": "novalue="}, "invalid CNI_ARGS pair"),
        ({"CAP_ARGS": "{not json"}, "CAP_ARGS is not valid JSON"),
        ({"CAP_ARGS": "[1, 2]"}, "CAP_ARGS must be a JSON object"),
    ],
)
def test_malformed_environment_is_one_clear_line(
    env: Env, extra_env: dict[str, str], needle: str
) -> None:
    proc = run("add", "tnet", "/var/run/netns/x", extra_env=extra_env)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert_one_line_error(proc.stderr, needle)
    assert env.calls() == []  # nothing ran


def test_plugin_error_is_described(env: Env) -> None:
    env.network(
        "failing",
        test={"ADD": {"error": {"code": 11, "msg": "boom", "details": "in\nthree\nlines"}}},
    )
    proc = run("add", "failing", "/var/run/netns/x")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert_one_line_error(proc.stderr, "boom", 'plugin type="testplugin" failed (add)', "failing")
    assert "in three lines" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["add", "nonet", "/var/run/netns/x"], 'no net configuration with name "nonet"'),
        (["version", "noplugin"], 'failed to find plugin "noplugin"'),
        (["add", "tnet", "/var/run/netns/x", "--ifname", "a b"], "interface name"),
        (["validate", "nonet"], "nonet"),
    ],
)
def test_errors_in_process(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_error(err, needle)


def test_missing_netconf_dir(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCONFPATH", str(env.root / "nowhere"))
    proc = run("add", "tnet", "/var/run/netns/x")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, "nowhere")


def test_timeout(env: Env) -> None:
    env.network("slow", test={"ADD": {"sleep": 30}})
    proc = run("--timeout", "0.5", "add", "slow", "/var/run/netns/x")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, "testplugin")
    assert "time" in proc.stderr.lower()


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["add"],
        ["add", "tnet"],
        ["frobnicate"],
        ["cache"],
        ["version"],
        ["--timeout", "0", "status", "tnet"],
        ["--timeout", "soon", "status", "tnet"],
    ],
)
def test_usage_errors_exit_2(env: Env, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    _, err = capsys.readouterr()
    assert "usage: libcni" in err
    assert "Traceback" not in err


# -- --help ------------------------------------------------------------------


HELP_COMMANDS = [
    [],
    ["add"],
    ["check"],
    ["del"],
    ["gc"],
    ["status"],
    ["validate"],
    ["version"],
    ["cache"],
    ["cache", "list"],
    ["demo"],
]


@pytest.mark.parametrize("words", HELP_COMMANDS, ids=lambda w: " ".join(w) or "libcni")
def test_help(words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*words, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: libcni" + "".join(" " + w for w in words))
    assert err == ""


def test_help_as_subprocess() -> None:
    proc = run("add", "--help")
    assert proc.returncode == 0
    for word in ("NETWORK", "NETNS", "--ifname", "--cache-dir", "CNI_ARGS", "CAP_ARGS"):
        assert word in proc.stdout
    top = run("--help")
    for command in ("add", "check", "del", "gc", "status", "validate", "version", "cache", "demo"):
        assert command in top.stdout


def test_parser_has_every_command() -> None:
    parser = build_parser()
    args = parser.parse_args(["gc", "net"])
    assert (args.command, args.network, args.netns) == ("gc", "net", None)
    args = parser.parse_args(["status", "net", "/var/run/netns/x"])
    assert (args.command, args.network, args.netns) == ("status", "net", "/var/run/netns/x")
    args = parser.parse_args(["cache", "list"])
    assert args.container_id == ""


# -- validate, version, cache list, gc, status ----------------------------------


def test_validate_prints_the_capabilities(env: Env) -> None:
    proc = run("validate", "tnet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["portMappings"]


def test_validate_fails_on_an_unsupported_version(env: Env) -> None:
    reply = json.dumps({"cniVersion": "0.4.0", "supportedVersions": ["0.3.1", "0.4.0"]})
    proc = run("validate", "tnet", extra_env={"TESTPLUGIN_VERSION_REPLY": reply})
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr)
    assert "1.0.0" in proc.stderr


def test_version_prints_the_supported_versions(env: Env) -> None:
    proc = run("version", "testplugin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ALL_VERSIONS
    reply = json.dumps({"cniVersion": "0.4.0", "supportedVersions": ["0.3.1", "0.4.0"]})
    proc = run("version", "testplugin", extra_env={"TESTPLUGIN_VERSION_REPLY": reply})
    assert proc.stdout.splitlines() == ["0.3.1", "0.4.0"]


def test_cache_list(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "list"]) == 0
    assert capsys.readouterr() == (f"# cache directory: {env.cache}\n", "")

    env.network("other")
    for network, netns in (("tnet", "/var/run/netns/a"), ("other", "/var/run/netns/b")):
        assert main(["add", network, netns]) == 0
    capsys.readouterr()

    assert main(["cache", "list"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[0] == f"# cache directory: {env.cache}"
    rows = sorted(line.split("\t") for line in out.splitlines()[1:])
    assert rows == sorted(
        [
            [hand_container_id("/var/run/netns/a"), "tnet", "eth0", "/var/run/netns/a"],
            [hand_container_id("/var/run/netns/b"), "other", "eth0", "/var/run/netns/b"],
        ]
    )

    cid = hand_container_id("/var/run/netns/b")
    proc = run("cache", "list", cid)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == [f"{cid}\tother\teth0\t/var/run/netns/b"]

    proc = run("cache", "list", "--cache-dir", str(env.root / "empty"))
    assert (proc.returncode, proc.stdout) == (0, f"# cache directory: {env.root / 'empty'}\n")


def test_cache_list_reads_what_go_libcni_wrote(env: Env, tmp_path: Path) -> None:
    data = Path(__file__).parent / "data" / "cache"
    entries = [p for p in data.iterdir() if "-" in p.name and not p.suffix]
    results = tmp_path / "copied" / "results"
    results.mkdir(parents=True)
    for p in entries:
        (results / p.name).write_bytes(p.read_bytes())
    proc = run("cache", "list", "--cache-dir", str(tmp_path / "copied"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # The Go-written entry is listed; the legacy bare result (no names) is not.
    assert proc.stdout.splitlines()[1:] == [
        "4f3c2a1b9d8e7f60\tpodman\teth0\t/var/run/netns/cni-8a1e2f3d"
    ]


def test_gc_deletes_every_cached_attachment(env: Env) -> None:
    env.network("gcnet", version="1.1.0")
    for netns in ("/var/run/netns/a", "/var/run/netns/b"):
        assert run("add", "gcnet", netns).returncode == 0
    proc = run("gc", "gcnet")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert not any((env.cache / "results").iterdir())
    commands = [c["command"] for c in env.calls()]
    assert commands == ["ADD", "ADD", "DEL", "DEL", "GC"]
    # The NETNS argument is accepted, as cnitool requires it, and ignored.
    assert run("gc", "gcnet", "/var/run/netns/a").returncode == 0


def test_status(env: Env) -> None:
    env.network("st", version="1.1.0")
    proc = run("status", "st")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert run("status", "st", "/var/run/netns/ignored").returncode == 0
    assert [c["command"] for c in env.calls()] == ["STATUS", "STATUS"]

    env.network("down", version="1.1.0", test={"STATUS": {"error": {"code": 50, "msg": "no"}}})
    proc = run("status", "down")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, 'plugin type="testplugin" failed (status): no')


def test_verbose_logs_to_stderr(env: Env) -> None:
    env.network("chatty", test={"ADD": {"stderr": "hello from the plugin\n", "passthrough": True}})
    proc = run("add", "chatty", "/var/run/netns/x")
    assert (proc.returncode, proc.stderr) == (0, "")
    proc = run("-v", "add", "chatty", "/var/run/netns/y")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ips"]
    assert "hello from the plugin" in proc.stderr


def test_failing_plugin_stderr_stays_out_of_the_error_line(env: Env) -> None:
    env.network(
        "noisy",
        test={"ADD": {"stderr": "noise 1\nnoise 2\n", "error": {"code": 7, "msg": "bad"}}},
    )
    proc = run("add", "noisy", "/var/run/netns/x")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, "bad", "testplugin")
    proc = run("add", "noisy", "/var/run/netns/x", "--verbose")
    assert proc.returncode == 1
    assert "noise 1" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(
        'libcni: plugin type="testplugin" failed (add): bad'
    )
    assert "Traceback" not in proc.stderr


def test_python_dash_m_and_console_script_agree() -> None:
    import libcni.__main__  # noqa: F401  (importable without running)

    proc = run("--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: libcni")
