"""The error of the command line's input, shared by the CLI and the demo (no import circle)."""

from __future__ import annotations

__all__ = ["CLIError"]


class CLIError(Exception):
    """A problem with the command line's input (environment, arguments): exit status 1."""
