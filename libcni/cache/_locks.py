"""The three kinds of lock of the cache, files of ``<dir>/locks/``.

An attachment's lock (``locks/<network>-<containerID>-<ifname>``), a
network's (``locks/networks/<network>``: shared for ADD and DEL, exclusive
for GC) and a container's (``locks/containers/<containerID>``, the network
manager's). How a lock is taken and its file removed safely is
:mod:`._lock`'s; :class:`Locks`, the part of :class:`~._store.ResultCache`
that hands them out, says which file each one is. Each ``try_`` method takes
its lock without waiting: ``None`` if it is busy (for async callers).
"""

from __future__ import annotations

import os

from .._deadline import lock_timeout
from ._fs import attachment_name, check_name, fit_name
from ._layout import CacheDirs
from ._lock import CacheLock, acquire

__all__ = ["Locks"]


class Locks:
    """Take the locks of attachments, networks and containers (part of ``ResultCache``)."""

    def __init__(self, dirs: CacheDirs) -> None:
        self.dirs = dirs
        self.results_dir = dirs.results_dir
        self.records_dir = dirs.records_dir
        self.locks_dir = dirs.locks_dir

    def lock(
        self, network: str, container_id: str, ifname: str, *, timeout: float | None = None
    ) -> CacheLock:
        """Take the exclusive lock of one attachment, waiting at most ``timeout`` seconds.

        ``None`` or ``math.inf``: as long as it takes; else ``LockTimeoutError``
        when it runs out. It excludes other threads and processes; different
        attachments never block each other. Its file goes on release if the
        attachment has no entry.
        """
        lk = self._attachment(network, container_id, ifname, timeout)
        if lk is None:
            what = f"network {network!r}, container {container_id!r}, interface {ifname!r}"
            path = self.attachment_lock_path(network, container_id, ifname)
            raise lock_timeout(f"attachment ({what})", path, timeout)
        return lk

    def try_lock(self, network: str, container_id: str, ifname: str) -> CacheLock | None:
        """:meth:`lock` without waiting: ``None`` if it is busy (for async callers)."""
        return self._attachment(network, container_id, ifname, 0)

    def _attachment(
        self, network: str, container_id: str, ifname: str, timeout: float | None
    ) -> CacheLock | None:
        name = attachment_name(network, container_id, ifname)
        entry = os.path.join(self.results_dir, name)
        return acquire(
            self.locks_dir,
            name,
            exclusive=True,
            timeout=timeout,
            entry=entry,
            dirs=self.dirs.lock_dir,
        )

    def network_lock(
        self, network: str, exclusive: bool, *, timeout: float | None = None
    ) -> CacheLock:
        """Take a network's lock (``locks/networks/<network>``), waiting at most ``timeout``
        seconds: shared for ADD and DEL, exclusive for GC."""
        lk = self._network(network, exclusive, timeout)
        if lk is None:
            raise lock_timeout(f"network {network!r}", self.network_lock_path(network), timeout)
        return lk

    def try_network_lock(self, network: str, exclusive: bool) -> CacheLock | None:
        """:meth:`network_lock` without waiting: ``None`` if it is busy (for async callers)."""
        return self._network(network, exclusive, 0)

    def _network(self, network: str, exclusive: bool, timeout: float | None) -> CacheLock | None:
        name = fit_name(check_name(network, "network name"), "network name")
        return acquire(
            self.locks_dir,
            name,
            subdir="networks",
            exclusive=exclusive,
            timeout=timeout,
            dirs=lambda action: self.dirs.lock_dir(action, "networks"),
        )

    def container_lock(self, container_id: str, timeout: float | None = None) -> CacheLock:
        """Take a container's lock (``locks/containers/<containerID>``, the network manager's
        across a setup, teardown or check), waiting at most ``timeout`` seconds.

        Its file goes on release when the container has no ``records/`` directory
        (libcni holds nothing of it); GC removes the ones no one holds."""
        lk = self._container(container_id, timeout)
        if lk is None:
            path = self.container_lock_path(container_id)
            raise lock_timeout(f"container {container_id!r}", path, timeout)
        return lk

    def try_container_lock(self, container_id: str) -> CacheLock | None:
        """:meth:`container_lock` without waiting: ``None`` if it is busy (for async callers)."""
        return self._container(container_id, 0)

    def _container(self, container_id: str, timeout: float | None) -> CacheLock | None:
        name = fit_name(check_name(container_id, "container ID"), "container ID")
        return acquire(
            self.locks_dir,
            name,
            subdir="containers",
            exclusive=True,
            timeout=timeout,
            entry=os.path.join(self.records_dir, name),
            dirs=lambda action: self.dirs.lock_dir(action, "containers"),
        )

    # -- the files (for messages: what a wait that timed out was waiting for) --------------

    def attachment_lock_path(self, network: str, container_id: str, ifname: str) -> str:
        """The lock file of one attachment (:meth:`lock`)."""
        return os.path.join(self.locks_dir, attachment_name(network, container_id, ifname))

    def network_lock_path(self, network: str) -> str:
        """The lock file of a network (:meth:`network_lock`)."""
        name = fit_name(check_name(network, "network name"), "network name")
        return os.path.join(self.locks_dir, "networks", name)

    def container_lock_path(self, container_id: str) -> str:
        """The lock file of a container (:meth:`container_lock`)."""
        name = fit_name(check_name(container_id, "container ID"), "container ID")
        return os.path.join(self.locks_dir, "containers", name)
