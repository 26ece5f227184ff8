"""The network manager's commands: ``up``, ``down``, ``forget``, ``show``, ``list``,
``ready``; they take the container ID as an argument, and name the interfaces themselves."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from .._json import strict_loads
from ._common import (
    DEFAULT_CNI_PATH,
    CLIError,
    Subparsers,
    cache_dir,
    command,
    netconfpath,
    netns_path,
    parse_cap_args,
    parse_cni_args,
    plugin_path,
)

_ENVIRONMENT = f"""\
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


def _manager(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    from ..manager import NetworkManager

    paths, timeout = (netconfpath(environ), plugin_path(environ)), getattr(args, "timeout", None)
    return NetworkManager(*paths, cache_dir=cache_dir(args, environ), timeout=timeout)


def _network_requests(values: Sequence[str]) -> list[Any] | None:
    from ..manager import NetworkRequest

    out = []
    for value in values:
        name, eq, ifname = value.partition("=")
        if not name or (eq and not ifname):
            raise CLIError(f"invalid --network {value!r}: expected NAME or NAME=IFNAME")
        out.append(NetworkRequest(name, ifname or None))
    return out or None


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
    from ..manager import attachment_order

    # Without NETNS each DEL uses the netns cached for its attachment.
    netns = netns_path(args.netns) if args.netns else ""
    manager = _manager(args, environ)
    view = manager.inspect(args.container_id)
    manager.teardown(args.container_id, netns)
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


#: Each command: its name, help, description and function.
_COMMANDS = (
    (
        "up",
        "attach a container to loopback and its networks (NetworkManager.setup); "
        "print the merged view",
        "Attach the container CONTAINER_ID, whose network namespace is NETNS, "
        "to the loopback network and to the networks given with --network (default: the "
        "first usable network of $NETCONFPATH), rolling everything back on failure; print "
        "the merged view as JSON. The interfaces are lo, then eth0, eth1... unless "
        "--network names them.",
        _cmd_up,
    ),
    (
        "down",
        "detach a container from every cached network (NetworkManager.teardown)",
        "Detach CONTAINER_ID from every network it is cached on (also those "
        "whose attach never finished), with the configuration, arguments and capability "
        "arguments cached at attach time and, without NETNS, the cached network namespace; "
        "last attached first; print what was detached.",
        _cmd_down,
    ),
    (
        "forget",
        "drop a container's cached attachments without DEL (NetworkManager.forget)",
        "Drop from the cache the attachments of CONTAINER_ID (on the NETWORKs "
        "given, or all), complete or in progress, without running any plugin: the way out "
        "for an attachment whose DEL fails every time. Print what was dropped (network, "
        "interface, netns, args, capability args, plugins), to remove by hand what its "
        "plugins made.",
        _cmd_forget,
    ),
    (
        "show",
        "print the merged view of a container's networks, from the cache",
        "Print the networks of CONTAINER_ID as JSON (attachments, interfaces, "
        "host-side interfaces, IPs, gateways, routes, DNS, and the networks whose attach "
        "never finished), read from the cache; nothing runs. Exit 1 if nothing is cached "
        "for it.",
        _cmd_show,
    ),
    (
        "list",
        "print every container the cache holds attachments of (NetworkManager.containers)",
        "Print the ID of every container with an attachment in the cache "
        "(complete, or whose attach never finished), one a line, sorted; nothing runs. "
        "What a restarted runtime compares with the containers it knows before 'gc'.",
        _cmd_list,
    ),
    (
        "ready",
        "say whether containers can be attached now (NetworkManager.status)",
        "Print 'ready' if the default network of $NETCONFPATH is usable and its "
        "plugins are ready; otherwise say why and exit 1.",
        _cmd_ready,
    ),
)


def add_commands(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """The parsers of the network manager's commands."""
    container = argparse.ArgumentParser(add_help=False)
    container.add_argument("container_id", metavar="CONTAINER_ID", help=_CONTAINER_ID_HELP)
    p = {}
    for name, text, description, func in _COMMANDS:
        parents = [common] if name in ("list", "ready") else [common, container]
        p[name] = command(
            sub, name, text, func, description=description, epilog=_ENVIRONMENT, parents=parents
        )
    p["up"].add_argument("netns", metavar="NETNS", help="network namespace path")
    p["up"].add_argument(
        "-n",
        "--network",
        dest="networks",
        metavar="NAME[=IFNAME]",
        action="append",
        default=[],
        help="a network to attach, optionally with its interface name (repeatable)",
    )
    p["up"].add_argument(
        "--parallel", action="store_true", help="attach the networks at the same time"
    )
    p["down"].add_argument(
        "netns", metavar="NETNS", nargs="?", default="", help="network namespace path"
    )
    p["forget"].add_argument("networks", metavar="NETWORK", nargs="*", help="only these networks")
