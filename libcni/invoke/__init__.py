"""Running plugins: the only part of libcni that starts processes.

- :class:`Exec`: the protocol the operations use to run plugins.
- :class:`RawExec`: the default implementation (``vfork``/``exec``, one process
  group per call, timeouts, no process left behind).
- :func:`find_in_path`: locate a plugin binary in the plugin directories;
  ``DEFAULT_PLUGIN_DIRS`` (``/opt/cni/bin`` then ``/usr/lib/cni``), where
  plugins are unless told otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from libcni.invoke._find import DEFAULT_PLUGIN_DIRS, find_in_path
from libcni.invoke._protocol import Exec
from libcni.invoke._raw import RawExec

if TYPE_CHECKING:
    from libcni.invoke._loop import operation_ended as operation_ended
    from libcni.invoke._loop import operation_started as operation_started
    from libcni.invoke._loop import step as step

__all__ = ["DEFAULT_PLUGIN_DIRS", "Exec", "RawExec", "find_in_path"]

#: The async loop's turns (``_loop``), for the async drivers: imported at first use, as
#: ``import libcni`` imports no asyncio.
_LOOP_NAMES = ("operation_ended", "operation_started", "step")


def __getattr__(name: str) -> Any:
    if name in _LOOP_NAMES:
        from libcni.invoke import _loop

        value = getattr(_loop, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'libcni.invoke' has no attribute {name!r}")
