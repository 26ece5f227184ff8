"""libcni: the runtime side of the Container Network Interface (CNI) for Python.

Load network configuration lists, run the plugin binaries, and keep their
results in an on-disk cache compatible with the Go library::

    import libcni

    net = libcni.load_conf_list("/etc/cni/net.d", "mynet")
    cni = libcni.CNIConfig(["/opt/cni/bin"])
    rt = libcni.RuntimeConf("c1", netns="/var/run/netns/c1", ifname="eth0")
    result = cni.add_network_list(net, rt)
    cni.del_network_list(net, rt)

See https://www.cni.dev/ for the specification.
"""

from __future__ import annotations

import typing as _typing

from .api import CNIConfig
from .conf import (
    NetworkConfig,
    NetworkConfigList,
    PluginConfig,
    conf_files,
    conf_from_bytes,
    conf_from_file,
    conf_list_from_bytes,
    conf_list_from_conf,
    conf_list_from_file,
    inject_conf,
    load_conf,
    load_conf_list,
    load_network_conf,
    network_conf_from_bytes,
    network_conf_from_file,
    network_plugin_conf_from_bytes,
    network_plugin_confs_from_files,
)
from .errors import (
    AlreadyAttachedError,
    CacheError,
    CheckNotSupportedError,
    CNIError,
    Code,
    ConfigError,
    DecodeError,
    GCError,
    InvalidNetworkError,
    LockTimeoutError,
    NamespaceError,
    NoConfigsFoundError,
    NotAttachedError,
    NotFoundError,
    NotReadyError,
    PluginError,
    PluginNotFoundError,
    PluginTimeoutError,
    SetupError,
    TeardownError,
    ValidationError,
    VersionError,
)
from .types import Result, create_result, result_from_bytes
from .types.dns import DNS
from .values import Args, CapabilityArgs, GCArgs, GCAttachment, NetworkAttachment, RuntimeConf
from .version import PluginInfo

if _typing.TYPE_CHECKING:
    from ._events import Event, Observer
    from .aio import AsyncCNIConfig
    from .capabilities import (
        Bandwidth,
        DNSConfig,
        IPRange,
        PortMapping,
        RuntimeConfig,
        k8s_args,
    )
    from .manager import (
        AsyncNetworkManager,
        AttachmentResult,
        ContainerInterface,
        ContainerNetworks,
        LoadedNetworks,
        NetworkManager,
        NetworkRequest,
    )

# A program that configures no logging sees nothing from the library: the
# "libcni" logger gets a NullHandler (else logging's last-resort handler would
# print its warnings on stderr) before its first record, at import when logging
# is imported already (libcni/_log.py: ``import libcni`` spares logging).

__version__ = "0.1.0"

__all__ = [
    "DNS",
    "AlreadyAttachedError",
    "Args",
    "AsyncCNIConfig",
    "AsyncNetworkManager",
    "AttachmentResult",
    "Bandwidth",
    "CNIConfig",
    "CNIError",
    "CacheError",
    "CapabilityArgs",
    "CheckNotSupportedError",
    "Code",
    "ConfigError",
    "ContainerInterface",
    "ContainerNetworks",
    "DNSConfig",
    "DecodeError",
    "Event",
    "GCArgs",
    "GCAttachment",
    "GCError",
    "IPRange",
    "InvalidNetworkError",
    "LoadedNetworks",
    "LockTimeoutError",
    "NamespaceError",
    "NetworkAttachment",
    "NetworkConfig",
    "NetworkConfigList",
    "NetworkManager",
    "NetworkRequest",
    "NoConfigsFoundError",
    "NotAttachedError",
    "NotFoundError",
    "NotReadyError",
    "Observer",
    "PluginConfig",
    "PluginError",
    "PluginInfo",
    "PluginNotFoundError",
    "PluginTimeoutError",
    "PortMapping",
    "Result",
    "RuntimeConf",
    "RuntimeConfig",
    "SetupError",
    "TeardownError",
    "ValidationError",
    "VersionError",
    "conf_files",
    "conf_from_bytes",
    "conf_from_file",
    "conf_list_from_bytes",
    "conf_list_from_conf",
    "conf_list_from_file",
    "create_result",
    "inject_conf",
    "k8s_args",
    "load_conf",
    "load_conf_list",
    "load_network_conf",
    "network_conf_from_bytes",
    "network_conf_from_file",
    "network_plugin_conf_from_bytes",
    "network_plugin_confs_from_files",
    "result_from_bytes",
]


#: The names loaded on first use, and their module: the async API (asyncio, ~20 ms), the
#: observers' events, the network manager and the typed capability arguments.
_LAZY = {
    "AsyncCNIConfig": ".aio",
    **dict.fromkeys(("Event", "Observer"), "._events"),
    **dict.fromkeys(
        ("AsyncNetworkManager", "AttachmentResult", "ContainerInterface", "ContainerNetworks"),
        ".manager",
    ),
    **dict.fromkeys(("LoadedNetworks", "NetworkManager", "NetworkRequest"), ".manager"),
    **dict.fromkeys(
        ("Bandwidth", "DNSConfig", "IPRange", "PortMapping", "RuntimeConfig", "k8s_args"),
        ".capabilities",
    ),
}


def __getattr__(name: str) -> _typing.Any:
    import importlib

    # libcni.netns (ctypes) too: ``libcni.netns.create()`` after a plain ``import libcni``.
    if name == "netns":
        return importlib.import_module(".netns", __name__)
    if name not in _LAZY:
        raise AttributeError(f"module 'libcni' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The names loaded on first use are listed before they are loaded.
    return sorted(set(globals()) | set(__all__))


del annotations  # dir(libcni) lists the library's names, not those of its imports
