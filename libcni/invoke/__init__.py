"""Running plugins: the only part of libcni that starts processes.

- :class:`Exec`: the protocol the operations use to run plugins;
  :class:`AsyncExec`, one that also runs them on the event loop.
- :class:`RawExec`: the default implementation (``os.posix_spawn``, one
  process group per call, timeouts, no process left behind; ``aexec_plugin``
  on the event loop).
- :func:`find_in_path`: locate a plugin binary in the plugin directories;
  ``DEFAULT_PLUGIN_DIRS`` (``/opt/cni/bin`` then ``/usr/lib/cni``), where
  plugins are unless told otherwise.
"""

from __future__ import annotations

from libcni.invoke._exec import RawExec
from libcni.invoke._find import DEFAULT_PLUGIN_DIRS, find_in_path
from libcni.invoke._protocol import AsyncExec, Exec

__all__ = ["DEFAULT_PLUGIN_DIRS", "AsyncExec", "Exec", "RawExec", "find_in_path"]
