"""The demo, ``examples/demo.py`` (run by ``scripts/demo.sh``): the real run (root, iproute2,
reference plugins) and its prerequisites; ``libcni demo`` only points to it."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import harness
import pytest
from _require import unavailable

from libcni import conf_list_from_bytes

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "demo.py"


def _load(path: Path) -> ModuleType:
    """The demo script as a module (it is no part of the package)."""
    spec = importlib.util.spec_from_file_location("libcni_demo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo = _load(DEMO)
DEMO_PLUGINS, DEMO_SUBNET = demo.DEMO_PLUGINS, demo.DEMO_SUBNET
INSTALL_COMMAND, NETNS_PREFIX = demo.INSTALL_COMMAND, demo.NETNS_PREFIX
REF_PLUGINS = "/usr/lib/cni"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])


def _what_is_missing() -> str | None:
    if os.geteuid() != 0:
        return "the demo needs root (network namespaces)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool, path=SBIN_PATH) is None:
            return f"the demo needs the {tool} command"
    for plugin in DEMO_PLUGINS:
        if not os.access(os.path.join(REF_PLUGINS, plugin), os.X_OK):
            return f"the demo needs the reference plugin {REF_PLUGINS}/{plugin}"
    return None


@pytest.fixture
def netns_ok() -> None:
    """Skip (or, with LIBCNI_REQUIRE_NETNS=1, fail) without root, ip and the plugins."""
    reason = _what_is_missing()
    if reason is not None:
        unavailable(reason)


def demo_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CNI_PATH", None)  # the demo's default: /usr/lib/cni and /opt/cni/bin
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    env.update(extra)
    return env


def namespaces_named_in(output: str) -> set[str]:
    """The namespaces a demo run says it created (its header names both)."""
    return set(re.findall(rf"{NETNS_PREFIX}(?:host|ctr)-[0-9a-f]+", output))


def demo_namespaces() -> set[str]:
    ip = shutil.which("ip", path=SBIN_PATH)
    assert ip is not None
    out = subprocess.run([ip, "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith(NETNS_PREFIX)}


def scratch_dir(output: str) -> str:
    match = re.search(r"scratch files in (\S+)", output)
    assert match, output
    return match.group(1)


# -- the real thing --------------------------------------------------------------


@pytest.mark.netns
@pytest.mark.refplugins
def test_demo_runs_and_cleans_up(netns_ok: None) -> None:
    tuning_state = "/run/cni/tuning"  # tuning's default dataDir, on the machine itself
    tuning_before = set(os.listdir(tuning_state)) if os.path.isdir(tuning_state) else set()
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(DEMO)],
        capture_output=True,
        text=True,
        env=demo_env(),
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert "Traceback" not in out

    # An address of the subnet was given to the container...
    subnet = ipaddress.ip_network(DEMO_SUBNET)
    addresses = re.findall(r"address\s+(\d+\.\d+\.\d+\.\d+)/(\d+)", out)
    assert addresses, out
    assert all(ipaddress.ip_address(a) in subnet for a, _ in addresses), out
    assert re.search(r"gateway\s+10\.88\.77\.1\b", out), out
    assert re.search(r"MAC\s+([0-9a-f]{2}:){5}[0-9a-f]{2}", out), out
    assert "8080/tcp -> container port 80/tcp" in out
    assert re.search(r"route\s+default via 10\.88\.77\.1", out), out
    # ... the kernel agrees, CHECK passed, the cache entry was shown, DEL undid it all.
    assert re.search(r"kernel sees\s+eth0\S* UP 10\.88\.77\.", out), out
    assert re.search(r"^CHECK\s+passed", out, re.M), out
    assert re.search(r"^CACHE\s+/\S+/results/libcni-demo-\S+-eth0$", out, re.M), out
    assert "cniCacheV1" in out
    assert re.search(r"^DEL\s+ok .*cache entry removed", out, re.M), out
    assert "eth0 gone from the container" in out
    assert "address released" in out
    # The NetworkManager part: a sandbox (its own namespace, lo brought up without a plugin)
    # on two networks, the kernel agrees, rollback leaves nothing, the namespaces are removed.
    assert re.search(r"^SETUP\s+ok .*lo \(internal\), eth0 \(libcni-demo\), eth1 "
                     r"\(libcni-demo-ptp\)", out, re.M), out  # fmt: skip
    assert re.search(r"namespace\s+/tmp/libcni-demo-\w+/netns/cni-[0-9a-f-]{36}$", out, re.M), out
    assert re.search(r"kernel sees\s+lo UNKNOWN 127\.0\.0\.1/8", out), out
    for ifname, net in (("eth0", r"10\.88\.77\."), ("eth1", r"10\.88\.78\.")):
        [reported] = re.findall(rf"^\s+{ifname}\s+({net}\d+/24) from", out, re.M)
        assert re.search(rf"kernel sees\s+{ifname}\S* UP {re.escape(reported)}", out), out
    assert re.search(r"^TEARDOWN ok .*; namespace removed$", out, re.M), out
    assert re.search(r"^ROLLBACK ok .*libcni-demo-broken failed.*then the namespace removed$",
                     out, re.M), out  # fmt: skip
    assert "left behind: nothing" in out
    assert "Cleaned up:" in out

    # Nothing is left behind (other demo runs may be going on: look at this one's).
    ours = namespaces_named_in(out)
    assert len(ours) == 2, out
    assert not ours & demo_namespaces()
    assert not os.path.exists(scratch_dir(out))
    tuning_after = set(os.listdir(tuning_state)) if os.path.isdir(tuning_state) else set()
    assert tuning_after <= tuning_before, "the demo wrote plugin state to the machine's /run/cni"
    assert elapsed < 30, f"the demo took {elapsed:.1f}s"


@pytest.mark.netns
@pytest.mark.refplugins
@pytest.mark.parametrize(
    ("signum", "after"),
    [
        (signal.SIGINT, "the container's namespace"),  # namespaces just created
        (signal.SIGTERM, "the container's namespace"),
        (signal.SIGTERM, "ADD    ok"),  # attached, in the middle of the inner run
    ],
)
def test_demo_cleans_up_when_interrupted(
    netns_ok: None, signum: int, after: str, tmp_path: Path
) -> None:
    errfile = tmp_path / "stderr"
    with errfile.open("w") as errf:
        proc = subprocess.Popen(
            [sys.executable, str(DEMO)],
            stdout=subprocess.PIPE,
            stderr=errf,
            text=True,
            env=demo_env(),
        )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if after in line:
                proc.send_signal(signum)
                break
        rest = proc.stdout.read()  # not communicate(): it would skip what is buffered
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    output = "".join(seen) + rest
    err = errfile.read_text()
    if not any(after in line for line in seen):
        pytest.fail(f"the demo finished before {after!r} was printed:\n{output}\n{err}")
    # Either interrupted (128 + signal), or it had just finished on its own.
    assert proc.returncode in (0, 128 + signum), output + err
    assert "Traceback" not in err
    if proc.returncode:
        assert "interrupted by" in err
    assert "Cleaned up:" in output
    ours = namespaces_named_in(output)
    assert len(ours) == 2, output
    assert not ours & demo_namespaces()
    assert not os.path.exists(scratch_dir(output))


# -- where the demo is -----------------------------------------------------------


def test_the_package_holds_no_demo_and_libcni_demo_points_to_the_script() -> None:
    assert not list((REPO / "libcni").rglob("*demo*"))
    proc = subprocess.run(
        [sys.executable, "-m", "libcni", "demo"],
        capture_output=True,
        text=True,
        env=demo_env(),
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith("libcni demo: the demo is not part of the installed package")
    assert "./scripts/demo.sh" in proc.stderr
    assert (
        (REPO / "scripts" / "demo.sh")
        .read_text()
        .rstrip()
        .endswith('exec .venv/bin/python examples/demo.py "$@"')
    )


# -- missing prerequisites -------------------------------------------------------


def test_demo_without_plugins_says_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, str(DEMO)],
        capture_output=True,
        text=True,
        env=demo_env(CNI_PATH=str(empty)),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert "cannot run, missing" in proc.stderr
    assert "bridge, host-local, portmap, tuning" in proc.stderr
    assert str(empty) in proc.stderr
    assert INSTALL_COMMAND in proc.stderr
    assert INSTALL_COMMAND == "apt-get install -y containernetworking-plugins iproute2 iptables"


@pytest.fixture
def readable_deps() -> Iterator[str]:
    """A world-readable copy of libcni's third-party imports, for an unprivileged user."""
    with harness.readable_deps() as where:
        yield where


def test_demo_without_root_says_so(readable_deps: str) -> None:
    prefix = harness.as_nobody()
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot drop privileges")
    env = demo_env(HOME="/")
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], readable_deps])
    probe = subprocess.run(
        [*prefix, sys.executable, str(DEMO), "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        check=False,
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the unprivileged user cannot run the demo here: {why}")
    proc = subprocess.run(
        [*prefix, sys.executable, str(DEMO)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert "root privileges" in proc.stderr
    assert "sudo ./scripts/demo.sh" in proc.stderr


def test_missing_prerequisites_lists_each_thing(tmp_path: Path) -> None:
    empty = str(tmp_path)
    missing = demo.missing_prerequisites([empty], {"PATH": empty}, euid=1000)
    text = demo.prerequisites_message(missing)
    assert text.startswith("libcni demo: cannot run, missing:\n")
    assert "root privileges" in text
    assert "the CNI plugins bridge, host-local, portmap, tuning" in text
    assert text.rstrip().endswith(INSTALL_COMMAND)
    # Only root missing: nothing to install.
    only_root = [m for m in missing if m.startswith("root privileges")]
    assert len(only_root) == 1
    assert INSTALL_COMMAND not in demo.prerequisites_message(only_root)
    assert demo.prerequisites_message(only_root).count("\n") == 2


def test_missing_prerequisites_none_when_all_there(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    plugins = tmp_path / "plugins"
    for d, names in ((tools, ("ip", "iptables")), (plugins, DEMO_PLUGINS)):
        d.mkdir()
        for name in names:
            (d / name).write_text("#!/bin/sh\n")
            (d / name).chmod(0o755)
    assert demo.missing_prerequisites([str(plugins)], {"PATH": str(tools)}, euid=0) == []
    (plugins / "portmap").unlink()
    [only] = demo.missing_prerequisites([str(plugins)], {"PATH": str(tools)}, euid=0)
    assert "the CNI plugin portmap," in only


def test_demo_plugin_path(tmp_path: Path) -> None:
    assert demo.demo_plugin_path({"CNI_PATH": f"{tmp_path}::/x"}) == [str(tmp_path), "/x"]
    default = demo.demo_plugin_path({})
    assert default and set(default) <= {"/usr/lib/cni", "/opt/cni/bin"}


# -- the embedded configuration and the summary ----------------------------------


def test_demo_conflist_is_a_valid_list() -> None:
    data = demo.demo_conflist("cni-demo-abc123", '/tmp/odd "dir"', "/tmp/tun")
    net = conf_list_from_bytes(data)
    assert net.name == "libcni-demo"
    assert net.cni_version == "1.0.0"
    assert [p.type for p in net.plugins] == ["bridge", "portmap", "tuning"]
    bridge = net.plugins[0]
    assert bridge.raw["bridge"] == "cni-demo-abc123"
    assert bridge.ipam is not None and bridge.ipam["type"] == "host-local"
    assert bridge.ipam["dataDir"] == '/tmp/odd "dir"'
    assert bridge.ipam["ranges"][0][0]["subnet"] == DEMO_SUBNET
    assert net.plugins[1].capabilities == {"portMappings": True}
    assert net.plugins[2].capabilities == {"mac": True}
    assert net.plugins[2].raw["dataDir"] == "/tmp/tun"  # not the machine's /run/cni/tuning
    assert "@" not in data.decode()


def test_summarize_result() -> None:
    result = {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "cni-demo-1", "mac": "aa:aa:aa:aa:aa:aa"},
            {"name": "veth1", "mac": "bb:bb:bb:bb:bb:bb"},
            {"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/c"},
        ],
        "ips": [{"address": "10.88.77.2/24", "gateway": "10.88.77.1", "interface": 2}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.88.77.254"}],
        "dns": {"nameservers": ["10.88.77.1"], "search": ["example.test"]},
    }
    lines = demo.summarize_result(
        result, {"portMappings": [{"hostPort": 8080, "containerPort": 80}]}
    )
    assert lines == [
        ("interface", "eth0 in /run/netns/c"),
        ("MAC", "02:00:00:00:00:01"),
        ("address", "10.88.77.2/24"),
        ("gateway", "10.88.77.1"),
        ("route", "default via 10.88.77.1 (the gateway)"),
        ("route", "10.9.0.0/16 via 10.88.77.254"),
        ("port", "host *:8080/tcp -> container port 80/tcp"),
        ("DNS", "nameservers 10.88.77.1; search example.test"),
        ("host side", "cni-demo-1 (aa:aa:aa:aa:aa:aa), veth1 (bb:bb:bb:bb:bb:bb)"),
    ]
    assert demo.summarize_result({}) == []
