"""Test aids for code that uses libcni: run the operations without plugin binaries.

:class:`MockExec` is an executor (the ``exec=`` argument of
:class:`~libcni.CNIConfig` and :class:`~libcni.aio.AsyncCNIConfig`) that starts no
process: for every plugin run it records a :class:`PluginCall` and asks a
function of yours what the plugin does. Everything else is the real library:
the configuration, the order of the plugins, ``prevResult``, the cache, the
locks, the errors (examples: docs/testing.rst).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from .errors import ConfigError, DecodeError, PluginError
from .types import Result
from .version import ALL, CURRENT

__all__ = ["MockExec", "PluginCall"]

#: What a handler may return: a result for ADD (a :class:`~libcni.types.Result`, its
#: JSON object as a ``dict``, or the raw bytes a plugin would print), ``None``
#: for the other commands (or for ADD: see :class:`MockExec`).
Reply = Result | Mapping[str, Any] | bytes | str | None
Handler = Callable[["PluginCall"], "Reply | Awaitable[Reply]"]

_ALL_VERSIONS = list(ALL)


@attrs.frozen
class PluginCall:
    """One plugin run, as the plugin would have seen it.

    ``plugin`` is the plugin type, ``command`` the ``CNI_COMMAND``, ``stdin``
    the request decoded from JSON, ``env`` the ``CNI_*`` variables of the call
    and ``path`` the binary that would have run.
    """

    plugin: str
    command: str
    stdin: Any
    env: dict[str, str]
    path: str

    @property
    def container_id(self) -> str:
        """``CNI_CONTAINERID`` (empty for GC, STATUS and VERSION)."""
        return self.env.get("CNI_CONTAINERID", "")

    @property
    def ifname(self) -> str:
        """``CNI_IFNAME`` (empty for GC, STATUS and VERSION)."""
        return self.env.get("CNI_IFNAME", "")

    @property
    def netns(self) -> str:
        """``CNI_NETNS`` (empty for GC, STATUS and VERSION)."""
        return self.env.get("CNI_NETNS", "")


class MockExec:
    """An executor that runs no process: ``handler(call)`` plays every plugin.

    For each plugin run the call is appended to :attr:`calls` and ``handler``
    is called with it (a coroutine function works with ``AsyncCNIConfig``).
    The handler returns:

    - for ADD, the plugin's result: a :class:`~libcni.types.Result`, a ``dict``
      (its JSON object) or ``bytes``; ``None`` means "pass the previous
      result on", as a plugin in the middle of a chain does (the first plugin
      then returns an empty result of the configuration's version);
    - ``None`` for CHECK, DEL, GC and STATUS (success);
    - for VERSION, ``None`` (every version is supported) or a reply;
    - or it raises :class:`~libcni.errors.PluginError`, which the caller receives
      with its context filled in as for a real plugin (``plugin``,
      ``command``, ``network``, ``container_id``; ``exit_code`` 1 unless the
      handler set ``exit_code`` or ``signal``).

    Without a handler every plugin succeeds. :meth:`find_in_path` finds every
    plugin type (in the first plugin directory), refusing the names the real
    search refuses (empty, ``/``, ``.``, ``..``). Thread-safe as long as the
    handler is.
    """

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler = handler
        #: Every plugin run, in the order they happened.
        self.calls: list[PluginCall] = []

    def __repr__(self) -> str:
        return f"MockExec(handler={self.handler!r}, calls={len(self.calls)})"

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        """A plausible path for ``plugin``: ``<first directory>/<plugin>``."""
        if not plugin:
            raise ConfigError("plugin name is empty")
        if "/" in plugin or "\0" in plugin or plugin in (".", ".."):
            raise ConfigError("invalid plugin name", plugin)
        if isinstance(paths, str):
            paths = [paths]
        dirs = [d for d in paths if d]
        if not dirs:
            raise ConfigError("no plugin directories given", f"looking for plugin {plugin!r}")
        return os.path.join(dirs[0], plugin)

    def _call(self, path: str, stdin: bytes, env: Mapping[str, str]) -> PluginCall:
        try:
            request = json.loads(stdin)
        except ValueError as e:  # libcni always sends JSON: a bug if not
            raise DecodeError("MockExec: the request is not JSON", str(e)) from None
        cni_env = {k: v for k, v in env.items() if k.startswith("CNI_")}
        call = PluginCall(
            os.path.basename(path), env.get("CNI_COMMAND", ""), request, cni_env, path
        )
        self.calls.append(call)
        return call

    def exec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        """Record the call, ask the handler, return what the plugin would have printed."""
        call = self._call(path, stdin, env)
        try:
            reply = self.handler(call) if self.handler is not None else None
            if inspect.isawaitable(reply):
                if inspect.iscoroutine(reply):
                    reply.close()  # never awaited: do not let Python warn about it
                raise TypeError(
                    "MockExec: the handler returned an awaitable; "
                    "a coroutine handler works with AsyncCNIConfig only"
                )
        except PluginError as e:
            raise _as_plugin_failure(e, call) from None
        return _output(call, reply)

    async def aexec_plugin(
        self, path: str, stdin: bytes, env: Mapping[str, str], timeout: float | None
    ) -> bytes:
        """:meth:`exec_plugin` as a coroutine; the handler may be a coroutine function."""
        call = self._call(path, stdin, env)
        try:
            reply = self.handler(call) if self.handler is not None else None
            if inspect.isawaitable(reply):
                reply = await reply
        except PluginError as e:
            raise _as_plugin_failure(e, call) from None
        return _output(call, reply)


def _as_plugin_failure(error: PluginError, call: PluginCall) -> PluginError:
    """Give a handler's error what a real plugin failure carries."""
    error.plugin = error.plugin or call.plugin
    if error.exit_code is None and error.signal is None:
        error.exit_code = 1
    return error


def _output(call: PluginCall, reply: Reply) -> bytes:
    if reply is None:
        if call.command == "VERSION":
            return json.dumps({"cniVersion": CURRENT, "supportedVersions": _ALL_VERSIONS}).encode()
        if call.command != "ADD":
            return b""
        request = call.stdin if isinstance(call.stdin, dict) else {}
        prev = request.get("prevResult")
        if isinstance(prev, dict):
            return json.dumps(prev).encode()
        return json.dumps({"cniVersion": request.get("cniVersion", "")}).encode()
    if isinstance(reply, Result):
        return reply.to_json().encode()
    if isinstance(reply, Mapping):
        return json.dumps(dict(reply)).encode()
    if isinstance(reply, str):
        return reply.encode()
    if isinstance(reply, (bytes, bytearray, memoryview)):
        return bytes(reply)
    raise TypeError(
        f"MockExec: the handler returned {type(reply).__name__}; expected a Result, "
        "a dict, bytes or None"
    )
