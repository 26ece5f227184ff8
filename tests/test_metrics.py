"""``libcni.metrics.PrometheusObserver`` (behaviour.md §13) on a real ``CollectorRegistry``.

The figures are read back from the registry after real operations with the
test plugin (``tests/plugins/testplugin``).
"""

from __future__ import annotations

import asyncio
import urllib.request

import harness
import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from libcni import PluginError, SetupError
from libcni.metrics import OPERATION_TYPES, PrometheusObserver

Env = harness.ManagerEnv
pytestmark = pytest.mark.env(cls=Env)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_manager_operations_are_counted_and_timed_as_containerd_names_them(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin"})
    env.write(
        "20-b.conflist",
        "b",
        {"type": "testplugin", "test": {"CHECK": {"error": {"code": 51, "msg": "flaky"}}}},
    )
    registry = CollectorRegistry()
    m = env.manager(observers=[PrometheusObserver(registry)])
    m.setup("c1", "/var/run/netns/c1")
    m.setup("c2", "/var/run/netns/c2", networks=["a"])
    with pytest.raises(PluginError):
        m.check("c1", "/var/run/netns/c1")
    m.teardown("c1", "/var/run/netns/c1")

    ops = "libcni_network_plugin_operations_total"
    assert value(registry, ops, operation_type="set_up_pod") == 2
    assert value(registry, ops, operation_type="get_pod_network_status") == 1
    assert value(registry, ops, operation_type="tear_down_pod") == 1
    errors = "libcni_network_plugin_operations_errors_total"
    assert value(registry, errors, operation_type="get_pod_network_status") == 1
    assert value(registry, errors, operation_type="set_up_pod") == 0
    hist = "libcni_network_plugin_operations_duration_seconds"
    assert value(registry, hist + "_count", operation_type="set_up_pod") == 2
    assert value(registry, hist + "_sum", operation_type="set_up_pod") > 0
    # The networks of an operation are not operations of their own.
    assert value(registry, ops, operation_type="add") == 0
    # Each plugin run, by plugin type and command: 2 + 1 ADDs of testplugin, 2 of loopback.
    runs = "libcni_plugin_exec_duration_seconds_count"
    assert value(registry, runs, plugin="testplugin", command="ADD") == 3
    assert value(registry, runs, plugin="loopback", command="ADD") == 2
    # check stops at its first failure: loopback, a, then b fails.
    assert value(registry, runs, plugin="testplugin", command="CHECK") == 2
    assert value(registry, runs, plugin="testplugin", command="DEL") == 2
    failed = "libcni_plugin_exec_errors_total"
    assert value(registry, failed, plugin="testplugin", command="CHECK") == 1
    assert value(registry, failed, plugin="testplugin", command="ADD") == 0


def test_async_manager_setup_in_parallel_and_its_failure(env: Env) -> None:
    env.write("10-a.conflist", "a", {"type": "testplugin"})
    env.write(
        "20-b.conflist",
        "b",
        {"type": "testplugin", "test": {"ADD": {"error": {"code": 11, "msg": "later"}}}},
    )
    registry = CollectorRegistry()
    m = env.amanager(observers=[PrometheusObserver(registry, namespace="rt")])

    async def main() -> None:
        await m.setup("c1", "/var/run/netns/c1", networks=["a"], parallel=True)
        with pytest.raises(SetupError):
            await m.setup("c2", "/var/run/netns/c2", parallel=True)
        await m.gc(["c1"])
        await m.status()

    asyncio.run(main())
    assert value(registry, "rt_network_plugin_operations_total", operation_type="set_up_pod") == 2
    assert (
        value(registry, "rt_network_plugin_operations_errors_total", operation_type="set_up_pod")
        == 1
    )
    for op_type in ("garbage_collect", "get_network_status"):
        assert value(registry, "rt_network_plugin_operations_total", operation_type=op_type) == 1
    # The rollback of c2's setup DELs its three networks.
    runs = "rt_plugin_exec_duration_seconds_count"
    assert value(registry, runs, plugin="testplugin", command="ADD") == 3
    assert value(registry, runs, plugin="testplugin", command="DEL") == 2
    assert value(registry, "rt_plugin_exec_errors_total", plugin="testplugin", command="ADD") == 1


def test_cni_config_operations_are_the_commands_in_lower_case(env: Env) -> None:
    registry = CollectorRegistry()
    cni = env.sync(observers=[PrometheusObserver(registry)])
    net = env.conflist(env.plugin("testplugin"))
    cni.add_network_list(net, env.rt)
    cni.del_network_list(net, env.rt)
    cni.get_version_info("testplugin")
    for op_type in ("add", "del", "version"):
        assert (
            value(registry, "libcni_network_plugin_operations_total", operation_type=op_type) == 1
        )
    assert (
        value(
            registry,
            "libcni_plugin_exec_duration_seconds_count",
            plugin="testplugin",
            command="VERSION",
        )
        == 1
    )


def test_two_observers_on_two_registries_do_not_collide(env: Env) -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    a, b = PrometheusObserver(first), PrometheusObserver(second)
    env.sync(observers=[a]).get_version_info("testplugin")
    assert value(first, "libcni_network_plugin_operations_total", operation_type="version") == 1
    assert value(second, "libcni_network_plugin_operations_total", operation_type="version") == 0
    env.sync(observers=[b]).get_version_info("testplugin")
    assert value(second, "libcni_network_plugin_operations_total", operation_type="version") == 1
    # Another namespace on the same registry is another set of metrics; the same one is refused.
    PrometheusObserver(first, namespace="other")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusObserver(first)


def test_the_exposition_has_the_documented_names(env: Env) -> None:
    registry = CollectorRegistry()
    obs = PrometheusObserver(registry)
    env.sync(observers=[obs]).get_version_info("testplugin")
    text = generate_latest(registry).decode()
    for line in (
        "# TYPE libcni_network_plugin_operations_total counter",
        "# TYPE libcni_network_plugin_operations_errors_total counter",
        "# TYPE libcni_network_plugin_operations_duration_seconds histogram",
        "# TYPE libcni_plugin_exec_duration_seconds histogram",
        "# TYPE libcni_plugin_exec_errors_total counter",
        'libcni_network_plugin_operations_total{operation_type="version"} 1.0',
        'libcni_plugin_exec_duration_seconds_bucket{command="VERSION",le="60.0",plugin="testplugin"} 1.0',
    ):
        assert line in text.splitlines(), line
    assert set(OPERATION_TYPES.values()) == {
        "set_up_pod",
        "tear_down_pod",
        "get_pod_network_status",
        "garbage_collect",
        "get_network_status",
    }


def test_scraped_over_http(env: Env) -> None:
    registry = CollectorRegistry()
    env.sync(observers=[PrometheusObserver(registry)]).get_version_info("testplugin")
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            body = reply.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert 'libcni_network_plugin_operations_total{operation_type="version"} 1.0' in body
