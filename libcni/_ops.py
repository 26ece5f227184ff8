"""The rules of every operation, written once for the sync and the async API.

Each operation is a generator that decides what to do and *yields effects*:
:class:`RunPlugin` (run this binary with this stdin and environment),
:class:`TakeLock` (hold this cache lock) and :class:`CacheIO` (a cache call
that waits for the disk: the durable write of ADD, the removal of DEL). A
driver performs each effect and sends back its outcome (the plugin's stdout, a
function that releases the lock, the call's return value), or throws the
exception it raised. ``CNIConfig`` drives the generators with blocking calls;
``AsyncCNIConfig`` awaits the same effects, running :class:`CacheIO` in a
worker thread so that an ``fsync`` does not stall the event loop. Cache reads
are short and done inline.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import (
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from . import _log as logging  # logging, imported at first use
from . import request as rq
from ._deadline import Deadline, check_timeout, timeout_message
from ._effects import CacheIO, Effect, GCNetwork, Release, RunPlugin, TakeLock, in_context
from .cache import (
    CNI_CACHE_V1,
    CacheEntry,
    CorruptEntryError,
    ResultCache,
    completed_json,
    default_cache_dir,
)
from .conf import (
    NetworkConfigList,
    PluginConfig,
    _binaries,
    conf_from_bytes,
    conf_list_from_bytes,
    conf_list_from_conf,
)
from .errors import (
    CacheError,
    CheckNotSupportedError,
    CNIError,
    ConfigError,
    GCError,
    InvalidNetworkError,
    PluginError,
    PluginTimeoutError,
    VersionError,
)
from .invoke import Exec, RawExec
from .types import Result, result_from_bytes, result_from_dict
from .values import GCArgs, NetworkAttachment, RuntimeConf
from .version import (
    LEGACY_PLUGIN_INFO,
    PluginInfo,
    or_default,
    parse_version,
    plugin_info_from_bytes,
)

if TYPE_CHECKING:
    from ._events import Observer, Watch
    from .cache import FileIdent, GCScan

log = logging.getLogger("libcni")

_V040 = (0, 4, 0)
_V110 = (1, 1, 0)

#: The operation of ``validate_network_list``/``validate_network`` in observers' events
#: (the others are the CNI commands, ``request.ADD`` ...).
VALIDATE = "VALIDATE"


def exec_options(effect: RunPlugin, exec_: Exec, method: str = "exec_plugin") -> dict[str, int]:
    """The keywords of ``exec_``'s ``method`` beyond the protocol's four: the lock to hand
    on, to :class:`RawExec`'s own method only (a custom ``Exec``, or a subclass that
    overrides the method, is called as the protocol says)."""
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
    disable_check: bool = False
    disable_gc: bool = False

    @classmethod
    def of(cls, net: NetworkConfigList | PluginConfig) -> _Chain:
        if isinstance(net, PluginConfig):
            return cls(net.name, net.cni_version, (net,), net.bytes)
        if not isinstance(net, NetworkConfigList):
            raise TypeError(
                f"expected a NetworkConfigList or PluginConfig, not {type(net).__name__}"
            )
        return cls(
            net.name,
            net.cni_version,
            tuple(net.plugins),
            net.effective_bytes,  # the list as it runs, drop-in plugins included
            net.disable_check,
            net.disable_gc,
        )


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
    hint = (
        f"; for a whole list use {method.replace('_network', '_network_list', 1)}()"
        if isinstance(net, NetworkConfigList)
        else ""
    )
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


_T = TypeVar("_T")


def _del_netns(rt: RuntimeConf) -> RuntimeConf:
    """``rt`` for a DEL: a netns path that exists but is no longer a network namespace (a pin
    left empty) is passed as an empty ``CNI_NETNS``, as the spec allows for DEL, so that the
    plugins clean up what they can (they fail on such a path). A path that does not exist
    is passed as given."""
    if not rt.netns:
        return rt
    from .netns import _not_netns

    why = _not_netns(rt.netns)
    if why is None:
        return rt
    log.warning("DEL of %s/%s: %s; CNI_NETNS is passed empty", rt.container_id, rt.ifname, why)
    return attrs.evolve(rt, netns="")


def _stdout(out: bytes) -> bytes:
    return out


def _run(
    effect: RunPlugin,
    decode: Callable[[bytes], _T] = _stdout,  # type: ignore[assignment]
) -> Generator[Effect, Any, _T]:
    """Run one plugin and ``decode`` its stdout: the one place a plugin error gets its context.

    Whatever went wrong (no time left, the run failed or timed out, the
    output does not decode), the ``PluginError`` is given the plugin, the
    command, the network and the container of ``effect``; a timeout is
    worded against the operation's limit.
    """
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
    """Around one plugin run, for both drivers: its DEBUG record.

    The record (on the ``libcni`` logger) carries, as attributes, ``plugin``,
    ``command``, ``network``, ``container_id``, ``duration`` (seconds),
    ``exit_code`` and ``signal`` (``None`` when not known: a timeout gives
    the signal that killed the plugin, a cancellation neither).
    """
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
    log.debug(
        "plugin %s %s network=%s container=%s: %s after %.3fs",
        effect.plugin,
        effect.command,
        effect.network or "-",
        effect.container_id or "-",
        how,
        duration,
        extra={
            "plugin": effect.plugin,
            "command": effect.command,
            "network": effect.network,
            "container_id": effect.container_id,
            "duration": duration,
            "exit_code": exit_code,
            "signal": sig,
        },
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
        # Who is told of every operation and plugin run (libcni._events);
        # None when no one is: the drivers' fast path.
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

    # -- helpers ---------------------------------------------------------

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
        """The cache of ``cache_dir`` (the default directory when none was given), the one
        the operations use: a network manager takes its container locks there."""
        return self._cache()

    def _find(self, plugin_type: str) -> str:
        return self.exec.find_in_path(plugin_type, self.path)

    def _deadline(self, timeout: float | None) -> Deadline:
        """The deadline of one operation (its ``timeout``, else the default; both checked at
        the public entry: ``check_timeout``, the one validation of a timeout)."""
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
        self,
        cache: ResultCache,
        chain: _Chain,
        rt: RuntimeConf,
        with_prev: bool,
    ) -> tuple[dict[str, Any] | None, FileIdent | None]:
        """DEL's prevResult (``with_prev``), read before any plugin runs, and the entry's identity.

        The identity lets the entry be removed after the plugins without
        being read again (``Entries.remove_read``). A missing entry, or
        another attachment's, gives none. So does one
        whose content is unusable (empty, corrupt, unconvertible): a warning
        is logged and DEL goes on; the entry is removed only once every
        plugin has succeeded. An entry that cannot be *read* (an I/O error)
        raises ``CacheError``: nothing runs and the entry stays.
        """
        try:
            entry, ident = cache.results.read_ident(chain.name, rt.container_id, rt.ifname)
        except CorruptEntryError as e:
            log.warning(
                "DEL of %s-%s-%s goes on without prevResult: unusable cache entry: %s",
                chain.name,
                rt.container_id,
                rt.ifname,
                e,
            )
            return None, None
        if not with_prev:
            return None, ident
        try:
            return self._cached_prev(entry, chain.cni_version), ident
        except (CacheError, VersionError) as e:
            log.warning(
                "DEL of %s-%s-%s goes on without prevResult: the cached result is unusable: %s",
                chain.name,
                rt.container_id,
                rt.ifname,
                e,
            )
            return None, ident

    def _env(self, command: str, rt: RuntimeConf | None = None) -> dict[str, str]:
        """The environment of every plugin of one operation (``rq.operation_env``), taken once.

        Unrepresentable ``CNI_ARGS`` or capability arguments are refused here,
        before any plugin runs.
        """
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

    @staticmethod
    def _call(
        chain: _Chain,
        plugin: PluginConfig,
        path: str,
        env: Mapping[str, str],
        deadline: Deadline,
        rt: RuntimeConf | None = None,
        prev: dict[str, Any] | None = None,
        valid: Iterable[tuple[str, str]] = (),
    ) -> RunPlugin:
        """The effect of one plugin call: its stdin (``rq.plugin_stdin``), the environment, the time left."""
        command = env["CNI_COMMAND"]
        return RunPlugin(
            path,
            rq.plugin_stdin(
                command,
                plugin.raw,
                name=chain.name,
                cni_version=chain.cni_version,
                capability_args=None if rt is None else rt.capability_args,
                prev_result=prev,
                valid_attachments=valid,
            ),
            env,
            deadline.left(),
            plugin.type,
            command,
            chain.name,
            "" if rt is None else rt.container_id,
            deadline.limit,
        )

    # -- ADD, CHECK, DEL -------------------------------------------------

    def _add(
        self, net: NetworkConfigList | PluginConfig, rt: RuntimeConf, timeout: float | None
    ) -> Op[Result]:
        """ADD: run the chain in order, each plugin getting the previous result; cache the last."""
        check_timeout(timeout)
        chain = _Chain.of(net)
        _require_plugins(chain)
        deadline = self._deadline(timeout)
        env = self._env(rq.ADD, rt)
        paths = []
        for plugin in chain.plugins:
            paths.append(self._find(plugin.type))
            rq.validate_attachment(rt.container_id, chain.name, rt.ifname)
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
                # The write-ahead record, before the first plugin runs: whatever
                # instant the process dies at, a DEL, teardown or GC finds the attachment.
                # Inline in both drivers: a small write, no fsync; over the size cap, refused.
                with cache.wal.begin(record) as written:
                    prev: dict[str, Any] | None = None
                    result: Result | None = None
                    held = _held_fd(release)  # the plugins hold the lock too (behaviour §4.3)
                    for plugin, path in zip(chain.plugins, paths, strict=True):
                        call = self._call(chain, plugin, path, env, deadline, rt, prev)
                        result = yield from _run(
                            attrs.evolve(call, lock_fd=held),
                            _result(chain.cni_version, plugin.type),
                        )
                        prev = result.to_dict()
                    entry = attrs.evolve(record, result=prev, kind=CNI_CACHE_V1)
                    # The entry's JSON is the record's and the result (encoded once).
                    yield CacheIO(cache.results.write, (entry, completed_json(written.json, prev)))
                    # The record stays (the container's index) until the attachment is
                    # DELeted, marked complete: never in progress again (one fchmod).
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
        if isinstance(net, NetworkConfigList) and chain.disable_check:
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
                yield from _run(self._call(chain, plugin, path, env, deadline, rt, prev))
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
                    yield from _run(
                        self._call(chain, plugin, self._find(plugin.type), env, deadline, rt, prev)
                    )
                # The entry, then the record: a DEL that failed above kept both.
                yield CacheIO(cache.forget, (chain.name, rt.container_id, rt.ifname, ident))
            finally:
                release()
        finally:
            if release_net is not None:
                release_net()
        return None

    # -- GC and STATUS ---------------------------------------------------

    def _gc(
        self,
        nets: Sequence[NetworkConfigList],
        args: GCArgs | None,
        timeout: float | None,
        *,
        keep: Iterable[str] | None = None,
        cached: bool = False,
    ) -> Op[None]:
        """GC of ``nets`` (``gc_networks``): one listing of the cache, then for each network
        (a :class:`GCNetwork` effect) its lock, the DELs of what is stale, its plugins' GC.

        ``keep``: the valid containers, every attachment of which cached when
        GC holds the network's lock is valid too. ``cached``: also the
        networks known only from the cache, with a configuration they cached.
        Each network's ``timeout``; every error is raised at the end (``GCError``).
        """
        check_timeout(timeout)
        if isinstance(nets, NetworkConfigList):
            raise TypeError("gc_networks() expects a sequence of NetworkConfigList")
        chains = [_Chain.of(as_list(net, "gc_networks")) for net in nets]
        names = [c.name for c in chains]
        if len(set(names)) < len(names):
            raise ValueError(f"gc_networks: a network is given twice: {names}")
        for chain in chains:
            _require_plugins(chain)
        from .cache import GCScan

        scan = GCScan(self._cache(), [keep] if isinstance(keep, str) else keep, names)
        valid = [(a.container_id, a.ifname) for a in (args.valid_attachments if args else ())]
        errors: list[CNIError] = []
        todo = [net for net in nets if not net.disable_gc]
        alone = len(todo) == 1 and not cached  # gc_network_list: its errors as they are
        if cached:  # listed before any lock: each network lists results/ again if it changed
            yield CacheIO(scan.survey, (True,))
            for name in scan.networks():
                if name not in names:
                    net = yield from self._gc_cached_list(scan, name, errors)
                    if net is not None and not net.disable_gc:
                        todo.append(net)
        for net in todo:
            try:
                yield GCNetwork(net, self._gc_network(net, scan, valid, timeout))
            except GCError as e:
                errors.extend(e.errors)
            except CNIError as e:
                if alone:
                    raise
                errors.append(e)
        if scan.surveyed:
            temporaries, records = yield CacheIO(scan.clean_up, ())
            for path in (*temporaries, *records):
                log.warning("GC removed a temporary file a killed writer left: %s", path)
        if errors:
            raise GCError(errors)
        return None

    def _gc_cached_list(
        self, scan: GCScan, network: str, errors: list[CNIError]
    ) -> Op[NetworkConfigList | None]:
        """The configuration a network known only from the cache cached (a single plugin's
        as a list of one), or ``None`` (nothing usable; a ``ConfigError`` in ``errors``)."""
        att = yield CacheIO(scan.attachment_of, (network,))
        if att is None:
            return None
        try:
            net = conf_list_from_bytes(att.config)
            if not net.plugins and isinstance(net.raw.get("type"), str):
                net = conf_list_from_conf(conf_from_bytes(att.config))
            if net.plugins and net.name == network:
                return net
            problem = "it has no plugins" if net.name == network else f"it names {net.name!r}"
        except ConfigError as e:
            problem = str(e)
        errors.append(
            ConfigError(
                f"cannot collect network {network!r}, known only from the cache: the "
                f"configuration cached for container {att.container_id!r} is unusable: {problem}"
            )
        )
        return None

    def _gc_network(
        self,
        net: NetworkConfigList,
        scan: GCScan,
        valid: list[tuple[str, str]],
        timeout: float | None,
    ) -> Op[None]:
        """GC of one network under its exclusive lock: what ``scan`` says is stale DELeted (the
        entries, then the attachments in progress: a record and no entry), its unusable
        entries and records removed, then its plugins' GC (1.1.0) with the valid ones."""
        chain = _Chain.of(net)
        deadline = self._deadline(timeout)
        cache = scan.cache
        errors: list[CNIError] = []
        release = yield _lock_within(deadline, cache, chain.name, rq.GC, exclusive=True)
        try:
            # Listed under the first network's lock, again under the others' if it changed.
            yield CacheIO(scan.refresh if scan.surveyed else scan.survey, ())
            work = yield CacheIO(scan.collect, (chain.name, valid))
            errors.extend(work.errors)
            for name in work.removed:
                log.warning("GC removed unreadable cache entry %s", name)
            for cid, name, ident in work.unusable_records:
                try:
                    if (yield CacheIO(cache.wal.drop, (cid, name, ident))):
                        log.warning(
                            "GC removed record %s of container %s (unusable, or complete and "
                            "its entry gone: DELeted by another tool)",
                            name,
                            cid,
                        )
                except CacheError as e:
                    errors.append(e)
            for att in (*work.stale, *work.in_progress):
                error = yield from self._gc_del(net, att, cache, deadline)
                if error is not None:
                    errors.append(error)
            if parse_version(chain.cni_version) >= _V110:
                given = set(valid)
                valid = [*valid, *(p for p in work.valid if p not in given)]
                env = self._env(rq.GC)
                encoded = rq.EncodedAttachments(valid)  # their JSON made once for every plugin
                for plugin in chain.plugins:
                    try:
                        path = self._find(plugin.type)
                        yield from _run(
                            self._call(chain, plugin, path, env, deadline, valid=encoded)
                        )
                    except CNIError as e:
                        errors.append(e)
        finally:
            release()
        if errors:
            raise GCError(errors)
        return None

    def _gc_del(
        self, net: NetworkConfigList, att: CacheEntry, cache: ResultCache, deadline: Deadline
    ) -> Generator[Effect, Any, CNIError | None]:
        """GC's DEL of one stale attachment (a complete entry, or the record of one in
        progress); the error, if it failed.

        The DEL of an attachment in progress that fails is tried once more: a
        plugin killed half-way through its ADD can trip over what it left
        (the reference ``bridge`` plugin's first DEL fails when its ADD died
        before creating its masquerading chain, the second succeeds).
        """
        rt = att.runtime_conf(cache_dir=cache.dir)
        what = f"GC of stale {'in-progress ' if att.is_record else ''}attachment"
        for again in (att.is_record, False):
            try:
                yield from self._delete(net, rt, None, network_locked=True, deadline=deadline)
                return None
            except CNIError as e:
                if again and isinstance(e, PluginError) and not isinstance(e, PluginTimeoutError):
                    log.warning(
                        "%s %s/%s failed, trying its DEL once more: %s",
                        what,
                        att.container_id,
                        att.ifname,
                        e,
                    )
                    continue
                log.warning("%s %s/%s failed: %s", what, att.container_id, att.ifname, e)
                return e
        return None

    def _status(self, net: NetworkConfigList, timeout: float | None) -> Op[None]:
        """STATUS: every plugin in order (spec 1.1.0 and later); the first error is raised as is."""
        check_timeout(timeout)
        chain = _Chain.of(net)
        if parse_version(chain.cni_version) < _V110:
            return None
        deadline = self._deadline(timeout)
        env = self._env(rq.STATUS)
        for plugin in chain.plugins:
            yield from _run(self._call(chain, plugin, self._find(plugin.type), env, deadline))
        return None

    # -- VERSION and validation -----------------------------------------

    def _version_info(
        self, plugin_type: str, timeout: float | None, *, path: str | None = None
    ) -> Op[PluginInfo]:
        """VERSION: what the plugin supports (a plugin that predates VERSION supports 0.1.0)."""
        check_timeout(timeout)
        path = path or self._find(plugin_type)
        deadline = self._deadline(timeout)
        effect = RunPlugin(
            path,
            rq.plugin_stdin(rq.VERSION, {}, name="", cni_version=""),
            self._env(rq.VERSION),
            deadline.left(),
            plugin_type,
            rq.VERSION,
            limit=deadline.limit,
        )
        try:
            out: bytes = yield from _run(effect)
        except PluginError as e:
            if e.msg.startswith("unknown CNI_COMMAND: VERSION") and not isinstance(
                e, PluginTimeoutError
            ):
                return LEGACY_PLUGIN_INFO
            raise
        try:
            return plugin_info_from_bytes(out)
        except VersionError as e:
            e.msg = f"plugin {plugin_type}: {e.msg}"
            raise

    def _validate(
        self, net: NetworkConfigList | PluginConfig, timeout: float | None
    ) -> Op[list[str]]:
        """Check every plugin and IPAM plugin exists and supports the version; return the
        enabled capabilities."""
        check_timeout(timeout)
        chain = _Chain.of(net)
        version = or_default(chain.cni_version)
        errors: list[CNIError] = []
        capabilities: set[str] = set()
        for plugin in chain.plugins:
            capabilities.update(k for k, v in plugin.capabilities.items() if v is True)
            for kind in _binaries(plugin):
                try:
                    info = yield from self._probe(kind, self._find(kind), timeout)
                    if not info.supports(version):
                        raise VersionError(
                            f'plugin {kind} does not support config version "{version}"',
                            f"supported: {', '.join(info.supported_versions)}",
                        )
                except CNIError as e:
                    errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise InvalidNetworkError(chain.name, errors)
        return sorted(capabilities)

    def _probe(self, plugin_type: str, path: str, timeout: float | None) -> Op[PluginInfo]:
        """VERSION of the binary at ``path``, probed once per path and modification time."""
        try:
            st = os.stat(path)
            key: tuple[str, int, int] | None = (path, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key is not None:
            with self._probe_lock:
                known = self._probes.get(key)
            if known is not None:
                return known
        info = yield from self._version_info(plugin_type, timeout, path=path)
        if key is not None:
            with self._probe_lock:
                self._probes[key] = info
        return info

    # -- the cache getters (no plugin runs) ------------------------------

    def _entry(self, chain: _Chain, rt: RuntimeConf) -> CacheEntry | None:
        for what, value in (
            ("network name", chain.name),
            ("container ID", rt.container_id),
            ("interface name", rt.ifname),
        ):
            if not value:
                raise CacheError(f"cannot look up the cache without a {what}")
        return self._cache(rt).results.read(chain.name, rt.container_id, rt.ifname)

    def _cached_result(
        self, net: NetworkConfigList | PluginConfig, rt: RuntimeConf
    ) -> Result | None:
        chain = _Chain.of(net)
        entry = self._entry(chain, rt)
        if entry is None or entry.result is None:
            return None
        prev = self._cached_prev(entry, chain.cni_version)
        assert prev is not None
        return result_from_dict(prev)

    def _cached_config(
        self, net: NetworkConfigList | PluginConfig, rt: RuntimeConf
    ) -> tuple[bytes, RuntimeConf] | None:
        chain = _Chain.of(net)
        entry = self._entry(chain, rt)
        if entry is None or entry.kind != CNI_CACHE_V1:
            # An attachment in progress: what its ADD recorded before its first plugin ran.
            try:
                entry = self._cache(rt).wal.read(chain.name, rt.container_id, rt.ifname)
            except CorruptEntryError as e:
                # Killed while writing it: no plugin had run. Nothing is cached (GC removes it).
                log.warning("unusable write-ahead record, taken as absent: %s", e)
                return None
            if entry is None:
                return None
        cached = entry.runtime_conf(netns=rt.netns, cache_dir=rt.cache_dir)
        return entry.config, cached if cached.args else attrs.evolve(cached, args=rt.args)

    def _cached_attachments(self, container_id: str = "") -> list[NetworkAttachment]:
        """The entries, and the records of attachments without one (``complete=False``)."""
        cache = self._cache()
        found = cache.results.entries(container_id)
        complete = {(e.network_name, e.container_id, e.ifname) for e in found}
        found += [
            r
            for r in cache.wal.records(container_id)
            if (r.network_name, r.container_id, r.ifname) not in complete
        ]
        found.sort(key=lambda e: f"{e.network_name}-{e.container_id}-{e.ifname}")
        return [e.attachment() for e in found]


__all__ = [
    "VALIDATE",
    "CacheIO",
    "Effect",
    "GCNetwork",
    "Op",
    "Operations",
    "RunPlugin",
    "TakeLock",
    "as_list",
    "as_plugin",
    "exec_options",
    "in_context",
]
