"""The rules of every operation as generators of effects (``_effects``), for both drivers:
the shared state (:class:`Operations`), ADD, CHECK and DEL (GC: ``_ops_gc``; the rest:
``_ops_info``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from . import _log as logging  # logging, imported at first use
from . import request as rq
from ._deadline import Deadline, check_timeout, timeout_message
from ._effects import CacheIO, Effect, Release, RunPlugin, TakeLock, in_context
from .cache import (
    CNI_CACHE_V1,
    CacheEntry,
    CorruptEntryError,
    ResultCache,
    completed_json,
    default_cache_dir,
)
from .conf import NetworkConfigList, PluginConfig
from .errors import (
    CacheError,
    CheckNotSupportedError,
    CNIError,
    ConfigError,
    PluginError,
    PluginTimeoutError,
    VersionError,
)
from .invoke import Exec, RawExec
from .types import Result, result_from_bytes, result_from_dict
from .values import RuntimeConf
from .version import PluginInfo, parse_version

if TYPE_CHECKING:
    from ._events import Observer, Watch
    from .cache import FileIdent

log = logging.getLogger("libcni")

_V040 = (0, 4, 0)
_V110 = (1, 1, 0)

#: The operation of ``validate_network_list``/``validate_network`` in observers' events
#: (the others are the CNI commands, ``request.ADD`` ...).
VALIDATE = "VALIDATE"


def exec_options(effect: RunPlugin, exec_: Exec, method: str = "exec_plugin") -> dict[str, int]:
    """``pass_fd``, the lock to hand on, for :class:`RawExec`'s own ``method`` only (any
    other ``Exec`` is called as the protocol says)."""
    if effect.lock_fd is None or getattr(type(exec_), method, None) is not getattr(RawExec, method):
        return {}
    return {"pass_fd": effect.lock_fd}


def _held_fd(release: Release) -> int | None:
    """The descriptor of the lock that ``release`` (a ``CacheLock.release``) releases."""
    fileno = getattr(getattr(release, "__self__", None), "fileno", None)
    fd = -1 if fileno is None else int(fileno())
    return fd if fd >= 0 else None


_R = TypeVar("_R")
#: An operation: yields effects, is sent their outcomes, returns its value.
Op = Generator[Effect, Any, _R]


@attrs.frozen
class _Chain:
    """What the operations need of a network, for a list or a single plugin."""

    name: str
    cni_version: str
    plugins: tuple[PluginConfig, ...]
    config: bytes

    @classmethod
    def of(cls, net: NetworkConfigList | PluginConfig) -> _Chain:
        if isinstance(net, PluginConfig):
            return cls(net.name, net.cni_version, (net,), net.bytes)
        if not isinstance(net, NetworkConfigList):
            raise TypeError(
                f"expected a NetworkConfigList or PluginConfig, not {type(net).__name__}"
            )
        # The list as it runs, drop-in plugins included.
        return cls(net.name, net.cni_version, tuple(net.plugins), net.effective_bytes)


def as_list(net: Any, method: str) -> NetworkConfigList:
    """``net`` if it is a ``NetworkConfigList``; else a ``TypeError`` saying what ``method`` takes."""
    if isinstance(net, NetworkConfigList):
        return net
    hint = ""
    if isinstance(net, PluginConfig):
        hint = "; wrap a single plugin configuration with conf_list_from_conf()"
        if method not in ("gc_network_list", "get_status_network_list"):
            hint += f" or use {method.replace('_network_list', '_network')}()"
    raise TypeError(f"{method}() expects a NetworkConfigList, not {type(net).__name__}{hint}")


def as_plugin(net: Any, method: str) -> PluginConfig:
    """``net`` if it is a ``PluginConfig``; else a ``TypeError`` saying what ``method`` takes."""
    if isinstance(net, PluginConfig):
        return net
    hint = ""
    if isinstance(net, NetworkConfigList):
        hint = f"; for a whole list use {method.replace('_network', '_network_list', 1)}()"
    raise TypeError(
        f"{method}() expects a PluginConfig (one plugin), not {type(net).__name__}{hint}"
    )


def _require_plugins(chain: _Chain) -> None:
    """Refuse a network without plugins: a DEL of it would run nothing and forget the entry."""
    if not chain.plugins:
        raise ConfigError(
            f"network {chain.name!r} has no plugins",
            "a list whose plugins come from its drop-in directory must be loaded from its file"
            " (conf_list_from_file, load_conf_list)",
        )


def _lock_within(
    deadline: Deadline,
    cache: ResultCache,
    network: str,
    command: str,
    attachment: tuple[str, str] | None = None,
    *,
    exclusive: bool = True,
) -> TakeLock:
    """The effect that takes a cache lock within the time left of ``deadline``."""
    return TakeLock(cache, network, attachment, exclusive, deadline.left(), command, deadline.limit)


def _del_netns(rt: RuntimeConf) -> RuntimeConf:
    """``rt`` for a DEL: a netns path that is no longer a network namespace (a pin left empty)
    becomes an empty ``CNI_NETNS``, as the spec allows; a missing path is passed as given."""
    if not rt.netns:
        return rt
    from .netns import _not_netns

    why = _not_netns(rt.netns)
    if why is None:
        return rt
    log.warning("DEL of %s/%s: %s; CNI_NETNS is passed empty", rt.container_id, rt.ifname, why)
    return attrs.evolve(rt, netns="")


def _call(
    chain: _Chain,
    plugin: PluginConfig,
    path: str,
    env: Mapping[str, str],
    deadline: Deadline,
    rt: RuntimeConf | None = None,
    lock_fd: int | None = None,
    **stdin: Any,
) -> RunPlugin:
    """The effect of one plugin call: its stdin (``rq.plugin_stdin``, given ``prev_result`` or
    ``valid_attachments``), the environment, the time left, the lock it inherits (ADD)."""
    command = env["CNI_COMMAND"]
    capability_args = None if rt is None else rt.capability_args
    return RunPlugin(
        path,
        rq.plugin_stdin(
            command,
            plugin.raw,
            name=chain.name,
            cni_version=chain.cni_version,
            capability_args=capability_args,
            **stdin,
        ),
        env,
        deadline.left(),
        plugin.type,
        command,
        chain.name,
        "" if rt is None else rt.container_id,
        deadline.limit,
        lock_fd,
    )


def _run(
    effect: RunPlugin,
    decode: Callable[[bytes], _R] = bytes,  # type: ignore[assignment]
) -> Op[_R]:
    """Run one plugin and ``decode`` its stdout: the one place a ``PluginError`` (no time
    left, a failed run, a timeout, an undecodable output) gets the context of ``effect``."""
    try:
        if effect.timeout is not None and effect.timeout <= 0:
            raise PluginTimeoutError(
                timeout_message(
                    effect.command, effect.limit, f"plugin {effect.plugin} could not start"
                )
            )
        return decode((yield effect))
    except PluginError as e:
        in_context(effect, e)
        raise


def _result(version: str, plugin: str) -> Callable[[bytes], Result]:
    """The decoder of a plugin's result (an invalid one is the plugin's ``PluginError``)."""

    def decode(out: bytes) -> Result:
        try:
            return result_from_bytes(out, default_version=version)
        except CNIError as e:
            raise PluginError(
                f"plugin {plugin} returned an invalid result: {e.msg}", e.details, code=e.code
            ) from e

    return decode


@contextmanager
def logged(effect: RunPlugin) -> Iterator[None]:
    """Around one plugin run: its DEBUG record on the ``libcni`` logger (docs/errors.rst)."""
    if not log.isEnabledFor(logging.DEBUG):
        yield
        return
    started = time.monotonic()
    outcome: BaseException | None = None
    try:
        yield
    except BaseException as e:
        outcome = e
        raise
    finally:
        _log_run(effect, time.monotonic() - started, outcome)


def _log_run(effect: RunPlugin, duration: float, outcome: BaseException | None) -> None:
    exit_code: int | None = 0
    sig: int | None = None
    if outcome is None:
        how = "exit status 0"
    elif isinstance(outcome, PluginError):
        exit_code, sig = outcome.exit_code, outcome.signal
        if isinstance(outcome, PluginTimeoutError):
            how = "timed out" + (f", killed by signal {sig}" if sig is not None else "")
        elif sig is not None:
            how = f"killed by signal {sig}"
        elif exit_code is not None:
            how = f"exit status {exit_code}"
        else:
            how = "failed to start" if outcome.code == 5 else "failed"
    else:
        exit_code = None
        how = f"interrupted ({type(outcome).__name__})"
    extra = {k: getattr(effect, k) for k in ("plugin", "command", "network", "container_id")}
    extra.update(duration=duration, exit_code=exit_code, signal=sig)
    log.debug(
        "plugin %s %s network=%s container=%s: %s after %.3fs",
        effect.plugin,
        effect.command,
        effect.network or "-",
        effect.container_id or "-",
        how,
        duration,
        extra=extra,
    )


class Operations:
    """The state and the operation generators shared by ``CNIConfig`` and ``AsyncCNIConfig``."""

    def __init__(
        self,
        path: Sequence[str | os.PathLike[str]],
        cache_dir: str | os.PathLike[str] | None = None,
        exec: Exec | None = None,
        timeout: float | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        # Who is told of every operation and plugin run; None: the drivers' fast path.
        self._watch: Watch | None = None
        if observers:
            from ._events import Watch  # loaded only for observers

            self._watch = Watch.of(observers)
        if isinstance(path, (str, os.PathLike)):
            # A lone string would otherwise be searched letter by letter.
            path = [path]
        self.path: tuple[str, ...] = tuple(os.fspath(p) for p in path)
        self.cache_dir: str | None = None if cache_dir is None else os.fspath(cache_dir)
        self.exec: Exec = exec if exec is not None else RawExec()
        self.timeout = check_timeout(timeout)
        self._caches: dict[str, ResultCache] = {}
        self._probes: dict[tuple[str, int, int], PluginInfo] = {}
        self._probe_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={list(self.path)!r}, cache_dir={self.cache_dir!r})"

    def _cache(self, rt: RuntimeConf | None = None) -> ResultCache:
        """The cache: the ``CNIConfig``'s directory wins over the ``RuntimeConf``'s."""
        directory = self.cache_dir
        if directory is None and rt is not None and rt.cache_dir is not None:
            directory = os.fspath(rt.cache_dir)
        directory = directory or default_cache_dir()
        cache = self._caches.get(directory)
        if cache is None:
            cache = self._caches.setdefault(directory, ResultCache(directory))
        return cache

    @property
    def cache(self) -> ResultCache:
        """The cache of ``cache_dir`` (else the default directory), the operations' one."""
        return self._cache()

    def _find(self, plugin_type: str) -> str:
        return self.exec.find_in_path(plugin_type, self.path)

    def _deadline(self, timeout: float | None) -> Deadline:
        """The deadline of one operation: its ``timeout``, else the default."""
        return Deadline(self.timeout if timeout is None else timeout)

    def _cached_prev(self, entry: CacheEntry | None, version: str) -> dict[str, Any] | None:
        """The cached result of ``entry`` converted to ``version``, as a JSON object."""
        if entry is None or entry.result is None:
            return None
        try:
            result = result_from_dict(entry.result)
        except CNIError as e:
            raise CacheError(
                f"cached result for {entry.network_name}-{entry.container_id}-{entry.ifname} "
                "cannot be decoded",
                str(e),
            ) from e
        return result.as_version(version).to_dict()

    def _read_for_del(
        self, cache: ResultCache, chain: _Chain, rt: RuntimeConf, with_prev: bool
    ) -> tuple[dict[str, Any] | None, FileIdent | None]:
        """DEL's prevResult (``with_prev``) and the entry's identity, to remove it after the
        plugins. None for a missing or unusable entry (a warning; DEL goes on); ``CacheError``
        for one that cannot be read."""
        what = f"DEL of {chain.name}-{rt.container_id}-{rt.ifname} goes on without prevResult"
        try:
            entry, ident = cache.results.read_ident(chain.name, rt.container_id, rt.ifname)
        except CorruptEntryError as e:
            log.warning("%s: unusable cache entry: %s", what, e)
            return None, None
        try:
            return (self._cached_prev(entry, chain.cni_version) if with_prev else None), ident
        except (CacheError, VersionError) as e:
            log.warning("%s: the cached result is unusable: %s", what, e)
            return None, ident

    def _env(self, command: str, rt: RuntimeConf | None = None) -> dict[str, str]:
        """The environment of every plugin of one operation, refused before any plugin runs."""
        if rt is None:
            return rq.operation_env(command, path=self.path)
        return rq.operation_env(
            command,
            container_id=rt.container_id,
            netns=rt.netns,
            ifname=rt.ifname,
            args=rt.args,
            capability_args=rt.capability_args,
            path=self.path,
        )

    def _add(
        self, net: NetworkConfigList | PluginConfig, rt: RuntimeConf, timeout: float | None
    ) -> Op[Result]:
        """ADD: run the chain in order, each plugin getting the previous result; cache the last."""
        check_timeout(timeout)
        chain = _Chain.of(net)
        _require_plugins(chain)
        deadline = self._deadline(timeout)
        env = self._env(rq.ADD, rt)
        rq.validate_attachment(rt.container_id, chain.name, rt.ifname)
        paths = [self._find(plugin.type) for plugin in chain.plugins]
        cache = self._cache(rt)
        release_net = yield _lock_within(deadline, cache, chain.name, rq.ADD, exclusive=False)
        try:
            release = yield _lock_within(
                deadline, cache, chain.name, rq.ADD, (rt.container_id, rt.ifname)
            )
            try:
                # Another attachment's entry under the same file name: refuse before running.
                cache.results.check_owner(chain.name, rt.container_id, rt.ifname)
                record = CacheEntry.from_runtime(rt, network=chain.name, config=chain.config)
                # The write-ahead record: whenever we die, a DEL, teardown or GC finds it.
                with cache.wal.begin(record) as written:
                    prev: dict[str, Any] | None = None
                    result: Result | None = None
                    held = _held_fd(release)  # the plugins hold the lock too (behaviour §4.3)
                    for plugin, path in zip(chain.plugins, paths, strict=True):
                        call = _call(chain, plugin, path, env, deadline, rt, held, prev_result=prev)
                        result = yield from _run(call, _result(chain.cni_version, plugin.type))
                        prev = result.to_dict()
                    entry = attrs.evolve(record, result=prev, kind=CNI_CACHE_V1)
                    # The entry's JSON is the record's and the result (encoded once).
                    yield CacheIO(cache.results.write, (entry, completed_json(written.json, prev)))
                    # The record stays (the container's index), marked complete.
                    written.complete()
                assert result is not None  # _require_plugins: at least one ran
                return result
            finally:
                release()
        finally:
            release_net()

    def _check(
        self, net: NetworkConfigList | PluginConfig, rt: RuntimeConf, timeout: float | None
    ) -> Op[None]:
        """CHECK: every plugin in order, each with the cached result as prevResult."""
        check_timeout(timeout)
        chain = _Chain.of(net)
        if parse_version(chain.cni_version) < _V040:
            raise CheckNotSupportedError(
                f'configuration version "{chain.cni_version}" does not support the CHECK command',
                chain.name,
            )
        if isinstance(net, NetworkConfigList) and net.disable_check:
            return None
        _require_plugins(chain)
        deadline = self._deadline(timeout)
        env = self._env(rq.CHECK, rt)
        paths = [self._find(plugin.type) for plugin in chain.plugins]
        cache = self._cache(rt)
        release = yield _lock_within(
            deadline, cache, chain.name, rq.CHECK, (rt.container_id, rt.ifname)
        )
        try:
            prev = self._cached_prev(
                cache.results.read(chain.name, rt.container_id, rt.ifname), chain.cni_version
            )
            for plugin, path in zip(chain.plugins, paths, strict=True):
                yield from _run(_call(chain, plugin, path, env, deadline, rt, prev_result=prev))
        finally:
            release()
        return None

    def _delete(
        self,
        net: NetworkConfigList | PluginConfig,
        rt: RuntimeConf,
        timeout: float | None,
        *,
        network_locked: bool = False,
        deadline: Deadline | None = None,
    ) -> Op[None]:
        """DEL: every plugin in reverse order, with the cached result (>= 0.4.0); then forget it."""
        check_timeout(timeout)
        chain = _Chain.of(net)
        with_prev = parse_version(chain.cni_version) >= _V040
        _require_plugins(chain)
        deadline = deadline or self._deadline(timeout)
        env = self._env(rq.DEL, _del_netns(rt))
        cache = self._cache(rt)
        release_net = (
            None
            if network_locked
            else (yield _lock_within(deadline, cache, chain.name, rq.DEL, exclusive=False))
        )
        try:
            release = yield _lock_within(
                deadline, cache, chain.name, rq.DEL, (rt.container_id, rt.ifname)
            )
            try:
                prev, ident = self._read_for_del(cache, chain, rt, with_prev)
                for plugin in reversed(chain.plugins):
                    path = self._find(plugin.type)
                    yield from _run(_call(chain, plugin, path, env, deadline, rt, prev_result=prev))
                # The entry, then the record: a DEL that failed above kept both.
                yield CacheIO(cache.forget, (chain.name, rt.container_id, rt.ifname, ident))
            finally:
                release()
        finally:
            if release_net is not None:
                release_net()
        return None
