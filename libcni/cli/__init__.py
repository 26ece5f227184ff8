"""The ``libcni`` command line, compatible with ``cnitool`` (docs/cli.rst, ``libcni --help``).

The only part of libcni that prints. Errors are one line on standard error,
``libcni: <message>``, exit status 1; usage errors exit with status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from .. import __version__
from ..errors import CNIError, PluginError, PluginNotFoundError
from . import _cni, _manager
from ._common import (
    DEFAULT_CNI_PATH,
    DEFAULT_IFNAME,
    DEFAULT_NETCONFPATH,
    PROG,
    CLIError,
    Subparsers,
    add_common,
    command,
    container_id_for_netns,
    netns_path,
    parse_cap_args,
    parse_cni_args,
)

__all__ = ["DEFAULT_CNI_PATH", "DEFAULT_IFNAME", "DEFAULT_NETCONFPATH", "CLIError", "build_parser"]
__all__ += ["container_id_for_netns", "main", "netns_path", "parse_cap_args", "parse_cni_args"]

log = logging.getLogger("libcni")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``libcni`` command (one sub-command per operation)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run CNI plugins on a network namespace (a cnitool-compatible command line "
        "of the libcni Python library).",
        epilog=_cni.ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common(parser, None)
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {__version__}", help="print the version"
    )
    # SUPPRESS: the sub-parser's defaults must not reset options given before it.
    common = argparse.ArgumentParser(add_help=False)
    add_common(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _cni.add_commands(sub, common)
    _manager.add_commands(sub, common)
    _add_demo_command(sub)
    return parser


#: What ``libcni demo`` says: the demo is a script of the source checkout.
_DEMO_POINTER = (
    "the demo is not part of the installed package: in a checkout of libcni's sources, "
    "run ./scripts/demo.sh as root (it uses real network namespaces and the reference plugins)"
)


def _cmd_demo(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    sys.stderr.write(f"{PROG} demo: {_DEMO_POINTER}\n")
    return 1


def _add_demo_command(sub: Subparsers) -> None:
    """``demo``: where the demo is (``scripts/demo.sh`` of the source checkout)."""
    text = "where to find the demo (./scripts/demo.sh of the source checkout)"
    command(
        sub, "demo", text, _cmd_demo, description=_DEMO_POINTER[0].upper() + _DEMO_POINTER[1:] + "."
    )


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


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    if not verbose:
        # A failing plugin's stderr (libcni.invoke's warnings): with -v only.
        handler.addFilter(lambda record: not record.name.startswith("libcni.invoke"))
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
