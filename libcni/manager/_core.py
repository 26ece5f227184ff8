"""The rules of the network manager, written once for sync and async.

As in :mod:`libcni._ops`, every operation is a generator that decides what to
do and yields effects; :class:`~libcni.manager.NetworkManager` performs them
with blocking calls and :class:`~libcni.manager.AsyncNetworkManager` with
``await``. The manager never runs a plugin itself: every plugin run is an
operation of ``CNIConfig``/``AsyncCNIConfig`` (:class:`Call`).

- :class:`Call`: call one method of the ``CNIConfig`` (awaited in async);
  ``protected`` calls (rollback DELs) finish even if the caller is cancelled.
- :class:`Together`: run several calls at the same time; the outcome is one
  ``(value, error)`` pair per call, in order. A failure cancels nothing.
- :class:`LockContainer`: hold the per-container lock; the outcome releases it.
- :class:`Blocking`: a short local call that reads the disk (the
  configuration check, cache reads); inline in both drivers, as the
  operations read the cache.
- :class:`Pause`: wait a while (the back-off between ADD attempts);
  ``time.sleep`` or ``asyncio.sleep``.
- :class:`LoopbackUp`: ``lo`` brought up in a thread of its own, waited for
  within the setup's time left (off the event loop's thread in async).

A :class:`Together` may also hold operations (generators of these effects):
each driver then runs each of them as it runs an operation, at the same time.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import threading
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, Literal, Protocol

import attrs

from .. import _log as logging  # logging, imported at first use
from .. import request as rq
from .._deadline import TRY_AGAIN, Deadline, lock_timeout
from ..cache import CacheEntry, ResultCache
from ..capabilities import check_plain
from ..conf import NetworkConfigList, conf_from_bytes, conf_list_from_bytes, conf_list_from_conf
from ..errors import (
    CODE_LIMITED_CONNECTIVITY,
    CODE_TRY_AGAIN,
    AlreadyAttachedError,
    CNIError,
    ConfigError,
    LockTimeoutError,
    NamespaceError,
    NotAttachedError,
    NotFoundError,
    NotReadyError,
    PluginError,
    PluginTimeoutError,
    SetupError,
    TeardownError,
    ValidationError,
)
from ..types import result_from_dict
from ..values import (
    Args,
    CapabilityArgs,
    NetworkAttachment,
    RuntimeConf,
    _pairs,
    capability_mapping,
)
from ._config import ConfigWatcher
from ._values import (
    LOOPBACK_IFNAME,
    LOOPBACK_NETWORK,
    AttachmentResult,
    ContainerNetworks,
    LoadedNetworks,
    NetworkRequest,
)

__all__ = ["Blocking", "Call", "Core", "LockContainer", "NetworkCalls", "Pause", "Together"]

log = logging.getLogger("libcni")

LOOPBACK_CONFIG = (
    b'{"cniVersion": "1.0.0", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}'
)

#: ``loopback=INTERNAL_LOOPBACK``: ``lo`` brought up by the manager itself, no plugin.
INTERNAL_LOOPBACK: Literal["internal"] = "internal"

Loopback = bool | Literal["internal"]


def loopback_mode(value: object) -> Loopback:
    """``value`` as a ``loopback`` setting (``True``, ``False`` or ``"internal"``), else refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value == INTERNAL_LOOPBACK:
            return INTERNAL_LOOPBACK
        raise ValueError(f"loopback must be True, False or 'internal', not {value!r}")
    raise TypeError(f"loopback must be True, False or 'internal', not {type(value).__name__}")


@attrs.frozen
class LoopbackUp:
    """Effect: bring ``lo`` up in ``netns`` (``loopback="internal"``) in a thread of its own,
    waited for at most ``timeout`` seconds (``None``: no end); the outcome is ``None``.

    The system calls may wait for the kernel (its routing lock, busy while other
    containers' interfaces are made): the async driver's loop never waits for them,
    and a bring-up that outlasts the setup's time left fails it with :meth:`timed_out`
    (the thread finishes on its own).
    """

    netns: str
    timeout: float | None
    limit: float | None  # the setup's timeout, for the message

    def start(self) -> concurrent.futures.Future[None]:
        """The bring-up, started in a new thread (that ends right after it)."""
        from ..netns import _loopback_up

        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return  # given up on before it started
            try:
                _loopback_up(self.netns)
            except BaseException as e:  # handed to the waiter
                done.set_exception(e)
            else:
                done.set_result(None)

        threading.Thread(target=run, name="libcni-loopback", daemon=True).start()
        return done

    def wait(self) -> None:
        """The bring-up, waited for (blocking) at most ``timeout`` seconds."""
        try:
            self.start().result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise self.timed_out() from None

    def timed_out(self) -> PluginTimeoutError:
        """The setup's timeout error: ``lo`` was not up in time."""
        return PluginTimeoutError(
            f"setup timed out after {self.limit:.3g}s while bringing lo up in {self.netns} "
            '(loopback="internal")'
        )


class NetworkCalls(Protocol):
    """The seam between the rules and the operations: what a :class:`Call` may call.

    One method per operation of ``CNIConfig``/``AsyncCNIConfig`` the manager
    uses; ``manager._calls.CNICalls`` implements it over either (the async
    methods return awaitables, which the async driver awaits) and makes each
    network's call a network event for observers. mypy checks every call the
    rules make against it.
    """

    def add(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        """ADD (``add_network_list``); the outcome is the result."""

    def delete(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        """DEL (``del_network_list``)."""

    def check(self, net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Any:
        """CHECK (``check_network_list``)."""

    def status(self, net: NetworkConfigList, timeout: float | None) -> Any:
        """STATUS (``get_status_network_list``)."""

    def gc(
        self, nets: Sequence[NetworkConfigList], keep: frozenset[str], timeout: float | None
    ) -> Any:
        """GC of ``nets`` and of the networks known only from the cache, keeping the
        attachments of the containers ``keep`` (``gc_networks``)."""


@attrs.frozen
class Call:
    """Effect: ``call(calls)``, one operation through the seam (:class:`NetworkCalls`);
    the outcome is its value (awaited by the async driver).

    ``protected`` calls (rollback DELs) finish even if the caller is cancelled.
    """

    call: Callable[[NetworkCalls], Any]
    protected: bool = False


# The calls the rules make, one per method of the seam (closures over arguments, never
# over a loop's variables).


def _add(net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Call:
    return Call(lambda calls: calls.add(net, rt, timeout))


def _delete(
    net: NetworkConfigList, rt: RuntimeConf, timeout: float | None, *, protected: bool = False
) -> Call:
    return Call(lambda calls: calls.delete(net, rt, timeout), protected)


def _check(net: NetworkConfigList, rt: RuntimeConf, timeout: float | None) -> Call:
    return Call(lambda calls: calls.check(net, rt, timeout))


def _status(net: NetworkConfigList, timeout: float | None) -> Call:
    return Call(lambda calls: calls.status(net, timeout))


def _gc(nets: Sequence[NetworkConfigList], keep: frozenset[str], timeout: float | None) -> Call:
    return Call(lambda calls: calls.gc(nets, keep, timeout))


@attrs.frozen
class Together:
    """Effect: run ``calls`` at the same time; the outcome is ``[(value, error), ...]``.

    Each item is a :class:`Call`, or an operation (a generator of effects) that
    the driver runs to its end. ``width``: at most that many at once, in
    order (``0``: all of them).
    """

    calls: tuple[Call | Generator[Any, Any, Any], ...]
    width: int = 0


@attrs.frozen
class LockContainer:
    """Effect: hold the lock of one container; the outcome is a function releasing it."""

    cache: ResultCache
    container_id: str
    timeout: float | None
    operation: str = ""  # for the LockTimeoutError message

    def timed_out(self) -> LockTimeoutError:
        """The error of a wait for this lock that outlasted ``timeout``, the same from both
        drivers (``ResultCache.container_lock``'s file as the details)."""
        path = self.cache.container_lock_path(self.container_id)
        return lock_timeout(f"container {self.container_id!r}", path, self.timeout, self.operation)


@attrs.frozen
class Blocking:
    """Effect: ``call(*args)``, a short local read (stats, small files)."""

    call: Callable[..., Any]
    args: tuple[Any, ...] = ()


@attrs.frozen
class Pause:
    """Effect: wait ``seconds`` (a back-off); the outcome is ``None``."""

    seconds: float


Effect = Call | Together | LockContainer | Blocking | Pause | LoopbackUp
Op = Generator[Effect, Any, Any]
Outcome = tuple[Any, BaseException | None]


@attrs.frozen
class _Item:
    """One network of a setup, ready to run."""

    network: str
    ifname: str
    net: NetworkConfigList
    rt: RuntimeConf


def _time_left(deadline: Deadline, network: str, container_id: str) -> float | None:
    """The timeout of a setup's next call: the time left, the setup's own timeout when it
    sets no end (``None``, ``math.inf``); :class:`PluginTimeoutError` when none is left."""
    if deadline.expired:
        raise PluginTimeoutError(
            f"setup timed out after {deadline.limit:.3g}s before network {network!r} "
            "could be added",
            command="ADD",
            network=network,
            container_id=container_id,
        )
    return _call_timeout(deadline)


def _call_timeout(deadline: Deadline) -> float | None:
    """The timeout to give a call within ``deadline``: the time left, or the limit itself when
    it sets no end (``None`` would mean the ``CNIConfig``'s default)."""
    left = deadline.left()
    return deadline.limit if left is None else left


class _Run:
    """What a setup attempted and what came of it (:meth:`Core._attach`)."""

    __slots__ = ("attempted", "done", "failure", "interrupted", "items")

    def __init__(self, items: Sequence[_Item]) -> None:
        self.items = items
        self.attempted: list[_Item] = []
        self.done: dict[int, AttachmentResult] = {}  # the results, by index in items
        self.failure: CNIError | None = None  # the first failed ADD
        self.interrupted: BaseException | None = None  # a cancellation, an interrupt

    def succeeded(self, i: int, result: Any) -> None:
        item = self.items[i]
        self.done[i] = AttachmentResult(item.network, item.ifname, result)


_DIGITS = re.compile(r"(\d+)")

#: How many cached configurations a manager keeps parsed (see ``Core._parse_cached``).
_PARSED_MAX = 256

#: How many (network, capability) warnings a manager remembers having logged.
_WARNED_MAX = 4096


def _code_networks(networks: Sequence[NetworkConfigList]) -> tuple[NetworkConfigList, ...]:
    """The networks given in code, checked: lists with valid, distinct names and plugins."""
    if isinstance(networks, NetworkConfigList):
        networks = [networks]
    out: list[NetworkConfigList] = []
    seen: set[str] = set()
    for i, net in enumerate(networks):
        if not isinstance(net, NetworkConfigList):
            hint = " (wrap it with conf_list_from_conf)" if hasattr(net, "type") else ""
            raise TypeError(
                f"networks[{i}] must be a NetworkConfigList (conf_list_from_bytes...), "
                f"not {type(net).__name__}{hint}"
            )
        rq.validate_network_name(net.name)
        if not net.plugins:
            raise ConfigError(f"networks[{i}] (network {net.name!r}) has no plugins")
        if net.name in seen:
            raise ConfigError(f"network {net.name!r} is given twice in networks")
        seen.add(net.name)
        out.append(net)
    return tuple(out)


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int, 0 or more, not {value!r}")
    return value


def _quoted(names: Iterable[str]) -> str:
    """Network names for a message: ``'a', 'b'``."""
    return ", ".join(map(repr, names))


def _why(loaded: LoadedNetworks, name: str) -> str | None:
    """Why the network ``name``, skipped, cannot be used (``None``: no file names it)."""
    return loaded.not_ready.get(name) or loaded.invalid.get(name)


@functools.lru_cache(maxsize=256)
def _natural(ifname: str) -> tuple[Any, ...]:
    """The natural sort key of an interface name (remembered: containers share a few)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(ifname)))


def attachment_order(ifname: str, network: str) -> tuple[Any, ...]:
    """The order of what is read back from the cache: ``lo`` first, then natural ifname order."""
    return (ifname != LOOPBACK_IFNAME, _natural(ifname), network)


def _requests(
    networks: Sequence[str | NetworkRequest] | str | NetworkRequest,
) -> list[NetworkRequest]:
    """``networks`` as requests (a name ``s`` is ``NetworkRequest(s)``); ``ConfigError`` for others."""
    if isinstance(networks, (str, NetworkRequest)):
        networks = [networks]
    requests: list[NetworkRequest] = []
    for n in networks:
        if isinstance(n, str):
            requests.append(NetworkRequest(n))
        elif isinstance(n, NetworkRequest):
            requests.append(n)
        else:
            raise ConfigError(
                f"a network must be a name or a NetworkRequest, not {type(n).__name__}"
            )
    return requests


#: One attachment the cache holds for a container: its entry and ``True`` (complete), or
#: its write-ahead record and ``False`` (in progress).
Held = tuple[CacheEntry, bool]


def _network(att: CacheEntry | _Item) -> str:
    return att.network if isinstance(att, _Item) else att.network_name


def _ifname(att: CacheEntry | _Item) -> str:
    return att.ifname


def _names(request: NetworkRequest, entry: CacheEntry) -> bool:
    """Whether ``request`` (a network, and an interface if it names one) names ``entry``."""
    return request.network == entry.network_name and request.ifname in (None, entry.ifname)


def _refuse_not_netns(netns: str) -> None:
    """:class:`NamespaceError` when ``netns`` exists and is not a network namespace (a
    regular file, a pin left empty, a FIFO, a directory); never blocks on it. A path that
    does not exist is passed to the plugins as given."""
    from ..netns import _not_netns

    why = _not_netns(netns)
    if why is not None:
        raise NamespaceError(why)


def _check_arguments(items: Sequence[_Item]) -> None:
    """Refuse the args and capability args of every network of a setup before the first
    plugin runs: pairs ``CNI_ARGS`` cannot carry and capability arguments without a JSON
    form (``ConfigError`` naming the network), well-known capabilities that break their
    rules (``capabilities.check_plain``: ``ValidationError``)."""
    checked: set[int] = set()
    for item in items:
        caps = item.rt.capability_args
        fresh = bool(caps) and id(caps) not in checked
        try:
            rq.encode_cni_args(item.rt.args)
            if fresh:
                checked.add(id(caps))
                rq.check_capability_args(caps)
        except ConfigError as e:
            raise ConfigError(f"network {item.network!r}: {e.msg}", e.details) from None
        if fresh:
            check_plain(caps)  # the well-known ones, by their typed rules


class Core:
    """The state and the rule generators shared by the sync and async managers."""

    def __init__(
        self,
        conf_dir: str | os.PathLike[str] | None,
        plugin_dirs: Sequence[str | os.PathLike[str]],
        *,
        cni: Any,
        default_networks: Sequence[str] | None,
        max_networks: int,
        loopback: Loopback,
        interface_prefix: str,
        timeout: float | None,
        networks: Sequence[NetworkConfigList] = (),
        retry_attempts: int = 0,
    ) -> None:
        if isinstance(plugin_dirs, (str, os.PathLike)):
            plugin_dirs = [plugin_dirs]
        if isinstance(default_networks, str):
            default_networks = [default_networks]
        self.conf_dir = None if conf_dir is None else os.fspath(conf_dir)
        self.plugin_dirs = tuple(os.fspath(p) for p in plugin_dirs)
        self.cni = cni
        self.code_networks = _code_networks(networks)
        self.default_networks = None if default_networks is None else tuple(default_networks)
        self.max_networks = _count("max_networks", max_networks)
        self.loopback = loopback_mode(loopback)
        # The loopback network of the loopback plugin, cached as cni-loopback.
        self._plugin_loopback = self.loopback is True
        self.interface_prefix = interface_prefix
        self.timeout = timeout
        self.retry_attempts = _count("retry_attempts", retry_attempts)
        self.watcher = ConfigWatcher(
            self.conf_dir,
            self.plugin_dirs,
            cni.exec.find_in_path,
            self.default_networks,
            self.max_networks,
            self.code_networks,
        )
        self.loopback_net = conf_list_from_bytes(LOOPBACK_CONFIG)
        # The CNIConfig's own cache (so that the default directory is decided in one place).
        self.cache: ResultCache = cni._cache()
        self._parsed: dict[bytes, NetworkConfigList] = {}
        # The last configuration loaded that _config_problem found ready (see _problem).
        self._ready: LoadedNetworks | None = None
        # (network, capability) pairs already warned about (see _warn_unused).
        self._warned: set[tuple[str, str]] = set()

    def _where(self) -> str:
        """Where the configured networks come from, for messages."""
        if self.conf_dir is None:
            return "among the networks given to the manager (conf_dir=None)"
        if self.code_networks:
            return f"among the networks given to the manager or in {self.conf_dir}"
        return f"in {self.conf_dir}"

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout

    def current(self) -> Op:
        """The configuration as it is now (a cheap check, a reload if anything changed)."""
        loaded: LoadedNetworks = yield Blocking(self.watcher.current)
        return loaded

    # -- readiness -------------------------------------------------------

    def _config_problem(self, loaded: LoadedNetworks) -> NotReadyError | None:
        """Why the configuration cannot attach containers now, or ``None``."""
        skipped = "; ".join(f"{path}: {why}" for path, why in loaded.skipped.items())
        if not loaded.defaults:
            where = self._where()
            if not loaded.skipped:
                if self.conf_dir is None:
                    return NotReadyError(
                        "no network configured: pass networks=[...] to the manager, or a conf_dir"
                    )
                return NotReadyError(
                    f"no network configuration found {where}: add a .conflist, .conf or "
                    ".json file there"
                )
            return NotReadyError(
                f"no usable network configuration {where}: fix the skipped ones", skipped
            )
        missing = [n for n in loaded.defaults if n not in loaded.networks]
        if missing:
            why = "; ".join(f"{n}: {_why(loaded, n) or 'not configured'}" for n in missing)
            return NotReadyError(
                f"default network(s) {_quoted(missing)} not usable {self._where()}: install "
                "their plugins or add their configuration",
                why,
            )
        if self._plugin_loopback:
            try:
                self.cni.exec.find_in_path("loopback", self.plugin_dirs)
            except CNIError as e:
                return NotReadyError(
                    "the loopback plugin is not installed: put it in one of the plugin "
                    f"directories ({', '.join(self.plugin_dirs)}) or turn loopback off",
                    str(e),
                )
        return None

    def _problem(self, loaded: LoadedNetworks) -> NotReadyError | None:
        """:meth:`_config_problem`, with "ready" remembered for the configuration loaded.

        It depends only on ``loaded`` and on the plugin directories, which the
        change check watches: a plugin installed or removed there reloads, and
        a reload is a new ``loaded``.
        """
        if self._ready is loaded:
            return None
        problem = self._config_problem(loaded)
        if problem is None:
            self._ready = loaded
        return problem

    def status(self, timeout: float | None) -> Op:
        """Ready, or :class:`NotReadyError` saying why."""
        loaded = yield from self.current()
        problem = self._problem(loaded)
        if problem is not None:
            raise problem
        for name in loaded.defaults:
            try:
                yield _status(loaded.networks[name], self._timeout(timeout))
            except PluginError as e:
                if e.code == CODE_LIMITED_CONNECTIVITY:
                    log.warning("network %r has limited connectivity: %s", name, e)
                    continue
                raise NotReadyError(
                    f"network {name!r} is not ready: {e.msg}", e.details, cause=e
                ) from e
            except CNIError as e:
                raise NotReadyError(f"network {name!r} is not ready: {e}", cause=e) from e
        return None

    # -- setup -----------------------------------------------------------

    def _plan(
        self,
        loaded: LoadedNetworks,
        container_id: str,
        netns: str,
        networks: Sequence[str | NetworkRequest] | None,
        args: Args,
        capability_args: CapabilityArgs,
    ) -> list[_Item]:
        """The networks of a setup with their interface names; refuses bad requests.

        Everything that can be refused is refused here, before anything runs:
        the container ID, the networks and interface names, and capability
        arguments without a JSON form (a ``ConfigError``, not a failed ADD).
        """
        rq.validate_container_id(container_id)
        if not netns:
            raise ValidationError(
                "no network namespace given: setup needs the path of the container's network "
                "namespace (CNI_NETNS)"
            )
        args = _pairs(args)
        caps = capability_mapping(capability_args)
        if networks is None:
            problem = self._problem(loaded)
            if problem is not None:
                raise problem
            requests = [NetworkRequest(n) for n in loaded.defaults]
        else:
            requests = _requests(networks)
        unusable = [r.network for r in requests if r.network not in loaded.networks]
        if unusable:
            raise self._not_usable(loaded, unusable)
        ifnames = self._ifnames(container_id, requests)
        items: list[_Item] = []
        if self._plugin_loopback:
            items.append(
                _Item(
                    LOOPBACK_NETWORK,
                    LOOPBACK_IFNAME,
                    self.loopback_net,
                    RuntimeConf(container_id, netns, LOOPBACK_IFNAME, args, caps),
                )
            )
        for r, ifname in zip(requests, ifnames, strict=True):
            own = caps if r.capability_args is None else r.capability_args
            rt = RuntimeConf(container_id, netns, ifname, (*args, *r.args), own)
            items.append(_Item(r.network, ifname, loaded.networks[r.network], rt))
        _check_arguments(items)
        self._warn_unused(items)
        return items

    def _not_usable(self, loaded: LoadedNetworks, names: Sequence[str]) -> CNIError:
        """The error of a setup naming networks that cannot be used: ``NotFoundError`` for
        a name not configured at all, ``ConfigError`` for one whose configuration cannot
        be used (bad requests), else ``NotReadyError`` naming the binary each waits for
        (try again later)."""
        unknown = [n for n in names if _why(loaded, n) is None]
        if unknown:
            e = NotFoundError(self.conf_dir or "", unknown[0])
            e.msg = f"network(s) {_quoted(unknown)} not configured {self._where()}"
            return e
        invalid = [n for n in names if n in loaded.invalid]
        if invalid:
            return ConfigError(
                f"network(s) {_quoted(invalid)} cannot be used {self._where()}",
                "; ".join(f"{n}: {loaded.invalid[n]}" for n in invalid),
            )
        return NotReadyError(
            f"network(s) {_quoted(names)} not ready: a plugin binary is not installed",
            "; ".join(f"{n}: {loaded.not_ready[n]}" for n in names),
        )

    def _ifnames(self, container_id: str, requests: Sequence[NetworkRequest]) -> list[str]:
        """The interface name of each request, as setup gives them.

        Names given in requests are reserved first (``lo`` too, with
        loopback); every other request gets the first free
        ``<interface_prefix><n>`` in request order. A bad or repeated name is
        refused (``ValidationError``, ``ConfigError``).
        """
        taken: set[str] = {LOOPBACK_IFNAME} if self.loopback else set()
        for r in requests:
            if r.ifname is None:
                continue
            rq.validate_interface_name(r.ifname)
            if r.ifname in taken:
                raise ConfigError(
                    f"interface name {r.ifname!r} requested twice for container {container_id!r}"
                )
            taken.add(r.ifname)
        names: list[str] = []
        k = 0
        for r in requests:
            ifname = r.ifname
            if ifname is None:
                while f"{self.interface_prefix}{k}" in taken:
                    k += 1
                ifname = f"{self.interface_prefix}{k}"
                rq.validate_interface_name(ifname)
                taken.add(ifname)
            names.append(ifname)
        return names

    def _warn_unused(self, items: Sequence[_Item]) -> None:
        """Log the capability arguments that no plugin of the setup's networks receives.

        A misspelled capability (``portMapping``) reaches no plugin: without
        this warning it would pass in silence. A capability one network of
        the setup declares is used (runtimes pass the same arguments to every
        network), so only those no network given them declares are logged:
        once per network and name, for the life of the manager.
        """
        given: dict[str, list[str]] = {}  # capability -> the networks given it
        used: set[str] = set()
        for item in items:
            caps = item.rt.capability_args
            if not caps or item.network == LOOPBACK_NETWORK:
                continue
            declared = {
                key
                for plugin in item.net.plugins
                for key, enabled in plugin.capabilities.items()
                if enabled is True
            }
            for key in caps:
                given.setdefault(key, []).append(item.network)
                if key in declared:
                    used.add(key)
        for key, networks in given.items():
            if key in used:
                continue
            for network in networks:
                if (network, key) in self._warned:
                    continue
                if len(self._warned) >= _WARNED_MAX:
                    self._warned.clear()
                self._warned.add((network, key))
                log.warning(
                    "capability argument %r reaches no plugin: no plugin of network %r "
                    "declares it (a misspelling?)",
                    key,
                    network,
                )

    def setup(
        self,
        container_id: str,
        netns: str,
        networks: Sequence[str | NetworkRequest] | None,
        args: Args,
        capability_args: CapabilityArgs,
        parallel: bool,
        timeout: float | None,
    ) -> Op:
        """Attach the container to its networks, or roll everything back."""
        loaded = yield from self.current()
        items = self._plan(loaded, container_id, netns, networks, args, capability_args)
        yield Blocking(_refuse_not_netns, (netns,))
        timeout = self._timeout(timeout)
        release = yield LockContainer(self.cache, container_id, timeout, "setup")
        try:
            attached, dead = yield Blocking(self._still_cached, (container_id, items))
            if attached is not None:
                raise AlreadyAttachedError(attached[0], container_id, attached[1])
            deadline = Deadline(timeout)
            yield from self._del_dead_attempts(container_id, dead, deadline)
            run = _Run(items)
            try:
                yield from self._attach(run, netns, parallel, deadline)
            except BaseException as e:  # cancelled, or interrupted: roll back, then re-raise
                run.interrupted = e
            if run.failure is None and run.interrupted is None:
                results = tuple(run.done[i] for i in range(len(items)))
                return ContainerNetworks.merge(container_id, results, netns=netns)
            yield from self._undo(container_id, run)
        finally:
            release()
        return None  # not reached: _undo raises

    def _attach(self, run: _Run, netns: str, parallel: bool, deadline: Deadline) -> Op:
        """ADD the networks of ``run`` in order (serially: all of them; in parallel: the
        loopback network first, then the others at the same time); the first failure stops
        the serial ones. What happened is in ``run``."""
        run.failure = yield from self._internal_loopback(netns, deadline)
        if run.failure is not None:
            return None
        items = run.items
        first = len(items) if not parallel else (1 if self._plugin_loopback else 0)
        for i in range(first):
            run.attempted.append(items[i])
            try:
                result = yield from self._attempt(items[i], deadline)
            except CNIError as e:
                run.failure = e
                return None
            run.succeeded(i, result)
        if first < len(items):
            rest = range(first, len(items))
            run.attempted.extend(items[i] for i in rest)
            outcomes: list[Outcome] = yield Together(
                tuple(self._attempt(items[i], deadline) for i in rest)
            )
            for i, (value, error) in zip(rest, outcomes, strict=True):
                if error is None:
                    run.succeeded(i, value)
                elif isinstance(error, CNIError):
                    run.failure = run.failure or error
                else:
                    run.interrupted = run.interrupted or error
        return None

    def _undo(self, container_id: str, run: _Run) -> Op:
        """Roll back what ``run`` attempted, then raise why: the interruption as it is, or a
        :class:`SetupError` with the failure, the partial results and the rollback's errors."""
        rollback_errors = yield from self._rollback(run.attempted, self._timeout(None))
        if run.interrupted is not None:
            raise run.interrupted
        assert run.failure is not None
        partial = tuple(run.done[i] for i in sorted(run.done))
        raise SetupError(container_id, run.failure, partial, rollback_errors)

    def _internal_loopback(self, netns: str, deadline: Deadline) -> Op:
        """With ``loopback="internal"``: ``lo`` up in ``netns`` within ``deadline`` (nothing
        cached); the error, if any."""
        if self.loopback != INTERNAL_LOOPBACK:
            return None
        try:
            yield LoopbackUp(netns, deadline.left(), deadline.limit)
        except CNIError as e:
            return e
        return None

    def _attempt(self, item: _Item, deadline: Deadline) -> Op:
        """ADD one network of a setup; with ``retry_attempts``, again after a code 11.

        A plugin's "try again later" (code 11) is followed by a DEL of the
        network (so that nothing of the failed attempt stays), a back-off
        (:data:`~libcni._deadline.TRY_AGAIN`) and a new
        ADD, up to ``retry_attempts`` more times, all within the setup's
        timeout: when too little time is left, or the DEL fails, the code-11
        error is the failure. A plugin timeout is not retried.
        """
        container_id = item.rt.container_id
        retries = 0
        pauses = TRY_AGAIN.pauses(deadline, whole=True)
        while True:
            left = _time_left(deadline, item.network, container_id)
            try:
                result = yield _add(item.net, item.rt, left)
                return result
            except PluginError as e:
                if (
                    retries >= self.retry_attempts
                    or e.code != CODE_TRY_AGAIN
                    or isinstance(e, PluginTimeoutError)
                ):
                    raise
                pause = next(pauses, None)
                if pause is None:  # too little time left
                    raise
                retries += 1
                log.warning(
                    "network %r (%s) of container %r: ADD failed with code 11 (try again "
                    "later): %s; DEL, then attempt %d of %d in %.2fs",
                    item.network,
                    item.ifname,
                    container_id,
                    e,
                    retries + 1,
                    self.retry_attempts + 1,
                    pause,
                )
                error = e
            if deadline.expired:
                raise error
            try:
                yield _delete(item.net, item.rt, _call_timeout(deadline))
            except CNIError as d:
                log.warning(
                    "network %r (%s) of container %r: DEL before a new attempt failed, "
                    "not retrying: %s",
                    item.network,
                    item.ifname,
                    container_id,
                    d,
                )
                raise error from d
            remaining = deadline.left()
            if remaining is not None and remaining <= pause:
                raise error  # no time left for another attempt
            yield Pause(pause)

    def _still_cached(
        self, container_id: str, items: Sequence[_Item]
    ) -> tuple[tuple[str, str] | None, list[CacheEntry]]:
        """The ``(network, ifname)`` of an attachment of the container that has a cache entry
        (readable or not), if any, and the write-ahead records of the planned attachments
        that have none.

        The entries looked for: those of the planned attachments, and those of
        every record of the container (its index, one listing): whatever the
        network, a container still attached is not set up again. A record
        without an entry is a setup that failed or whose runtime died: its
        plugins may hold resources, so it is DELeted before it is set up again.
        """
        records = {(r.network_name, r.ifname): r for r in self.cache.records(container_id)}
        keys = [(item.network, item.ifname) for item in items]
        for network, ifname in [*keys, *records]:
            if os.path.lexists(self.cache.entry_path(network, container_id, ifname)):
                return (network, ifname), []
        return None, [records[k] for k in keys if k in records]

    def _del_dead_attempts(
        self, container_id: str, dead: Sequence[CacheEntry], deadline: Deadline
    ) -> Op:
        """DEL each record of an earlier setup attempt, with what it recorded; nothing else
        runs if one fails (``SetupError`` with the DEL's error as ``cause``; the record stays)."""
        for record in reversed(dead):
            try:
                net, rt = self._cached_net(record, record.netns)
                log.warning(
                    "network %r (%s) of container %r is in progress from an earlier setup that "
                    "did not finish; DELeting it before setting it up again",
                    record.network_name,
                    record.ifname,
                    container_id,
                )
                yield _delete(net, rt, _time_left(deadline, record.network_name, container_id))
            except CNIError as e:
                raise SetupError(container_id, e) from e
        return None

    def _rollback(self, attempted: Sequence[_Item], timeout: float | None) -> Op:
        """DEL every attempted network in reverse order, each with a full timeout; all of them."""
        errors: list[CNIError] = []
        for item in reversed(attempted):
            try:
                yield _delete(item.net, item.rt, timeout, protected=True)
            except CNIError as e:
                log.warning(
                    "rollback of network %r (%s) for container %r failed: %s",
                    item.network,
                    item.ifname,
                    item.rt.container_id,
                    e,
                )
                errors.append(e)
        return errors

    # -- teardown, check, inspect ---------------------------------------

    def _held(self, container_id: str) -> list[Held]:
        """Every attachment the cache holds for the container, in order: its complete
        entries and the records of attachments without one (in progress).

        Found through the container's records directory, its index
        (``ResultCache.attachments_of``): the cost does not grow with the other
        containers cached; a container set up by the Go library or an older
        libcni (no records) is found by a listing of the entries.
        """
        entries, records = self.cache.attachments_of(container_id)
        held: list[Held] = [(e, True) for e in entries]
        held += [(r, False) for r in records]
        held.sort(key=lambda h: attachment_order(h[0].ifname, h[0].network_name))
        return held

    def _parse_cached(self, config: bytes) -> NetworkConfigList:
        """The cached configuration as a list, remembered: containers share a few configurations.

        A single plugin's configuration (cached by ``add_network``, or by Go's
        ``AddNetwork``) is the list of that one plugin (``conf_list_from_conf``).
        A configuration list is immutable, so one parse serves every teardown
        and check of the containers attached with it. Bounded: the memory is
        cleared when it holds too many (configurations that are gone).
        """
        net = self._parsed.get(config)
        if net is None:
            net = conf_list_from_bytes(config)
            if not net.plugins and isinstance(net.raw.get("type"), str):
                net = conf_list_from_conf(conf_from_bytes(config))
            if len(self._parsed) >= _PARSED_MAX:
                self._parsed.clear()
            self._parsed[config] = net
        return net

    def _cached_net(
        self,
        att: CacheEntry,
        netns: str,
        loaded: LoadedNetworks | None = None,
    ) -> tuple[NetworkConfigList, RuntimeConf]:
        """The list, args and capability args cached at ADD (the current file as a fallback).

        ``att`` is a cache entry or record: the same one
        ``get_network_list_cached_config`` reads, without reading it again.
        """
        network = att.network_name
        # As get_network_list_cached_config: the cached args (none given here).
        rt = att.runtime_conf(netns=netns)
        try:
            net = self._parse_cached(att.config)
            if net.plugins and net.name == network:
                return net, rt
            problem = "the cached configuration has no plugins"
        except ConfigError as e:
            problem = f"the cached configuration cannot be read: {e}"
        if loaded is None:  # needed only now: the configuration as it is now
            loaded = self.watcher.current()
        current = loaded.networks.get(network)
        if network == LOOPBACK_NETWORK and current is None:
            current = self.loopback_net
        if current is not None:
            log.warning(
                "network %r of container %r: %s; using the current configuration",
                network,
                att.container_id,
                problem,
            )
            return current, rt
        raise ConfigError(
            f"cannot use network {network!r} of container {att.container_id!r}: {problem} "
            f"and no configuration of that name is {self._where()}"
        )

    def teardown(
        self,
        container_id: str,
        netns: str,
        networks: Sequence[str | NetworkRequest] | None,
        args: Args,
        capability_args: CapabilityArgs,
        timeout: float | None,
    ) -> Op:
        """DEL every attachment the cache holds (or those of ``networks``), last one first.

        Each DEL uses what the cache knows of its attachment: the
        configuration, args and capability args cached or recorded at ADD,
        and its netns when ``netns`` is empty. A network named in
        ``networks`` of which the cache knows nothing is DELeted with its
        current configuration, the interface name setup would give it and
        ``args``/``capability_args``.
        """
        # The configuration on disk is read only if a cached one cannot be used.
        timeout = self._timeout(timeout)
        pairs, caps = _pairs(args), capability_mapping(capability_args)  # refused before
        requests = None if networks is None else _requests(networks)
        ifnames = None if requests is None else self._ifnames(container_id, requests)
        release = yield LockContainer(self.cache, container_id, timeout, "teardown")
        try:
            held: list[Held] = yield Blocking(self._held, (container_id,))
            todo: list[CacheEntry | _Item] = [att for att, _ in held]
            if requests is not None and ifnames is not None:
                todo = yield from self._named(
                    container_id, netns, held, requests, ifnames, pairs, caps
                )
            errors: list[CNIError] = []
            for att in reversed(todo):
                try:
                    if isinstance(att, _Item):
                        net, rt = att.net, att.rt
                    else:  # complete (its entry is not read again) or in progress
                        net, rt = self._cached_net(att, netns or att.netns)
                    yield _delete(net, rt, timeout)
                except CNIError as e:
                    log.warning(
                        "teardown of network %r (%s) for container %r failed: %s",
                        _network(att),
                        att.ifname,
                        container_id,
                        e,
                    )
                    errors.append(e)
            if errors:
                raise TeardownError(container_id, errors)
        finally:
            release()
        return None

    def _named(
        self,
        container_id: str,
        netns: str,
        held: Sequence[Held],
        requests: Sequence[NetworkRequest],
        ifnames: Sequence[str],
        args: tuple[tuple[str, str], ...],
        capability_args: dict[str, Any],
    ) -> Op:
        """What a teardown given ``networks`` DELs, in order: the held attachments the
        requests name, and for a request naming none, the DEL :meth:`_uncached` makes of it."""
        todo: list[CacheEntry | _Item] = [
            att for att, _ in held if any(_names(r, att) for r in requests)
        ]
        unknown = [
            (r, ifname)
            for r, ifname in zip(requests, ifnames, strict=True)
            if not any(_names(r, att) for att, _ in held)
        ]
        if unknown:
            loaded: LoadedNetworks = yield from self.current()
            for r, ifname in unknown:
                item = self._uncached(loaded, container_id, netns, r, ifname, args, capability_args)
                if item is not None:
                    todo.append(item)
            todo.sort(key=lambda att: attachment_order(att.ifname, _network(att)))
        return todo

    def _uncached(
        self,
        loaded: LoadedNetworks,
        container_id: str,
        netns: str,
        request: NetworkRequest,
        ifname: str,
        args: tuple[tuple[str, str], ...],
        capability_args: dict[str, Any],
    ) -> _Item | None:
        """The DEL of a network named for teardown of which the cache knows nothing (a cache
        lost or wiped): its current configuration, the interface name setup would give it,
        the teardown's args and capability args (ocicni's fallback).

        ``None`` (logged) when no configuration has that name either: nothing
        is known that could be DELeted, and failing would only make the
        runtime retry for ever.
        """
        net = loaded.networks.get(request.network)
        if request.network == LOOPBACK_NETWORK:
            net = net or self.loopback_net
            ifname = request.ifname or LOOPBACK_IFNAME
        if net is None:
            log.warning(
                "teardown of network %r for container %r: nothing is cached for it and no "
                "configuration of that name is %s; nothing to DEL",
                request.network,
                container_id,
                self._where(),
            )
            return None
        log.warning(
            "nothing is cached for network %r (%s) of container %r; DELeting it with its "
            "current configuration",
            request.network,
            ifname,
            container_id,
        )
        caps = capability_args if request.capability_args is None else request.capability_args
        rt = RuntimeConf(container_id, netns, ifname, (*args, *request.args), caps)
        return _Item(request.network, ifname, net, rt)

    def check(self, container_id: str, netns: str, timeout: float | None) -> Op:
        """CHECK every cached attachment of the container in order; the first failure is raised.

        Nothing cached or recorded: :class:`NotAttachedError` (code 3)."""
        timeout = self._timeout(timeout)
        release = yield LockContainer(self.cache, container_id, timeout, "check")
        try:
            held: list[Held] = yield Blocking(self._held, (container_id,))
            if not held:  # a health check must not report an unknown container healthy
                raise NotAttachedError(f"cannot check container {container_id!r}: nothing cached")
            for entry in (e for e, complete in held if complete):
                net, rt = self._cached_net(entry, netns or entry.netns)
                yield _check(net, rt, timeout)
        finally:
            release()
        return None

    def inspect(self, container_id: str) -> Op:
        """The merged view of the container, from the cache alone."""
        view: ContainerNetworks = yield Blocking(self._inspect, (container_id,))
        return view

    def _inspect(self, container_id: str) -> ContainerNetworks:
        rq.validate_container_id(container_id)
        held = self._held(container_id)
        atts: list[AttachmentResult] = []
        for e, complete in held:
            if not complete or e.result is None:
                continue
            try:
                result = result_from_dict(e.result)
            except CNIError as err:
                log.warning(
                    "cached result of %s-%s-%s cannot be read: %s",
                    e.network_name,
                    e.container_id,
                    e.ifname,
                    err,
                )
                continue
            atts.append(AttachmentResult(e.network_name, e.ifname, result))
        return ContainerNetworks.merge(
            container_id,
            atts,
            netns=next((e.netns for e, _ in held if e.netns), ""),
            incomplete=[(e.network_name, e.ifname) for e, complete in held if not complete],
        )

    # -- forget ----------------------------------------------------------

    def forget(self, container_id: str, networks: Sequence[str] | None) -> Op:
        """Drop the container's entries and records (those of ``networks``, or all) without
        running any plugin; what was dropped, in :func:`attachment_order`.

        Under the container's lock, as teardown; each attachment under its own
        lock, whose file goes with the entry. A container with nothing cached
        drops nothing: ``()``.
        """
        rq.validate_container_id(container_id)
        if isinstance(networks, str):
            networks = [networks]
        names = None if networks is None else frozenset(networks)
        for name in names or ():
            rq.validate_network_name(name)
        release = yield LockContainer(self.cache, container_id, self.timeout, "forget")
        try:
            dropped: tuple[NetworkAttachment, ...] = yield Blocking(
                self._forget, (container_id, names)
            )
        finally:
            release()
        return dropped

    def _forget(
        self, container_id: str, names: frozenset[str] | None
    ) -> tuple[NetworkAttachment, ...]:
        dropped: list[NetworkAttachment] = []
        for e, complete in self._held(container_id):
            if names is not None and e.network_name not in names:
                continue
            lock = self.cache.lock(e.network_name, container_id, e.ifname, timeout=self.timeout)
            try:
                self.cache.forget(e.network_name, container_id, e.ifname)
            finally:
                lock.release()
            log.warning(
                "forgot network %r (%s) of container %r without DEL%s: netns %r, args %r, "
                "capability args %r; what its plugins made stays until removed by hand",
                e.network_name,
                e.ifname,
                container_id,
                "" if complete else " (in progress)",
                e.netns,
                e.cni_args,
                e.capability_args,
            )
            dropped.append(e.attachment())
        return tuple(dropped)

    # -- GC --------------------------------------------------------------

    def gc(self, valid_containers: Iterable[str], timeout: float | None) -> Op:
        """GC of every configured or cached network, keeping the valid containers' attachments:
        one ``gc_networks`` call (one listing of the cache, each entry read at most once)."""
        if isinstance(valid_containers, str):
            valid_containers = [valid_containers]
        keep = frozenset(valid_containers)
        loaded = yield from self.current()
        nets = list(loaded.networks.values())
        if self._plugin_loopback and LOOPBACK_NETWORK not in loaded.networks:
            # Setups attach it first: a setup killed while writing its first record left
            # an unusable record of it, which only its GC removes.
            nets.append(self.loopback_net)
        yield _gc(tuple(nets), keep, self._timeout(timeout))
        return None
