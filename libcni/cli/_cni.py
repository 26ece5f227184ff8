"""The ``cnitool`` commands: ``add``, ``check``, ``del``, ``gc``, ``status``, ``validate``,
``version``, ``cache list``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TextIO

from ..api import CNIConfig
from ..conf import NetworkConfigList, load_conf_list
from ..values import RuntimeConf
from ._common import (
    DEFAULT_CNI_PATH,
    DEFAULT_IFNAME,
    CLIError,
    Subparsers,
    cache_dir,
    command,
    container_id_for_netns,
    netconfpath,
    netns_path,
    parse_cap_args,
    parse_cni_args,
    plugin_path,
)

ENVIRONMENT = f"""\
environment (as cnitool):
  NETCONFPATH    directory of the network configurations (default /etc/cni/net.d)
  CNI_PATH       ':'-separated plugin directories (default {DEFAULT_CNI_PATH})
  CNI_ARGS       arguments for the plugins, KEY=VALUE pairs separated by ';'
  CAP_ARGS       capability arguments, a JSON object (e.g. {{"portMappings": [...]}})
  CNI_IFNAME     interface name in the container (default eth0; empty is refused)
  CNI_CACHE_DIR  cache directory (--cache-dir wins; default /var/lib/cni as root,
                 else the per-user state directory, e.g. ~/.local/state/cni)

The container ID is "cnitool-" and the first 20 hex digits of the SHA-512 of
the absolute NETNS path, as cnitool derives it.
"""


def _ifname(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    # As cnitool: CNI_IFNAME unset means eth0; set but empty is an error (Go's
    # libcni refuses the empty name: "interface name is empty").
    ifname = getattr(args, "ifname", None)
    if ifname is None:
        ifname = environ.get("CNI_IFNAME", DEFAULT_IFNAME)
        where = "CNI_IFNAME is set but empty; unset it for the default eth0"
    else:
        where = "--ifname is empty"
    if not ifname:
        raise CLIError(f"interface name is empty ({where})")
    return ifname


def _cni(args: argparse.Namespace, environ: Mapping[str, str]) -> CNIConfig:
    timeout = getattr(args, "timeout", None)
    return CNIConfig(plugin_path(environ), cache_dir=cache_dir(args, environ), timeout=timeout)


def _network(args: argparse.Namespace, environ: Mapping[str, str]) -> NetworkConfigList:
    return load_conf_list(netconfpath(environ), args.network)


def _runtime_conf(args: argparse.Namespace, environ: Mapping[str, str]) -> RuntimeConf:
    # Same order as cnitool: capability args, then CNI_ARGS, then the names.
    cap_args = parse_cap_args(environ.get("CAP_ARGS", ""))
    cni_args = parse_cni_args(environ.get("CNI_ARGS", ""))
    netns = netns_path(args.netns)
    container_id, ifname = container_id_for_netns(netns), _ifname(args, environ)
    return RuntimeConf(container_id, netns, ifname, args=cni_args, capability_args=cap_args)


def _cmd_attach(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    net = _network(args, environ)
    rt = _runtime_conf(args, environ)
    cni = _cni(args, environ)
    if args.command == "add":
        out.write(cni.add_network_list(net, rt).to_json(indent=4) + "\n")
        return 0
    if not environ.get("CNI_ARGS") and not environ.get("CAP_ARGS"):
        # The args and capability args of the ADD: a DEL without the port mappings
        # would leave portmap's rules behind for good.
        cached = cni.get_network_list_cached_config(net, rt)
        if cached is not None:
            rt = cached[1]
    if args.command == "check":
        cni.check_network_list(net, rt)
    else:
        cni.del_network_list(net, rt)
    return 0


def _cmd_gc(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    # As cnitool: no valid attachments are given, so every cached attachment
    # of the network is stale and deleted.
    _cni(args, environ).gc_network_list(_network(args, environ), None)
    return 0


def _cmd_status(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    _cni(args, environ).get_status_network_list(_network(args, environ))
    return 0


def _cmd_validate(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    net = _network(args, environ)
    out.writelines(c + "\n" for c in _cni(args, environ).validate_network_list(net))
    return 0


def _cmd_version(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    info = _cni(args, environ).get_version_info(args.plugin)
    out.writelines(v + "\n" for v in info.supported_versions)
    return 0


def _cmd_cache_list(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    out.write(f"# cache directory: {cache_dir(args, environ)}\n")
    for att in _cni(args, environ).get_cached_attachments(args.container_id or ""):
        out.write(f"{att.container_id}\t{att.network}\t{att.ifname}\t{att.netns or '-'}\n")
    return 0


_CACHED_ARGS = (
    " Without CNI_ARGS and CAP_ARGS, the arguments and capability arguments cached at ADD are used."
)


def add_commands(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """The parsers of the ``cnitool`` commands."""
    ifname = argparse.ArgumentParser(add_help=False)
    ifname.add_argument(
        "-i",
        "--ifname",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="interface name in the container (default: $CNI_IFNAME or eth0)",
    )
    network = argparse.ArgumentParser(add_help=False)
    network.add_argument("network", metavar="NETWORK", help="network name (in $NETCONFPATH)")
    for name, text in (
        ("add", "add the container in NETNS to NETWORK and print the result"),
        ("check", "check that the container in NETNS is attached to NETWORK as cached"),
        ("del", "remove the container in NETNS from NETWORK"),
    ):
        description = text[0].upper() + text[1:] + "." + ("" if name == "add" else _CACHED_ARGS)
        parents = [common, ifname, network]
        kwargs = {"description": description, "epilog": ENVIRONMENT, "parents": parents}
        p = command(sub, name, text, _cmd_attach, **kwargs)
        p.add_argument("netns", metavar="NETNS", help="network namespace path")
    for name, text, func in (
        ("gc", "delete every cached attachment of NETWORK, then send GC to its plugins", _cmd_gc),
        ("status", "ask the plugins of NETWORK whether they are ready (STATUS)", _cmd_status),
    ):
        # No --ifname: these work on the whole network, not on one attachment.
        p = command(sub, name, text, func, epilog=ENVIRONMENT, parents=[common, network])
        ignored = "accepted for cnitool compatibility, and ignored"
        p.add_argument("netns", metavar="NETNS", nargs="?", help=ignored)
    text = "check that the plugins of NETWORK exist and support its version; print its capabilities"
    description = (
        "Check that every plugin of NETWORK exists and supports the network's "
        "CNI version; print the capabilities the network declares, one per line."
    )
    where = {"epilog": ENVIRONMENT, "parents": [common, network]}
    command(sub, "validate", text, _cmd_validate, description=description, **where)
    _add_plugin_commands(sub, common)


def _add_plugin_commands(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """``version PLUGIN``, ``cache list``."""
    text = "print the CNI versions PLUGIN supports"
    description = (
        "Ask PLUGIN (found in $CNI_PATH) which CNI versions it supports; print them one per line."
    )
    where = {"epilog": ENVIRONMENT, "parents": [common]}
    p = command(sub, "version", text, _cmd_version, description=description, **where)
    p.add_argument("plugin", metavar="PLUGIN", help="plugin type, e.g. bridge")
    p = sub.add_parser(
        "cache",
        help="inspect the cache of attachments",
        description="Inspect the cache of attachments.",
        parents=[common],
    )
    cache_sub = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    p = cache_sub.add_parser(
        "list",
        help="list the cached attachments",
        description="List the cached attachments (of one container if CONTAINER_ID is "
        "given), one per line: container ID, network, interface, netns (tab-separated), "
        "after a first line '# cache directory: DIR' naming the directory listed.",
        parents=[common],
    )
    p.add_argument("container_id", metavar="CONTAINER_ID", nargs="?", default="")
    p.set_defaults(func=_cmd_cache_list)
