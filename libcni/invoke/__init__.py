"""Running plugins: the only part of libcni that starts processes.

- :class:`Exec`: the protocol the operations use to run plugins.
- :class:`RawExec`: the default implementation (``vfork``/``exec``, one process
  group per call, timeouts, no process left behind).
- :func:`find_in_path`: locate a plugin binary in the plugin directories.
"""

from __future__ import annotations

from libcni.invoke._find import find_in_path
from libcni.invoke._protocol import Exec
from libcni.invoke._raw import RawExec

__all__ = ["Exec", "RawExec", "find_in_path"]
