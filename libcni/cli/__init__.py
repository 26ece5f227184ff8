"""The ``libcni`` command line, compatible with ``cnitool``.

::

    libcni add|check|del NETWORK NETNS [--ifname NAME]
    libcni gc|status NETWORK [NETNS]
    libcni validate NETWORK
    libcni version PLUGIN
    libcni cache list [CONTAINER_ID]
    libcni up CONTAINER_ID NETNS [--network NAME[=IFNAME]]... [--parallel]
    libcni down CONTAINER_ID [NETNS]
    libcni show CONTAINER_ID
    libcni list
    libcni forget CONTAINER_ID [NETWORK]...
    libcni ready
    libcni demo
    libcni --version

The environment is read as ``cnitool`` reads it: ``NETCONFPATH`` (default
``/etc/cni/net.d``), ``CNI_PATH`` (``:``-separated, default
``/opt/cni/bin:/usr/lib/cni``),
``CNI_ARGS`` (``K=V;K2=V2``), ``CAP_ARGS`` (a JSON object), ``CNI_IFNAME``
(default ``eth0`` when unset; set but empty is refused, as ``cnitool``
refuses it), plus ``CNI_CACHE_DIR`` (default: :func:`libcni.cache.default_cache_dir`). The
container ID is derived from the network namespace path exactly as ``cnitool``
derives it, so both tools find the same cache entries.

This package is the only part of libcni that prints.
Errors are one line on standard error, ``libcni: <message>``, exit status 1;
usage errors exit with status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .. import __version__
from .._json import strict_loads
from ..api import CNIConfig
from ..cache import default_cache_dir
from ..conf import NetworkConfigList, load_conf_list
from ..errors import CNIError, PluginError, PluginNotFoundError
from ..invoke import DEFAULT_PLUGIN_DIRS
from ..values import RuntimeConf
from ._errors import CLIError

__all__ = [
    "DEFAULT_CNI_PATH",
    "DEFAULT_IFNAME",
    "DEFAULT_NETCONFPATH",
    "CLIError",
    "build_parser",
    "container_id_for_netns",
    "main",
    "netns_path",
    "parse_cap_args",
    "parse_cni_args",
]

PROG = "libcni"
DEFAULT_NETCONFPATH = "/etc/cni/net.d"
DEFAULT_CNI_PATH = ":".join(DEFAULT_PLUGIN_DIRS)
DEFAULT_IFNAME = "eth0"

log = logging.getLogger("libcni")


# -- what cnitool derives from its environment -------------------------------


def netns_path(netns: str) -> str:
    """The absolute, cleaned network namespace path, as Go's ``filepath.Abs`` makes it.

    >>> netns_path("/var/run/netns//x/")
    '/var/run/netns/x'
    """
    path = os.path.abspath(netns)
    if path.startswith("//"):
        # POSIX normpath keeps a leading "//"; Go's filepath.Clean does not.
        path = "/" + path.lstrip("/")
    return path


def container_id_for_netns(netns: str) -> str:
    """The container ID ``cnitool`` uses for a namespace path.

    ``"cnitool-"`` followed by the first 20 hex digits (10 bytes) of the
    SHA-512 of the absolute namespace path.

    >>> container_id_for_netns("/var/run/netns/test")
    'cnitool-7b8a61d5d8e94d07cbe4'
    """
    digest = hashlib.sha512(netns_path(netns).encode()).hexdigest()
    return "cnitool-" + digest[:20]


def parse_cni_args(text: str) -> list[tuple[str, str]]:
    """Parse ``CNI_ARGS`` (``K=V;K2=V2``) into pairs, as strictly as ``cnitool`` does.

    Every ``;``-separated pair must be ``KEY=VALUE`` with exactly one ``=``
    and neither side empty; an empty text gives no pairs.

    >>> parse_cni_args("IgnoreUnknown=1;K8S_POD_NAME=web")
    [('IgnoreUnknown', '1'), ('K8S_POD_NAME', 'web')]
    """
    if not text:
        return []
    pairs: list[tuple[str, str]] = []
    for pair in text.split(";"):
        kv = pair.split("=")
        if len(kv) != 2 or not kv[0] or not kv[1]:
            raise CLIError(
                f"invalid CNI_ARGS pair {pair!r} in {text!r}: expected KEY=VALUE pairs "
                "separated by ';' (e.g. CNI_ARGS='IgnoreUnknown=1;K8S_POD_NAME=web')"
            )
        pairs.append((kv[0], kv[1]))
    return pairs


def parse_cap_args(text: str) -> dict[str, Any]:
    """Parse ``CAP_ARGS``, a JSON object of capability arguments (empty text: ``{}``).

    >>> parse_cap_args('{"portMappings": []}')
    {'portMappings': []}
    """
    if not text:
        return {}
    try:
        value = strict_loads(text)
    except (ValueError, RecursionError) as e:
        raise CLIError(f"CAP_ARGS is not valid JSON ({e}): {_excerpt(text)}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CLIError(
            f"CAP_ARGS must be a JSON object of capability arguments, not {type(value).__name__}: "
            f"{_excerpt(text)}"
        )
    return value


def _excerpt(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _plugin_path(environ: Mapping[str, str]) -> list[str]:
    value = environ.get("CNI_PATH", "")
    dirs = [d for d in value.split(":") if d]
    return dirs or list(DEFAULT_PLUGIN_DIRS)


def _cache_dir(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    return getattr(args, "cache_dir", None) or environ.get("CNI_CACHE_DIR") or default_cache_dir()


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
    return CNIConfig(
        _plugin_path(environ),
        cache_dir=_cache_dir(args, environ),
        timeout=getattr(args, "timeout", None),
    )


def _network(args: argparse.Namespace, environ: Mapping[str, str]) -> NetworkConfigList:
    netdir = environ.get("NETCONFPATH") or DEFAULT_NETCONFPATH
    return load_conf_list(netdir, args.network)


def _runtime_conf(args: argparse.Namespace, environ: Mapping[str, str]) -> RuntimeConf:
    # Same order as cnitool: capability args, then CNI_ARGS, then the names.
    cap_args = parse_cap_args(environ.get("CAP_ARGS", ""))
    cni_args = parse_cni_args(environ.get("CNI_ARGS", ""))
    netns = netns_path(args.netns)
    return RuntimeConf(
        container_id=container_id_for_netns(netns),
        netns=netns,
        ifname=_ifname(args, environ),
        args=cni_args,
        capability_args=cap_args,
    )


# -- the commands --------------------------------------------------------------


def _cmd_attach(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    net = _network(args, environ)
    rt = _runtime_conf(args, environ)
    cni = _cni(args, environ)
    if args.command == "add":
        result = cni.add_network_list(net, rt)
        out.write(result.to_json(indent=4) + "\n")
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
    net = _network(args, environ)
    _cni(args, environ).gc_network_list(net, None)
    return 0


def _cmd_status(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    net = _network(args, environ)
    _cni(args, environ).get_status_network_list(net)
    return 0


def _cmd_validate(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    net = _network(args, environ)
    for capability in _cni(args, environ).validate_network_list(net):
        out.write(capability + "\n")
    return 0


def _cmd_version(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    info = _cni(args, environ).get_version_info(args.plugin)
    for version in info.supported_versions:
        out.write(version + "\n")
    return 0


def _cmd_cache_list(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    out.write(f"# cache directory: {_cache_dir(args, environ)}\n")
    for att in _cni(args, environ).get_cached_attachments(args.container_id or ""):
        out.write(f"{att.container_id}\t{att.network}\t{att.ifname}\t{att.netns or '-'}\n")
    return 0


# -- the networks of a container (NetworkManager) -----------------------------


def _manager(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    from ..manager import NetworkManager

    return NetworkManager(
        environ.get("NETCONFPATH") or DEFAULT_NETCONFPATH,
        _plugin_path(environ),
        cache_dir=_cache_dir(args, environ),
        timeout=getattr(args, "timeout", None),
    )


def _network_requests(values: Sequence[str]) -> list[Any] | None:
    from ..manager import NetworkRequest

    if not values:
        return None
    out = []
    for value in values:
        name, eq, ifname = value.partition("=")
        if not name or (eq and not ifname):
            raise CLIError(f"invalid --network {value!r}: expected NAME or NAME=IFNAME")
        out.append(NetworkRequest(name, ifname or None))
    return out


def _print_view(view: Any, out: TextIO) -> None:
    import json

    out.write(json.dumps(view.to_dict(), indent=4) + "\n")


def _cmd_up(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    cap_args = parse_cap_args(environ.get("CAP_ARGS", ""))
    cni_args = parse_cni_args(environ.get("CNI_ARGS", ""))
    view = _manager(args, environ).setup(
        args.container_id,
        netns_path(args.netns),
        networks=_network_requests(args.networks),
        args=cni_args,
        capability_args=cap_args,
        parallel=args.parallel,
    )
    _print_view(view, out)
    return 0


def _cmd_down(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    # Without NETNS each DEL uses the netns cached for its attachment.
    netns = netns_path(args.netns) if args.netns else ""
    manager = _manager(args, environ)
    view = manager.inspect(args.container_id)
    manager.teardown(args.container_id, netns)
    from ..manager import attachment_order

    held = [(a.network, a.ifname, "") for a in view.attachments]
    held += [(network, ifname, ", in progress") for network, ifname in view.incomplete]
    held.sort(key=lambda h: attachment_order(h[1], h[0]), reverse=True)
    if held:
        done = ", ".join(f"{network} ({ifname}{state})" for network, ifname, state in held)
        out.write(f"detached {args.container_id} from {done}\n")
    else:
        out.write(f"nothing to detach: no cached attachment of {args.container_id}\n")
    return 0


def _cmd_forget(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    import json

    dropped = _manager(args, environ).forget(args.container_id, networks=args.networks or None)
    if not dropped:
        out.write(f"nothing to forget: no cached attachment of {args.container_id}\n")
    for att in dropped:
        state = "" if att.complete else ", in progress"
        out.write(
            f"forgot {att.container_id} on network {att.network} ({att.ifname}{state}), "
            "without DEL; what its plugins made stays:\n"
            f"  netns: {att.netns or '-'}\n"
            f"  args: {';'.join(f'{k}={v}' for k, v in att.cni_args) or '-'}\n"
            f"  capability args: {json.dumps(att.capability_args) if att.capability_args else '-'}\n"
            f"  plugins: {_plugin_types(att.config)}\n"
        )
    return 0


def _plugin_types(config: bytes) -> str:
    """The plugins of a cached configuration, with their IPAM (``bridge (ipam host-local)``)."""
    try:
        obj = strict_loads(config)
        plugins = obj.get("plugins", [obj])
        return ", ".join(
            str(p.get("type"))
            + (f" (ipam {p['ipam']['type']})" if "type" in p.get("ipam", {}) else "")
            for p in plugins
        )
    except (ValueError, TypeError, AttributeError, KeyError):
        return "(the cached configuration cannot be read)"


def _cmd_show(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    view = _manager(args, environ).inspect(args.container_id)
    if not view.attachments and not view.incomplete:
        raise CLIError(f"nothing is cached for container {args.container_id!r}")
    _print_view(view, out)
    return 0


def _cmd_list(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    out.writelines(f"{cid}\n" for cid in _manager(args, environ).containers())
    return 0


def _cmd_ready(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    _manager(args, environ).status()
    out.write("ready\n")
    return 0


def _cmd_demo(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    sys.stderr.write(f"{PROG} demo: {_DEMO_POINTER}\n")
    return 1


# -- the parser ----------------------------------------------------------------


_ENVIRONMENT = f"""\
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

#: The environment of the commands of the network manager (up, down, show, list, ready):
#: they take the container ID as an argument, and name the interfaces themselves.
_MANAGER_ENVIRONMENT = f"""\
environment:
  NETCONFPATH    directory of the network configurations (default /etc/cni/net.d)
  CNI_PATH       ':'-separated plugin directories (default {DEFAULT_CNI_PATH})
  CNI_ARGS       arguments for the plugins, KEY=VALUE pairs separated by ';' (up)
  CAP_ARGS       capability arguments, a JSON object (e.g. {{"portMappings": [...]}}) (up)
  CNI_CACHE_DIR  cache directory (--cache-dir wins; default /var/lib/cni as root,
                 else the per-user state directory, e.g. ~/.local/state/cni)
"""

_CONTAINER_ID_HELP = (
    "the container's ID, as the runtime names it (letters, digits, '_', '.', '-'); "
    "the cache keeps its attachments under it"
)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _add_common(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=default,
        help="cache directory (default: $CNI_CACHE_DIR, else /var/lib/cni as root and "
        "the per-user state directory otherwise)",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive_float,
        default=default,
        help="time limit of the whole operation (default: none)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log what the library does to stderr: each plugin run (plugin, command, "
        "network, container, duration, exit status) and the plugins' stderr",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``libcni`` command (one sub-command per operation)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run CNI plugins on a network namespace (a cnitool-compatible command line "
        "of the libcni Python library).",
        epilog=_ENVIRONMENT,
        formatter_class=_FORMATTER,
    )
    _add_common(parser, None)
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {__version__}", help="print the version"
    )
    # Options given after the sub-command must not be reset by the sub-parser's
    # defaults, hence SUPPRESS there.
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_attach_commands(sub, common)
    _add_network_commands(sub, common)
    _add_cache_commands(sub, common)
    _add_manager_commands(sub, common)
    _add_view_commands(sub, common)
    _add_demo_command(sub)
    return parser


_FORMATTER = argparse.RawDescriptionHelpFormatter

if TYPE_CHECKING:  # what ``add_subparsers`` returns
    from typing import TypeAlias

    _Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_attach_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """The cnitool commands on one attachment: ``add``, ``check``, ``del``."""
    formatter = _FORMATTER
    ifname = argparse.ArgumentParser(add_help=False)
    ifname.add_argument(
        "-i",
        "--ifname",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="interface name in the container (default: $CNI_IFNAME or eth0)",
    )
    attach_help = {
        "add": "add the container in NETNS to NETWORK and print the result",
        "check": "check that the container in NETNS is attached to NETWORK as cached",
        "del": "remove the container in NETNS from NETWORK",
    }
    cached_args = (
        " Without CNI_ARGS and CAP_ARGS, the arguments and capability arguments cached "
        "at ADD are used."
    )
    for name, text in attach_help.items():
        p = sub.add_parser(
            name,
            help=text,
            description=text[0].upper() + text[1:] + "." + ("" if name == "add" else cached_args),
            epilog=_ENVIRONMENT,
            formatter_class=formatter,
            parents=[common, ifname],
        )
        p.add_argument("network", metavar="NETWORK", help="network name (in $NETCONFPATH)")
        p.add_argument("netns", metavar="NETNS", help="network namespace path")
        p.set_defaults(func=_cmd_attach)


def _add_network_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """The cnitool commands on a network or a plugin: ``gc``, ``status``, ``validate``,
    ``version``."""
    formatter = _FORMATTER
    for name, text, func in (
        (
            "gc",
            "delete every cached attachment of NETWORK, then send GC to its plugins",
            _cmd_gc,
        ),
        ("status", "ask the plugins of NETWORK whether they are ready (STATUS)", _cmd_status),
    ):
        # No --ifname: these work on the whole network, not on one attachment.
        p = sub.add_parser(
            name,
            help=text,
            description=text[0].upper() + text[1:] + ".",
            epilog=_ENVIRONMENT,
            formatter_class=formatter,
            parents=[common],
        )
        p.add_argument("network", metavar="NETWORK", help="network name (in $NETCONFPATH)")
        p.add_argument(
            "netns",
            metavar="NETNS",
            nargs="?",
            help="accepted for cnitool compatibility, and ignored",
        )
        p.set_defaults(func=func)

    p = sub.add_parser(
        "validate",
        help="check that the plugins of NETWORK exist and support its version; "
        "print its capabilities",
        description="Check that every plugin of NETWORK exists and supports the network's "
        "CNI version; print the capabilities the network declares, one per line.",
        epilog=_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.add_argument("network", metavar="NETWORK", help="network name (in $NETCONFPATH)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser(
        "version",
        help="print the CNI versions PLUGIN supports",
        description="Ask PLUGIN (found in $CNI_PATH) which CNI versions it supports; "
        "print them one per line.",
        epilog=_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.add_argument("plugin", metavar="PLUGIN", help="plugin type, e.g. bridge")
    p.set_defaults(func=_cmd_version)


def _add_cache_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``cache list``."""
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


def _add_manager_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """The network manager's commands that attach and detach: ``up``, ``down``, ``forget``."""
    formatter = _FORMATTER
    p = sub.add_parser(
        "up",
        help="attach a container to loopback and its networks (NetworkManager.setup); "
        "print the merged view",
        description="Attach the container CONTAINER_ID, whose network namespace is NETNS, "
        "to the loopback network and to the networks given with --network (default: the "
        "first usable network of $NETCONFPATH), rolling everything back on failure; print "
        "the merged view as JSON. The interfaces are lo, then eth0, eth1... unless "
        "--network names them.",
        epilog=_MANAGER_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.add_argument("container_id", metavar="CONTAINER_ID", help=_CONTAINER_ID_HELP)
    p.add_argument("netns", metavar="NETNS", help="network namespace path")
    p.add_argument(
        "-n",
        "--network",
        dest="networks",
        metavar="NAME[=IFNAME]",
        action="append",
        default=[],
        help="a network to attach, optionally with its interface name (repeatable)",
    )
    p.add_argument("--parallel", action="store_true", help="attach the networks at the same time")
    p.set_defaults(func=_cmd_up)

    p = sub.add_parser(
        "down",
        help="detach a container from every cached network (NetworkManager.teardown)",
        description="Detach CONTAINER_ID from every network it is cached on (also those "
        "whose attach never finished), with the configuration, arguments and capability "
        "arguments cached at attach time and, without NETNS, the cached network namespace; "
        "last attached first; print what was detached.",
        epilog=_MANAGER_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.add_argument("container_id", metavar="CONTAINER_ID", help=_CONTAINER_ID_HELP)
    p.add_argument("netns", metavar="NETNS", nargs="?", default="", help="network namespace path")
    p.set_defaults(func=_cmd_down)

    p = sub.add_parser(
        "forget",
        help="drop a container's cached attachments without DEL (NetworkManager.forget)",
        description="Drop from the cache the attachments of CONTAINER_ID (on the NETWORKs "
        "given, or all), complete or in progress, without running any plugin: the way out "
        "for an attachment whose DEL fails every time. Print what was dropped (network, "
        "interface, netns, args, capability args, plugins), to remove by hand what its "
        "plugins made.",
        epilog=_MANAGER_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.add_argument("container_id", metavar="CONTAINER_ID", help=_CONTAINER_ID_HELP)
    p.add_argument("networks", metavar="NETWORK", nargs="*", help="only these networks")
    p.set_defaults(func=_cmd_forget)


def _add_view_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """The network manager's commands that change nothing: ``show``, ``list``, ``ready``."""
    formatter = _FORMATTER
    p = sub.add_parser(
        "show",
        help="print the merged view of a container's networks, from the cache",
        description="Print the networks of CONTAINER_ID as JSON (attachments, interfaces, "
        "host-side interfaces, IPs, gateways, routes, DNS, and the networks whose attach "
        "never finished), read from the cache; nothing runs. Exit 1 if nothing is cached "
        "for it.",
        epilog=_MANAGER_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.add_argument("container_id", metavar="CONTAINER_ID", help=_CONTAINER_ID_HELP)
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser(
        "list",
        help="print every container the cache holds attachments of (NetworkManager.containers)",
        description="Print the ID of every container with an attachment in the cache "
        "(complete, or whose attach never finished), one a line, sorted; nothing runs. "
        "What a restarted runtime compares with the containers it knows before 'gc'.",
        epilog=_MANAGER_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser(
        "ready",
        help="say whether containers can be attached now (NetworkManager.status)",
        description="Print 'ready' if the default network of $NETCONFPATH is usable and its "
        "plugins are ready; otherwise say why and exit 1.",
        epilog=_MANAGER_ENVIRONMENT,
        formatter_class=formatter,
        parents=[common],
    )
    p.set_defaults(func=_cmd_ready)


#: What ``libcni demo`` says: the demo is a script of the source checkout.
_DEMO_POINTER = (
    "the demo is not part of the installed package: in a checkout of libcni's sources, "
    "run ./scripts/demo.sh as root (it uses real network namespaces and the reference plugins)"
)


def _add_demo_command(sub: _Subparsers) -> None:
    """``demo``: where the demo is (``scripts/demo.sh`` of the source checkout)."""
    p = sub.add_parser(
        "demo",
        help="where to find the demo (./scripts/demo.sh of the source checkout)",
        description=_DEMO_POINTER[0].upper() + _DEMO_POINTER[1:] + ".",
        formatter_class=_FORMATTER,
    )
    p.set_defaults(func=_cmd_demo)


# -- main ------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or text


#: What to do when a plugin is not found (appended to the error line).
_NOT_FOUND_HINT = (
    " (is it installed? Debian: apt-get install containernetworking-plugins, into "
    "/usr/lib/cni; else set CNI_PATH to the directories that hold your plugins)"
)


def _describe(error: BaseException) -> str:
    if isinstance(error, PluginError):
        return error.describe()
    if isinstance(error, PluginNotFoundError) or (
        isinstance(error, CNIError) and "failed to find plugin" in str(error)
    ):
        # Also a network skipped for a missing plugin (NotReadyError, ConfigError).
        return str(error) + _NOT_FOUND_HINT
    if isinstance(error, (CNIError, CLIError)):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    return f"{type(error).__name__}: {error}"


def _quiet_plugins(record: logging.LogRecord) -> bool:
    # A failing plugin's stderr is logged as warnings by libcni.invoke; the error
    # line already carries what the plugin reported, so show its stderr with -v only.
    return not record.name.startswith("libcni.invoke")


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    if not verbose:
        handler.addFilter(_quiet_plugins)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.WARNING)
    log.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``libcni`` command line with ``argv`` (default ``sys.argv[1:]``).

    Returns the exit status: 0 on success, 1 on an error (reported as one
    ``libcni: <message>`` line on standard error), 2 on a usage error.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as e:  # --help, or a usage error (already reported)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    environ = os.environ
    saved = (list(log.handlers), log.level, log.propagate)
    _setup_logging(bool(getattr(args, "verbose", False)))
    try:
        status: int = args.func(args, environ, sys.stdout)
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `libcni cache list | head`): not an error of ours.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except Exception as e:  # every error becomes one line, never a traceback (-v included)
        sys.stderr.write(f"{PROG}: {_one_line(_describe(e))}\n")
        return 1
    finally:
        for h in list(log.handlers):
            if h not in saved[0]:
                log.removeHandler(h)
        log.setLevel(saved[1])
        log.propagate = saved[2]
