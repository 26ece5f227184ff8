"""What every command of the CLI shares: its error, the environment as ``cnitool`` reads it,
the common options."""

from __future__ import annotations

import argparse
import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any, TextIO, TypeAlias

from .._json import strict_loads
from ..cache import default_cache_dir
from ..invoke import DEFAULT_PLUGIN_DIRS

PROG = "libcni"
DEFAULT_NETCONFPATH = "/etc/cni/net.d"
DEFAULT_CNI_PATH = ":".join(DEFAULT_PLUGIN_DIRS)
DEFAULT_IFNAME = "eth0"

#: A command: ``(args, environ, out) -> exit status``.
Command = Callable[[argparse.Namespace, Mapping[str, str], TextIO], int]

#: What ``add_subparsers`` returns.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CLIError(Exception):
    """A problem with the command line's input (environment, arguments): exit status 1."""


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
    return "cnitool-" + hashlib.sha512(netns_path(netns).encode()).hexdigest()[:20]


def parse_cni_args(text: str) -> list[tuple[str, str]]:
    """Parse ``CNI_ARGS`` (``K=V;K2=V2``) into pairs, as strictly as ``cnitool`` does.

    Every ``;``-separated pair must be ``KEY=VALUE`` with exactly one ``=``
    and neither side empty; an empty text gives no pairs.

    >>> parse_cni_args("IgnoreUnknown=1;K8S_POD_NAME=web")
    [('IgnoreUnknown', '1'), ('K8S_POD_NAME', 'web')]
    """
    pairs: list[tuple[str, str]] = []
    for pair in text.split(";") if text else ():
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
    excerpt = repr(text if len(text) <= 80 else text[:80] + "...")
    try:
        value = strict_loads(text) if text else None
    except (ValueError, RecursionError) as e:
        raise CLIError(f"CAP_ARGS is not valid JSON ({e}): {excerpt}") from None
    if value is not None and not isinstance(value, dict):
        raise CLIError(
            f"CAP_ARGS must be a JSON object of capability arguments, not {type(value).__name__}: "
            f"{excerpt}"
        )
    return value or {}


def plugin_path(environ: Mapping[str, str]) -> list[str]:
    """``CNI_PATH``'s directories (unset or empty: the default ones)."""
    return [d for d in environ.get("CNI_PATH", "").split(":") if d] or list(DEFAULT_PLUGIN_DIRS)


def cache_dir(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """``--cache-dir``, else ``CNI_CACHE_DIR``, else the default cache directory."""
    return getattr(args, "cache_dir", None) or environ.get("CNI_CACHE_DIR") or default_cache_dir()


def netconfpath(environ: Mapping[str, str]) -> str:
    """The directory of the network configurations."""
    return environ.get("NETCONFPATH") or DEFAULT_NETCONFPATH


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def add_common(parser: argparse.ArgumentParser, default: Any) -> None:
    """The options of every command: ``--cache-dir``, ``--timeout``, ``--verbose``."""
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


def command(
    sub: Subparsers, name: str, text: str, func: Command, **kwargs: Any
) -> argparse.ArgumentParser:
    """The sub-parser of command ``name`` (``text``: its help) that runs ``func``."""
    kwargs.setdefault("description", text[0].upper() + text[1:] + ".")
    p = sub.add_parser(
        name, help=text, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
    )
    p.set_defaults(func=func)
    return p
