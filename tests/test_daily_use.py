"""What a runtime author meets in the first hour: error strings, logging, defaults, misuse.

Real plugins (``tests/plugins/testplugin``) and real subprocesses throughout;
the non-root default is checked by really running as the user ``nobody``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import libcni
from libcni import (
    CNIConfig,
    GCError,
    NetworkConfigList,
    NotFoundError,
    PluginError,
    RuntimeConf,
    conf_list_from_bytes,
)
from libcni.cache import ROOT_CACHE_DIR, default_cache_dir

REPO = Path(__file__).resolve().parent.parent
PLUGINS = str(REPO / "tests" / "plugins")


def conflist(
    record: Path, *behaviours: dict[str, Any], version: str = "1.1.0", name: str = "net"
) -> NetworkConfigList:
    plugins = [{"type": "testplugin", "record": str(record), "test": b} for b in behaviours]
    return conf_list_from_bytes(
        json.dumps({"cniVersion": version, "name": name, "plugins": plugins})
    )


def python_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    env.update(extra)
    return env


# -- 1. errors that say who failed ----------------------------------------------------


def test_plugin_error_str_names_plugin_and_command_first(tmp_path: Path) -> None:
    net = conflist(
        tmp_path / "rec",
        {"ADD": {"error": {"code": 11, "msg": "no IP addresses available", "details": "net1"}}},
    )
    cni = CNIConfig([PLUGINS], cache_dir=tmp_path / "cache")
    with pytest.raises(PluginError) as info:
        cni.add_network_list(net, RuntimeConf("c1", "/var/run/netns/c1", "eth0"))
    assert str(info.value) == (
        'plugin type="testplugin" failed (add): no IP addresses available; net1'
    )
    # The context is kept on the attributes; describe() adds network and container.
    assert (info.value.msg, info.value.details, info.value.code) == (
        "no IP addresses available",
        "net1",
        11,
    )
    assert info.value.describe() == f"{info.value} [network 'net' container 'c1']"


def test_plugin_error_str_forms() -> None:
    assert str(PluginError("boom", "d")) == "boom; d"  # not attributed yet
    assert str(PluginError("boom", plugin="bridge")) == 'plugin type="bridge" failed: boom'
    assert str(PluginError("boom", command="DEL")) == "plugin failed (del): boom"
    assert (
        str(PluginError("boom", plugin="bridge", command="CHECK"))
        == 'plugin type="bridge" failed (check): boom'
    )


def test_uncaught_plugin_error_traceback_names_the_plugin(tmp_path: Path) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "net",
                "plugins": [
                    {"type": "testplugin", "test": {"ADD": {"error": {"code": 7, "msg": "bad"}}}}
                ],
            }
        )
    )
    program = (
        "import libcni\n"
        f"net = libcni.load_conf_list({str(conf)!r}, 'net')\n"
        f"cni = libcni.CNIConfig([{PLUGINS!r}], cache_dir={str(tmp_path / 'cache')!r})\n"
        "cni.add_network_list(net, libcni.RuntimeConf('c1', '/x', 'eth0'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=python_env()
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        'libcni.errors.PluginError: plugin type="testplugin" failed (add): bad'
    )


def test_gc_error_includes_every_failure_each_naming_its_plugin(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    net = conf_list_from_bytes(
        json.dumps(
            {
                "cniVersion": "1.1.0",
                "name": "net",
                "plugins": [
                    {
                        "type": "testplugin",
                        "record": str(rec),
                        "test": {"GC": {"error": {"code": 7, "msg": "missing containerID"}}},
                    },
                    {"type": "ok", "record": str(rec)},
                    {
                        "type": "third",
                        "record": str(rec),
                        "test": {"GC": {"error": {"code": 11, "msg": "busy", "details": "try"}}},
                    },
                ],
            }
        )
    )
    plugins = tmp_path / "bin"
    plugins.mkdir()
    for name in ("testplugin", "ok", "third"):
        os.symlink(os.path.join(PLUGINS, "testplugin"), plugins / name)
    cni = CNIConfig([plugins], cache_dir=tmp_path / "cache")
    with pytest.raises(GCError) as info:
        cni.gc_network_list(net)
    text = str(info.value)
    assert 'plugin type="testplugin" failed (gc): missing containerID' in text
    assert 'plugin type="third" failed (gc): busy; try' in text
    assert 'type="ok"' not in text
    assert len(info.value.errors) == 2


def test_broken_only_config_is_one_error_line(tmp_path: Path) -> None:
    netdir = tmp_path / "net.d"
    netdir.mkdir()
    (netdir / "10-net.conflist").write_text('{"cniVersion": "1.0.0", "name": "net", "plugins": [')
    proc = subprocess.run(
        [sys.executable, "-m", "libcni", "add", "net", "/var/run/netns/x"],
        capture_output=True,
        text=True,
        env=python_env(NETCONFPATH=str(netdir), CNI_PATH=PLUGINS, CNI_CACHE_DIR=str(tmp_path)),
    )
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "10-net.conflist" in lines[0] and 'name "net"' in lines[0]


def test_broken_file_is_not_logged_when_the_error_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "10-net.conflist").write_text('{"name": "net", "plugins": [')
    with caplog.at_level(logging.DEBUG, logger="libcni"), pytest.raises(NotFoundError) as info:
        libcni.load_conf_list(tmp_path, "net")
    assert "10-net.conflist" in str(info.value)
    assert caplog.records == []


# -- 2. logging ---------------------------------------------------------------------


def test_libcni_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("libcni").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_program_configuring_no_logging_sees_no_warning(tmp_path: Path) -> None:
    (tmp_path / "00-bad.conflist").write_text('{"name": "net", "plugins": [')
    (tmp_path / "10-good.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "x"}]})
    )
    program = (
        "import libcni\n"
        f"print(libcni.load_conf_list({str(tmp_path)!r}, 'net').name)\n"
        # The warning is there for whoever listens:
        "import logging\n"
        "logging.basicConfig(format='%(levelname)s:%(name)s:%(message)s')\n"
        f"libcni.load_conf_list({str(tmp_path)!r}, 'net')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=python_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "net\n"
    # Only the run that configured logging printed the skipped file.
    [line] = proc.stderr.splitlines()
    assert line.startswith("WARNING:libcni:skipping a network configuration")
    assert "00-bad.conflist" in line


def _run_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "libcni" and hasattr(r, "duration")]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_one_debug_record_per_plugin_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, driver: str
) -> None:
    net = conflist(
        tmp_path / "rec",
        {"DEL": {"error": {"code": 7, "msg": "nope"}, "exitCode": 3}},
        {"DEL": {"killSelf": 9}},
        version="1.0.0",
    )
    rt = RuntimeConf("c1", "/var/run/netns/c1", "eth0")
    caplog.set_level(logging.DEBUG, logger="libcni")
    if driver == "sync":
        cni = CNIConfig([PLUGINS], cache_dir=tmp_path / "cache")
        cni.add_network_list(net, rt)
        with pytest.raises(PluginError):
            cni.del_network_list(net, rt)
    else:
        acni = libcni.AsyncCNIConfig([PLUGINS], cache_dir=tmp_path / "cache")

        async def main() -> None:
            await acni.add_network_list(net, rt)
            with pytest.raises(PluginError):
                await acni.del_network_list(net, rt)

        asyncio.run(main())
    records = _run_records(caplog)
    fields = [
        (r.plugin, r.command, r.network, r.container_id, r.exit_code, r.signal)  # type: ignore[attr-defined]
        for r in records
    ]
    assert fields == [
        ("testplugin", "ADD", "net", "c1", 0, None),
        ("testplugin", "ADD", "net", "c1", 0, None),
        ("testplugin", "DEL", "net", "c1", None, 9),  # DEL runs in reverse: killed first
    ]
    assert all(r.levelno == logging.DEBUG for r in records)
    assert all(0 < r.duration < 30 for r in records)  # type: ignore[attr-defined]
    assert "killed by signal 9" in records[-1].getMessage()
    assert records[0].getMessage().startswith("plugin testplugin ADD network=net container=c1: ")


def test_debug_record_of_a_failed_run_has_its_exit_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    net = conflist(tmp_path / "rec", {"STATUS": {"error": {"msg": "down"}, "exitCode": 3}})
    caplog.set_level(logging.DEBUG, logger="libcni")
    with pytest.raises(PluginError):
        CNIConfig([PLUGINS], cache_dir=tmp_path).get_status_network_list(net)
    [record] = _run_records(caplog)
    assert (record.command, record.exit_code, record.signal) == ("STATUS", 3, None)  # type: ignore[attr-defined]
    assert (record.network, record.container_id) == ("net", "")  # type: ignore[attr-defined]
    assert "exit status 3" in record.getMessage()


def test_cli_verbose_shows_plugin_runs_and_one_line_errors(tmp_path: Path) -> None:
    netdir = tmp_path / "net.d"
    netdir.mkdir()
    plugin = {"type": "testplugin", "test": {"CHECK": {"error": {"code": 7, "msg": "bad"}}}}
    (netdir / "10.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "net", "plugins": [plugin]})
    )
    env = python_env(NETCONFPATH=str(netdir), CNI_PATH=PLUGINS, CNI_CACHE_DIR=str(tmp_path / "c"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "libcni", *args], capture_output=True, text=True, env=env
        )

    quiet = cli("add", "net", "/var/run/netns/x")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    loud = cli("-v", "del", "net", "/var/run/netns/x")
    assert loud.returncode == 0
    assert "DEBUG: plugin testplugin DEL network=net container=cnitool-" in loud.stderr
    assert "exit status 0" in loud.stderr
    cli("add", "net", "/var/run/netns/x")
    failed = cli("check", "net", "/var/run/netns/x", "--verbose")
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    lines = failed.stderr.splitlines()
    assert "DEBUG: plugin testplugin CHECK" in failed.stderr and "exit status 1" in failed.stderr
    assert lines[-1].startswith('libcni: plugin type="testplugin" failed (check): bad')
    assert sum(not line.startswith("libcni: DEBUG") for line in lines) == 1


# -- 4. the default cache directory -------------------------------------------------


def test_default_cache_dir_as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    assert default_cache_dir() == ROOT_CACHE_DIR == "/var/lib/cni"
    assert CNIConfig([PLUGINS])._cache().dir == "/var/lib/cni"


def test_import_does_not_decide_the_cache_directory() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, libcni, libcni.cli; assert 'platformdirs' not in sys.modules, 'imported'",
        ],
        capture_output=True,
        text=True,
        env=python_env(),
    )
    assert proc.returncode == 0, proc.stderr


def _interpreter_for_nobody(prefix: list[str]) -> str | None:
    for candidate in (sys.executable, shutil.which("python3", path="/usr/bin:/bin")):
        if candidate is None:
            continue
        probe = subprocess.run(
            [*prefix, candidate, "-c", "import sys; assert sys.version_info >= (3, 10)"],
            capture_output=True,
            cwd="/",
        )
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture
def as_nobody() -> Iterator[tuple[list[str], str, Path]]:
    """(command prefix, interpreter, a HOME that nobody owns), with readable dependencies."""
    import attr
    import attrs
    import platformdirs

    setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv(1) to run as nobody")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    python = _interpreter_for_nobody(prefix)
    if python is None:
        pytest.skip("no Python >= 3.10 that nobody can run")
    where = Path(tempfile.mkdtemp(prefix="libcni-test-nobody-"))
    try:
        os.chmod(where, 0o755)
        deps = where / "deps"
        for module in (attr, attrs, platformdirs):
            assert module.__file__ is not None
            src = os.path.dirname(module.__file__)
            shutil.copytree(src, deps / os.path.basename(src))
        for root, dirs, files in os.walk(deps):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        home = where / "home"
        home.mkdir()
        os.chown(home, 65534, 65534)
        yield prefix, python, home
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_default_cache_dir_without_root_is_the_user_state_dir(
    as_nobody: tuple[list[str], str, Path],
) -> None:
    prefix, python, home = as_nobody
    env = {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO}{os.pathsep}{home.parent / 'deps'}",
    }
    program = (
        "import os, json, libcni\n"
        "from libcni.cache import default_cache_dir\n"
        "assert os.geteuid() == 65534\n"
        "net = libcni.conf_list_from_bytes(json.dumps({'cniVersion': '1.0.0', 'name': 'net',"
        " 'plugins': [{'type': 'testplugin'}]}))\n"
        f"cni = libcni.CNIConfig([{PLUGINS!r}])\n"
        "cni.add_network_list(net, libcni.RuntimeConf('c1', '/x', 'eth0'))\n"
        "print(default_cache_dir())\n"
        "print(len(cni.get_cached_attachments()))\n"
        "acni = libcni.AsyncCNIConfig([" + repr(PLUGINS) + "])\n"
        "import asyncio\n"
        "print(len(asyncio.run(acni.get_cached_attachments())))\n"
    )
    proc = subprocess.run(
        [*prefix, python, "-c", program], capture_output=True, text=True, env=env, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr
    expected = home / ".local" / "state" / "cni"
    assert proc.stdout.splitlines() == [str(expected), "1", "1"]
    entry = expected / "results" / "net-c1-eth0"
    assert entry.is_file() and entry.stat().st_uid == 65534
    # The command line lists (and names) the same directory.
    listing = subprocess.run(
        [*prefix, python, "-m", "libcni", "cache", "list"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    )
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.splitlines() == [f"# cache directory: {expected}", "c1\tnet\teth0\t/x"]


# -- 5. misuse gets a clear error at once ---------------------------------------------


@pytest.mark.parametrize("args", ["K=V", b"K=V", 7])
def test_runtime_conf_args_of_the_wrong_shape(args: Any) -> None:
    with pytest.raises(TypeError, match=r"\(key, value\) pairs .* or a mapping") as info:
        RuntimeConf("c1", args=args)
    assert type(args).__name__ in str(info.value)


def test_runtime_conf_args_of_the_right_shape() -> None:
    assert RuntimeConf("c1", args=[("K", "V")]).args == (("K", "V"),)
    # Lists, as JSON decodes pairs: outside the annotation, converted at run time.
    assert RuntimeConf("c1", args=(["K", "V"],)).args == (("K", "V"),)  # type: ignore[arg-type]
    assert RuntimeConf("c1", args={"K": "V", "A": "B"}).args == (("K", "V"), ("A", "B"))


def test_single_plugin_methods_refuse_a_list(tmp_path: Path) -> None:
    net = conflist(tmp_path / "rec", {})
    cni = CNIConfig([PLUGINS], cache_dir=tmp_path / "cache")
    rt = RuntimeConf("c1", "/x", "eth0")
    for method in (cni.add_network, cni.check_network, cni.del_network):
        with pytest.raises(TypeError, match=r"expects a PluginConfig .*_network_list\(\)"):
            method(net, rt)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expects a PluginConfig"):
        cni.get_network_cached_result(net, rt)  # type: ignore[arg-type]
    assert not (tmp_path / "rec").exists()  # no plugin ran


def test_list_methods_refuse_a_single_plugin(tmp_path: Path) -> None:
    conf = libcni.conf_from_bytes(json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "x"}))
    cni = CNIConfig([PLUGINS], cache_dir=tmp_path / "cache")
    rt = RuntimeConf("c1", "/x", "eth0")
    with pytest.raises(TypeError, match=r"conf_list_from_conf\(\) or use add_network\(\)"):
        cni.add_network_list(conf, rt)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expects a NetworkConfigList, not PluginConfig"):
        cni.gc_network_list(conf)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expects a NetworkConfigList, not dict"):
        cni.del_network_list({"name": "n"}, rt)  # type: ignore[arg-type]


def test_async_methods_refuse_the_wrong_kind(tmp_path: Path) -> None:
    net = conflist(tmp_path / "rec", {})
    acni = libcni.AsyncCNIConfig([PLUGINS], cache_dir=tmp_path / "cache")
    rt = RuntimeConf("c1", "/x", "eth0")
    with pytest.raises(TypeError, match="add_network\\(\\) expects a PluginConfig"):
        asyncio.run(acni.add_network(net, rt))  # type: ignore[arg-type]
    assert not (tmp_path / "rec").exists()


# -- 6. the command line ------------------------------------------------------------


def test_cli_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "libcni", "--version"],
        capture_output=True,
        text=True,
        env=python_env(),
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"libcni {libcni.__version__}\n", "")


def test_version_has_one_source() -> None:
    from importlib.metadata import version

    assert version("libcni") == libcni.__version__
    text = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text
    assert 'version = { attr = "libcni.__version__" }' in text


@pytest.mark.parametrize("command", ["add", "check", "del"])
def test_cli_refuses_an_empty_cni_ifname_as_cnitool(tmp_path: Path, command: str) -> None:
    netdir = tmp_path / "net.d"
    netdir.mkdir()
    record = tmp_path / "rec"
    (netdir / "10.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "net",
                "plugins": [{"type": "testplugin", "record": str(record)}],
            }
        )
    )
    env = python_env(
        NETCONFPATH=str(netdir), CNI_PATH=PLUGINS, CNI_CACHE_DIR=str(tmp_path), CNI_IFNAME=""
    )
    proc = subprocess.run(
        [sys.executable, "-m", "libcni", command, "net", "/var/run/netns/x"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("libcni: interface name is empty")
    assert len(proc.stderr.splitlines()) == 1
    assert not record.exists()  # no plugin ran
    proc = subprocess.run(
        [sys.executable, "-m", "libcni", command, "net", "/var/run/netns/x", "--ifname", ""],
        capture_output=True,
        text=True,
        env={**env, "CNI_IFNAME": "eth1"},
    )
    assert proc.returncode == 1 and "interface name is empty" in proc.stderr
