"""A new user's first steps: the README's commands, the demo, the command line's defaults,
help and errors, and what each command prints (as docs/cli.rst says).

The demo and the README's "try it" commands need root, iproute2 and the
reference plugins (they skip without, unless ``LIBCNI_REQUIRE_NETNS=1``); they
work in namespaces of their own, never in the machine's.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import harness
import pytest
from _require import unavailable
from harness import run_cli
from test_demo import DEMO, demo
from test_manager import Env
from test_manager_cli import run

import libcni.cli as cli

REPO = harness.REPO
README = REPO / "README.md"
EXAMPLES = REPO / "examples" / "net.d"


# The manager's environment (testplugin and loopback linked) and the command line run
# on it (NETCONFPATH, CNI_PATH, CNI_CACHE_DIR wired), as tests/test_manager_cli.py has them.
pytestmark = pytest.mark.env(cls=Env)


# -- defaults and errors of the command line ---------------------------------------------


def test_cni_path_defaults_to_both_plugin_directories() -> None:
    assert cli.DEFAULT_CNI_PATH == "/opt/cni/bin:/usr/lib/cni"
    assert cli._common.plugin_path({}) == ["/opt/cni/bin", "/usr/lib/cni"]
    assert cli._common.plugin_path({"CNI_PATH": ""}) == ["/opt/cni/bin", "/usr/lib/cni"]
    assert cli._common.plugin_path({"CNI_PATH": "/a::/b"}) == ["/a", "/b"]


def test_debian_plugins_are_found_without_cni_path(tmp_path: Path) -> None:
    if not os.access("/usr/lib/cni/loopback", os.X_OK) or os.path.exists("/opt/cni/bin/loopback"):
        unavailable("needs Debian's /usr/lib/cni/loopback and no /opt/cni/bin/loopback")
    environ = harness.python_env()
    environ.pop("CNI_PATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "libcni", "version", "loopback"],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1.0.0" in proc.stdout.split()


def test_a_missing_plugin_error_says_where_it_looked_and_what_to_do(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "nosuch"})
    for argv in (
        ("add", "a", "/var/run/netns/x"),
        ("ready",),
        ("up", "c1", "ns"),
        ("version", "nosuch"),
    ):
        proc = run(env, *argv)
        assert proc.returncode == 1, (argv, proc.stdout)
        line = proc.stderr.splitlines()[-1]  # after the warning about the skipped file, if any
        assert line.startswith("libcni: ") and "WARNING" not in line, line
        assert 'failed to find plugin "nosuch"' in line, (argv, line)
        assert str(env.bin) in line
        assert "CNI_PATH" in line and "containernetworking-plugins" in line, line


def test_up_help_describes_the_container_id_rightly() -> None:
    for command in ("up", "down", "show"):
        proc = run_cli(command, "--help")
        assert proc.returncode == 0
        text = " ".join(proc.stdout.split())
        assert "the container's ID, as the runtime names it" in text, text
        assert "cnitool-" not in text and "SHA-512" not in text, text
    assert "SHA-512" in " ".join(run_cli("add", "--help").stdout.split())


@pytest.mark.parametrize("command", ["gc", "status"])
@pytest.mark.parametrize("option", [["-i", "eth1"], ["--ifname", "eth1"]])
def test_gc_and_status_refuse_an_interface_name(env: Env, command: str, option: list[str]) -> None:
    env.write("10-a.conflist", "a")
    proc = run(env, command, "a", *option)
    assert proc.returncode == 2
    assert "unrecognized arguments" in proc.stderr
    assert [r for r in env.records() if r.get("command") not in (None, "VERSION")] == []


def test_down_prints_what_it_detached(env: Env) -> None:
    env.write("10-a.conflist", "a")
    assert run(env, "up", "c1", "/var/run/netns/c1").returncode == 0
    down = run(env, "down", "c1", "/var/run/netns/c1")
    assert (down.returncode, down.stdout) == (0, "detached c1 from a (eth0), cni-loopback (lo)\n")
    again = run(env, "down", "c1")
    assert (again.returncode, again.stdout) == (
        0,
        "nothing to detach: no cached attachment of c1\n",
    )


def _cli_rst_output_rule() -> tuple[list[str], list[str]]:
    """docs/cli.rst "Output and exit status": the commands said to print, and to print nothing."""
    text = (REPO / "docs" / "cli.rst").read_text()
    section = text.split("Output and exit status", 1)[1].split("\n\n", 2)[1]
    section = " ".join(section.split())
    silent = next(s for s in re.split(r"(?<=\.)\s+", section) if "print nothing" in s)
    printing = section.split(silent, 1)[0]
    return re.findall(r"``([a-z ]+)``", printing), re.findall(r"``([a-z ]+)``", silent)


def test_docs_cli_rst_is_true_about_what_each_command_prints(env: Env) -> None:
    printing, silent = _cli_rst_output_rule()
    assert set(silent) == {"check", "del", "gc", "status"}, silent
    assert {"add", "up", "show", "down", "ready", "validate", "version"} <= set(printing), printing
    env.write("10-a.conflist", "a", {"type": "testplugin", "capabilities": {"mac": True}})
    argv = {
        "add": ("add", "a", "/var/run/netns/x"),
        "check": ("check", "a", "/var/run/netns/x"),
        "del": ("del", "a", "/var/run/netns/x"),
        "gc": ("gc", "a"),
        "status": ("status", "a"),
        "validate": ("validate", "a"),
        "version": ("version", "testplugin"),
        "cache list": ("cache", "list"),
        "up": ("up", "c1", "/var/run/netns/c1"),
        "show": ("show", "c1"),
        "ready": ("ready",),
        "down": ("down", "c1", "/var/run/netns/c1"),
    }
    for name, args in argv.items():
        proc = run(env, *args)
        assert proc.returncode == 0, (name, proc.stderr)
        if name in silent:
            assert proc.stdout == "", (name, proc.stdout)
        else:
            assert name in printing, f"docs/cli.rst does not say what {name} prints"
            assert proc.stdout.strip(), name


# -- the README and the demo -------------------------------------------------------------


def readme_try_block() -> str:
    """The README's shell block that tries the command line after the demo."""
    text = README.read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
    tries: list[str] = [b for b in blocks if "ip netns add try-host" in b]
    assert len(tries) == 1, blocks
    return tries[0]


def test_readme_leads_from_the_demo_to_the_command_line() -> None:
    text = README.read_text()
    first_try = text.index("ip netns add try-host")
    assert text.index("./scripts/demo.sh") < first_try < text.index("## What it is for")
    # The README's commands are the ones the demo prints at its end (run from the checkout).
    printed = demo.try_commands(".venv/bin/libcni", "$PWD/examples/net.d").splitlines()[1:]
    assert [line.strip() for line in readme_try_block().splitlines() if line.strip()] == [
        line.strip() for line in printed
    ]


def _root_netns_plugins() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None:
        unavailable("needs root, ip and iptables")
    for plugin in ("bridge", "host-local", "portmap", "loopback"):
        if not os.access(f"/usr/lib/cni/{plugin}", os.X_OK):
            unavailable(f"needs the reference plugin /usr/lib/cni/{plugin}")


@pytest.mark.netns
@pytest.mark.refplugins
def test_the_readme_try_commands_work(tmp_path: Path) -> None:
    """Run the README's block as written, but with namespaces, state and example copy of
    this test's own (the machine's namespace is never touched)."""
    _root_netns_plugins()
    tag = secrets.token_hex(3)
    host, ctr = f"libcni-e2e-try-host-{tag}", f"libcni-e2e-try-ctr-{tag}"
    state = tmp_path / "state"
    examples = tmp_path / "net.d"
    examples.mkdir()
    conf = (EXAMPLES / "10-trynet.conflist").read_text().replace("/run/libcni-try", str(state))
    (examples / "10-trynet.conflist").write_text(conf)
    script = (
        readme_try_block()
        .replace("try-host", host)
        .replace("try-ctr", ctr)
        .replace("$PWD/examples/net.d", str(examples))
        .replace("/run/libcni-try", str(state))
        .replace(".venv/bin/libcni", f"{sys.executable} -m libcni")
    )
    env = dict(harness.python_env(), CNI_PATH="")  # the default directories
    try:
        proc = subprocess.run(
            ["bash", "-euxc", script],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
            check=False,
        )
    finally:
        for ns in (ctr, host):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    up, show = re.findall(r"^\{.*?^\}$", proc.stdout, re.M | re.S)[:2]
    for view in (json.loads(up), json.loads(show)):
        assert [(a["network"], a["ifname"]) for a in view["attachments"]] == [
            ("cni-loopback", "lo"),
            ("trynet", "eth0"),
        ]
        assert view["ips"][0].startswith("10.88.99.")
    assert "detached ctr1 from trynet (eth0), cni-loopback (lo)" in proc.stdout
    assert not state.exists()  # the last command removes it


@pytest.mark.netns
@pytest.mark.refplugins
def test_demo_honours_cache_dir_says_why_check_passes_and_what_to_try_next(
    tmp_path: Path,
) -> None:
    _root_netns_plugins()
    cache = tmp_path / "my-cache"
    environ = harness.python_env()
    environ.pop("CNI_PATH", None)
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"cache in {cache}" in out
    assert re.search(rf"^CACHE\s+{re.escape(str(cache))}/results/libcni-demo-\S+-eth0$", out, re.M)
    assert (cache / "results").is_dir()  # used, and left where the user wanted it
    assert list((cache / "results").iterdir()) == []  # every attachment was removed
    if shutil.which("ip6tables"):
        assert "ip6tables hidden from the plugins" in out and "plugins#819" in out
    tail = out.split("Try the command line yourself", 1)[1]
    assert f"NETCONFPATH={EXAMPLES}" in tail and " up ctr1 /run/netns/try-ctr" in tail


# -- the setup scripts: the demo installs only what it needs -----------------------------


def _stubbed_checkout(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of scripts/ with dpkg-query, apt-get, id and .venv/bin/python stubbed."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "scripts", root / "scripts")
    log = tmp_path / "calls.log"
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in {
        "dpkg-query": "exit 1",  # nothing installed
        "apt-get": f'echo "apt-get $*" >> {log}',
        "id": "echo 0",
    }.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    for name in ("python", "libcni"):
        (venv / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        (venv / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}")
    return root, log, env


def test_demo_sh_installs_only_what_the_demo_needs(tmp_path: Path) -> None:
    root, log, env = _stubbed_checkout(tmp_path)
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "demo.sh"), "--timeout", "9"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    install = [c for c in calls if c.startswith("apt-get install")]
    assert len(install) == 1
    packages = set(install[0].split()) - {"apt-get", "install", "-y", "-qq"}
    assert packages == {
        "--no-install-recommends",
        "containernetworking-plugins",
        "iproute2",
        "iptables",
        "python3",
        "python3-venv",
    }
    assert "python -m pip install -q --disable-pip-version-check -e ." in calls
    assert calls[-1] == "python examples/demo.py --timeout 9"


def test_test_sh_installs_the_test_toolchain(tmp_path: Path) -> None:
    root, log, env = _stubbed_checkout(tmp_path)
    subprocess.run(
        ["bash", "-c", 'sed -n "/setup.sh/p" scripts/test.sh | bash'],
        cwd=root, capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    calls = log.read_text().splitlines()
    [install] = [c for c in calls if c.startswith("apt-get install")]
    assert {"gcc", "golang-go", "golang-github-appc-cni-dev"} <= set(install.split())
    assert "--no-install-recommends" not in install  # gcc needs libc6-dev
    assert "python -m pip install -q --disable-pip-version-check -e .[test]" in calls
