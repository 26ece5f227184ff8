"""GC, as generators of effects over the state of :class:`~libcni._ops.Operations`
(``CNIConfig.gc_networks``, ``gc_network_list``; behaviour §4.6, §11.4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from . import request as rq
from ._deadline import Deadline, check_timeout
from ._effects import CacheIO, GCNetwork
from ._ops import (
    _V110,
    Op,
    Operations,
    _call,
    _Chain,
    _lock_within,
    _require_plugins,
    _run,
    as_list,
    log,
)
from .conf import NetworkConfigList, conf_from_bytes, conf_list_from_bytes, conf_list_from_conf
from .errors import CacheError, CNIError, ConfigError, GCError, PluginError, PluginTimeoutError
from .values import GCArgs
from .version import parse_version

if TYPE_CHECKING:
    from .cache import CacheEntry, GCScan, GCWork, ResultCache


def _chains(nets: Sequence[NetworkConfigList]) -> list[_Chain]:
    """The chains of ``nets``, each named once and with plugins."""
    if isinstance(nets, NetworkConfigList):
        raise TypeError("gc_networks() expects a sequence of NetworkConfigList")
    chains = [_Chain.of(as_list(net, "gc_networks")) for net in nets]
    names = [c.name for c in chains]
    if len(set(names)) < len(names):
        raise ValueError(f"gc_networks: a network is given twice: {names}")
    for chain in chains:
        _require_plugins(chain)
    return chains


def gc(
    ops: Operations,
    nets: Sequence[NetworkConfigList],
    args: GCArgs | None,
    timeout: float | None,
    *,
    keep: Iterable[str] | None = None,
    cached: bool = False,
) -> Op[None]:
    """GC of ``nets`` (``keep``: ``valid_containers``; ``cached``: ``cached_networks``), each
    network a :class:`GCNetwork` effect; every error raised at the end (``GCError``)."""
    check_timeout(timeout)
    names = [c.name for c in _chains(nets)]
    from .cache import GCScan

    scan = GCScan(ops._cache(), [keep] if isinstance(keep, str) else keep, names)
    valid = [(a.container_id, a.ifname) for a in (args.valid_attachments if args else ())]
    errors: list[CNIError] = []
    todo = [net for net in nets if not net.disable_gc]
    alone = len(todo) == 1 and not cached  # gc_network_list: its errors as they are
    if cached:
        todo += yield from _cached_networks(scan, names, errors)
    for net in todo:
        try:
            yield GCNetwork(net, _network(ops, net, scan, valid, timeout))
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


def _cached_networks(
    scan: GCScan, names: list[str], errors: list[CNIError]
) -> Op[list[NetworkConfigList]]:
    """The networks known only from the cache, to collect; listed before any lock."""
    yield CacheIO(scan.survey, (True,))
    found = []
    for name in scan.networks():
        net = None if name in names else (yield from _cached_list(scan, name, errors))
        if net is not None and not net.disable_gc:
            found.append(net)
    return found


def _cached_list(
    scan: GCScan, network: str, errors: list[CNIError]
) -> Op[NetworkConfigList | None]:
    """The configuration cached for a network known only from the cache, or ``None``."""
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


def _network(
    ops: Operations,
    net: NetworkConfigList,
    scan: GCScan,
    valid: list[tuple[str, str]],
    timeout: float | None,
) -> Op[None]:
    """GC of one network under its exclusive lock: what ``scan`` says is stale DELeted (the
    entries, then the attachments in progress: a record and no entry), its unusable
    entries and records removed, then its plugins' GC (1.1.0) with the valid ones."""
    chain = _Chain.of(net)
    deadline = ops._deadline(timeout)
    cache = ops._cache()
    errors: list[CNIError] = []
    release = yield _lock_within(deadline, cache, chain.name, rq.GC, exclusive=True)
    try:
        # Listed under the first network's lock, again under the others' if it changed.
        yield CacheIO(scan.refresh if scan.surveyed else scan.survey, ())
        work = yield CacheIO(scan.collect, (chain.name, valid))
        errors.extend(work.errors)
        yield from _remove_unusable(work, cache, errors)
        for att in (*work.stale, *work.in_progress):
            yield from _del(ops, net, att, cache, deadline, errors)
        if parse_version(chain.cni_version) >= _V110:
            given = set(valid)
            valid = [*valid, *(p for p in work.valid if p not in given)]
            yield from _plugins_gc(ops, chain, valid, deadline, errors)
    finally:
        release()
    if errors:
        raise GCError(errors)
    return None


def _remove_unusable(work: GCWork, cache: ResultCache, errors: list[CNIError]) -> Op[None]:
    """Log the unreadable entries the scan removed; remove the unusable records."""
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
    return None


def _plugins_gc(
    ops: Operations,
    chain: _Chain,
    valid: list[tuple[str, str]],
    deadline: Deadline,
    errors: list[CNIError],
) -> Op[None]:
    """GC sent to every plugin of ``chain`` with the ``valid`` attachments; errors collected."""
    env = ops._env(rq.GC)
    encoded = rq.EncodedAttachments(valid)  # their JSON made once for every plugin
    for plugin in chain.plugins:
        try:
            path = ops._find(plugin.type)
            yield from _run(_call(chain, plugin, path, env, deadline, valid_attachments=encoded))
        except CNIError as e:
            errors.append(e)
    return None


def _del(
    ops: Operations,
    net: NetworkConfigList,
    att: CacheEntry,
    cache: ResultCache,
    deadline: Deadline,
    errors: list[CNIError],
) -> Op[None]:
    """GC's DEL of one stale attachment, its error in ``errors``; a record's (an ADD killed
    half-way) is tried once more: ``bridge``'s first DEL can trip over what its ADD left."""
    rt = att.runtime_conf(cache_dir=cache.dir)
    what = f"{'in-progress ' if att.is_record else ''}attachment {att.container_id}/{att.ifname}"
    for again in (att.is_record, False):
        try:
            yield from ops._delete(net, rt, None, network_locked=True, deadline=deadline)
            return None
        except CNIError as e:
            if again and isinstance(e, PluginError) and not isinstance(e, PluginTimeoutError):
                log.warning("GC of stale %s failed, trying its DEL once more: %s", what, e)
                continue
            log.warning("GC of stale %s failed: %s", what, e)
            errors.append(e)
            return None
    return None
