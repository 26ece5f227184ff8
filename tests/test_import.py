"""What ``import libcni`` leaves for later (issue 12: the import budget).

Each check runs in a fresh interpreter (``sys.modules`` of the test process
has everything already). No timing here: ``benchmarks/run.py --only import``
measures; these tests keep what was made lazy lazy, and working once used.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLUGINS = str(REPO / "tests" / "plugins")

#: Modules ``import libcni`` must not import: each is imported where used.
LAZY = (
    "asyncio",  # the async API
    "base64",  # the cache's bytes fields
    "ctypes",  # libcni.netns's system calls
    "json",  # imported where first used
    "cattrs",  # the converter, built at first use
    "libcni.capabilities",  # the typed capability arguments
    "libcni._checks",  # and their checks
    "libcni.invoke._errvalue",  # a failing plugin's error object
    "libcni.manager",
    "libcni.netns",  # network namespaces
    "libcni._nspath",  # and their files and system calls
    "libcni.types.convert",  # conversions between versions
    "libcni.types.v02",  # the 0.1.0/0.2.0 results
    "libcni.types.v04",  # the 0.3.x/0.4.0 results
    "logging",  # libcni/_log.py
    "subprocess",  # only RawExec's Popen fallback
    # The observers of behaviour.md §13 and their optional libraries.
    "libcni._events",
    "libcni.metrics",
    "libcni.tracing",
    "prometheus_client",
    "opentelemetry",
)


def run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return proc.stdout


def test_import_libcni_leaves_the_lazy_modules_unimported() -> None:
    code = f"import sys, libcni; print([m for m in {LAZY!r} if m in sys.modules])"
    assert run(code) == "[]\n"


def test_libcni_netns_is_loaded_on_first_use() -> None:
    code = (
        "import sys, libcni\n"
        "print('libcni.netns' in sys.modules)\n"
        "print(libcni.netns.create is sys.modules['libcni.netns'].create, libcni.netns.DEFAULT_DIR)\n"
        "print(libcni.NamespaceError.__module__, libcni.NamespaceError('x').code)\n"
    )
    assert run(code).splitlines() == ["False", "True /run/netns", "libcni.errors 8"]


def test_an_old_result_version_imports_its_family_and_works() -> None:
    code = (
        "import sys, libcni\n"
        'r = libcni.result_from_bytes(b\'{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24"}}\')\n'
        "print(type(r).__name__, type(r).__module__)\n"
        "print(r.as_version('0.4.0').to_json())\n"
        "print([m for m in ('libcni.types.v02', 'libcni.types.v04', 'libcni.types.convert')"
        " if m in sys.modules])\n"
    )
    assert run(code).splitlines() == [
        "Result020 libcni.types.v02",
        '{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}],"dns":{}}',
        "['libcni.types.v02', 'libcni.types.v04', 'libcni.types.convert']",
    ]


def test_old_result_names_are_importable_and_listed() -> None:
    code = (
        "import sys, libcni.types as t\n"
        "old = ['IPConfig020', 'IPConfig040', 'Interface040', 'Result020', 'Result040', 'Route020']\n"
        "print(all(n in t.__all__ and n in dir(t) for n in old))\n"
        "print('libcni.types.v04' in sys.modules)\n"
        "from libcni.types import Result040\n"
        "import libcni.types.v04 as v04\n"
        "print(Result040 is v04.Result040, t.family_of('0.3.1') is Result040)\n"
        'print(t.create_result(\'0.4.0\', \'{"ips":[{"address":"fd00::2/64"}]}\').cni_version)\n'
        "try:\n"
        "    t.NoSuchName\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    assert run(code).splitlines() == [
        "True",
        "False",
        "True True",
        "0.4.0",
        "module 'libcni.types' has no attribute 'NoSuchName'",
    ]


def test_family_of_knows_every_version_and_refuses_others() -> None:
    from libcni.errors import VersionError
    from libcni.types import Result020, Result040, Result100, family_of

    expected = {"": Result020, "0.1.0": Result020, "0.2.0": Result020, "0.3.0": Result040}
    expected |= {"0.3.1": Result040, "0.4.0": Result040, "1.0.0": Result100, "1.1.0": Result100}
    assert {v: family_of(v) for v in expected} == expected
    for bad in ("0.5.0", "1.2.0", None, 1):
        with pytest.raises(VersionError, match=re.escape(repr(bad))):
            family_of(bad)  # type: ignore[arg-type]


def test_logging_imported_late_gets_the_records_with_their_caller(tmp_path: Path) -> None:
    # libcni logs through stand-ins made while logging was not imported: a
    # program that imports logging afterwards gets the records, naming the
    # function that logged, and the libcni logger has its NullHandler.
    (tmp_path / "00-bad.conflist").write_text('{"name": "net", "plugins": [')
    (tmp_path / "10-good.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "net",
                "plugins": [
                    {
                        "type": "testplugin",
                        "test": {"ADD": {"stderr": "said", "result": {"cniVersion": "1.0.0"}}},
                    }
                ],
            }
        )
    )
    code = (
        "import sys, libcni\n"
        "assert 'logging' not in sys.modules\n"
        "import logging\n"
        "records = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): records.append(record)\n"
        "log = logging.getLogger('libcni')\n"
        "log.addHandler(Keep())\n"
        "log.setLevel(logging.DEBUG)\n"
        f"net = libcni.load_conf_list({str(tmp_path)!r}, 'net')\n"
        f"cni = libcni.CNIConfig([{PLUGINS!r}], cache_dir={str(tmp_path / 'cache')!r})\n"
        "cni.add_network_list(net, libcni.RuntimeConf('c1', '/var/run/netns/c1', 'eth0'))\n"
        "for r in records:\n"
        "    print(r.name, r.levelname, r.module, r.funcName)\n"
        "print(any(isinstance(h, logging.NullHandler) for h in log.handlers))\n"
    )
    assert run(code).splitlines() == [
        "libcni WARNING _load search",
        "libcni.invoke DEBUG _raw _log_stderr",
        "libcni DEBUG _ops _log_run",
        "True",
    ]


def test_libcni_logger_has_its_null_handler_when_logging_came_first() -> None:
    code = (
        "import logging, libcni\n"
        "print([type(h).__name__ for h in logging.getLogger('libcni').handlers])\n"
    )
    assert run(code) == "['NullHandler']\n"


def test_the_observers_import_their_library_only_when_imported() -> None:
    code = (
        "import sys, libcni\n"
        "print(libcni.Event.__module__, callable(libcni.Observer))\n"
        "import libcni.metrics\n"
        "print('prometheus_client' in sys.modules, 'opentelemetry' in sys.modules)\n"
        "import libcni.tracing\n"
        "print('opentelemetry' in sys.modules)\n"
        "print(libcni.metrics.PrometheusObserver.__name__, libcni.tracing.OpenTelemetryObserver.__name__)\n"
    )
    assert run(code).splitlines() == [
        "libcni._events True",
        "True False",
        "True",
        "PrometheusObserver OpenTelemetryObserver",
    ]
