"""STATUS, VERSION, validation and the cache getters, over :class:`~libcni._ops.Operations`."""

from __future__ import annotations

import os

import attrs

from . import request as rq
from ._deadline import check_timeout
from ._effects import RunPlugin
from ._ops import _V110, Op, Operations, _call, _Chain, _run, log
from .cache import CNI_CACHE_V1, CacheEntry, CorruptEntryError
from .conf import NetworkConfigList, PluginConfig, _binaries
from .errors import (
    CacheError,
    CNIError,
    InvalidNetworkError,
    PluginError,
    PluginTimeoutError,
    VersionError,
)
from .types import Result, result_from_dict
from .values import NetworkAttachment, RuntimeConf
from .version import (
    LEGACY_PLUGIN_INFO,
    PluginInfo,
    or_default,
    parse_version,
    plugin_info_from_bytes,
)


def status(ops: Operations, net: NetworkConfigList, timeout: float | None) -> Op[None]:
    """STATUS: every plugin in order (spec 1.1.0 and later); the first error is raised as is."""
    check_timeout(timeout)
    chain = _Chain.of(net)
    if parse_version(chain.cni_version) < _V110:
        return None
    deadline = ops._deadline(timeout)
    env = ops._env(rq.STATUS)
    for plugin in chain.plugins:
        yield from _run(_call(chain, plugin, ops._find(plugin.type), env, deadline))
    return None


def version_info(
    ops: Operations, plugin_type: str, timeout: float | None, path: str | None = None
) -> Op[PluginInfo]:
    """VERSION: what the plugin supports (a plugin that predates VERSION supports 0.1.0)."""
    check_timeout(timeout)
    path = path or ops._find(plugin_type)
    deadline = ops._deadline(timeout)
    stdin = rq.plugin_stdin(rq.VERSION, {}, name="", cni_version="")
    env = ops._env(rq.VERSION)
    effect = RunPlugin(
        path, stdin, env, deadline.left(), plugin_type, rq.VERSION, limit=deadline.limit
    )
    try:
        out: bytes = yield from _run(effect)
    except PluginError as e:
        legacy = e.msg.startswith("unknown CNI_COMMAND: VERSION")
        if legacy and not isinstance(e, PluginTimeoutError):
            return LEGACY_PLUGIN_INFO
        raise
    try:
        return plugin_info_from_bytes(out)
    except VersionError as e:
        e.msg = f"plugin {plugin_type}: {e.msg}"
        raise


def validate(
    ops: Operations, net: NetworkConfigList | PluginConfig, timeout: float | None
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
                info = yield from _probe(ops, kind, ops._find(kind), timeout)
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


def _probe(ops: Operations, plugin_type: str, path: str, timeout: float | None) -> Op[PluginInfo]:
    """VERSION of the binary at ``path``, probed once per path and modification time."""
    try:
        st = os.stat(path)
        key: tuple[str, int, int] | None = (path, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None:
        with ops._probe_lock:
            known = ops._probes.get(key)
        if known is not None:
            return known
    info = yield from version_info(ops, plugin_type, timeout, path)
    if key is not None:
        with ops._probe_lock:
            ops._probes[key] = info
    return info


def _entry(ops: Operations, chain: _Chain, rt: RuntimeConf) -> CacheEntry | None:
    for what, value in (
        ("network name", chain.name),
        ("container ID", rt.container_id),
        ("interface name", rt.ifname),
    ):
        if not value:
            raise CacheError(f"cannot look up the cache without a {what}")
    return ops._cache(rt).results.read(chain.name, rt.container_id, rt.ifname)


def cached_result(
    ops: Operations, net: NetworkConfigList | PluginConfig, rt: RuntimeConf
) -> Result | None:
    """The cached result of the attachment, converted to the version of ``net``."""
    chain = _Chain.of(net)
    prev = ops._cached_prev(_entry(ops, chain, rt), chain.cni_version)
    return None if prev is None else result_from_dict(prev)


def cached_config(
    ops: Operations, net: NetworkConfigList | PluginConfig, rt: RuntimeConf
) -> tuple[bytes, RuntimeConf] | None:
    """The configuration cached for the attachment at ADD and ``rt`` with the cached args."""
    chain = _Chain.of(net)
    entry = _entry(ops, chain, rt)
    if entry is None or entry.kind != CNI_CACHE_V1:
        # An attachment in progress: what its ADD recorded before its first plugin ran.
        try:
            entry = ops._cache(rt).wal.read(chain.name, rt.container_id, rt.ifname)
        except CorruptEntryError as e:
            # Killed while writing it: no plugin had run. Nothing is cached (GC removes it).
            log.warning("unusable write-ahead record, taken as absent: %s", e)
            return None
        if entry is None:
            return None
    cached = entry.runtime_conf(netns=rt.netns, cache_dir=rt.cache_dir)
    return entry.config, cached if cached.args else attrs.evolve(cached, args=rt.args)


def cached_attachments(ops: Operations, container_id: str = "") -> list[NetworkAttachment]:
    """The entries, and the records of attachments without one (``complete=False``)."""
    cache = ops._cache()
    found = cache.results.entries(container_id)
    complete = {(e.network_name, e.container_id, e.ifname) for e in found}
    found += [
        r
        for r in cache.wal.records(container_id)
        if (r.network_name, r.container_id, r.ifname) not in complete
    ]
    found.sort(key=lambda e: f"{e.network_name}-{e.container_id}-{e.ifname}")
    return [e.attachment() for e in found]
