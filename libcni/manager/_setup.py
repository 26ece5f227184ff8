"""Setup and its rollback: plan the networks, lock, DEL dead attempts, ADD (with the retry
of code 11), and on failure DEL everything attempted (``attach`` runs the same pieces)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from .. import _log as logging
from .. import request as rq
from .._deadline import TRY_AGAIN, Deadline
from ..cache import CacheEntry
from ..capabilities import check_plain
from ..errors import (
    CODE_TRY_AGAIN,
    AlreadyAttachedError,
    CNIError,
    ConfigError,
    NamespaceError,
    NotFoundError,
    NotReadyError,
    PluginError,
    PluginTimeoutError,
    SetupError,
    TeardownError,
    ValidationError,
)
from ..values import RuntimeConf, _pairs, capability_mapping
from ._effects import (
    Blocking,
    LockContainer,
    LoopbackUp,
    Op,
    Outcome,
    Pause,
    Together,
    call_add,
    call_delete,
    call_timeout,
    time_left,
)
from ._held import cached_net
from ._ready import problem
from ._state import INTERNAL_LOOPBACK, ContainerRequest, Item, State, ifnames, quoted, requests, why
from ._teardown import delete_each
from ._values import (
    LOOPBACK_IFNAME,
    LOOPBACK_NETWORK,
    AttachmentResult,
    ContainerNetworks,
    LoadedNetworks,
    NetworkRequest,
)

log = logging.getLogger("libcni")

#: How many (network, capability) warnings a manager remembers having logged.
_WARNED_MAX = 4096


class Run:
    """What a setup attempted and what came of it (``done``: the results by index)."""

    __slots__ = ("attempted", "done", "failure", "interrupted", "items")

    def __init__(self, items: Sequence[Item]) -> None:
        self.items = items
        self.attempted: list[Item] = []
        self.done: dict[int, AttachmentResult] = {}
        self.failure: CNIError | None = None  # the first failed ADD
        self.interrupted: BaseException | None = None

    def succeeded(self, i: int, result: Any) -> None:
        item = self.items[i]
        self.done[i] = AttachmentResult(item.network, item.ifname, result)


def refuse_not_netns(netns: str) -> None:
    """:class:`NamespaceError` when ``netns`` exists and is not a network namespace (never
    blocks on it; a path that does not exist is the plugins' to judge)."""
    from ..netns import _not_netns

    reason = _not_netns(netns)
    if reason is not None:
        raise NamespaceError(reason)


def _check_arguments(items: Sequence[Item]) -> None:
    """Refuse args and capability args that cannot be sent, naming the network."""
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


def _not_usable(state: State, loaded: LoadedNetworks, names: Sequence[str]) -> CNIError:
    """``NotFoundError``, ``ConfigError`` or ``NotReadyError``: why ``names`` cannot be used."""
    unknown = [n for n in names if why(loaded, n) is None]
    if unknown:
        e = NotFoundError(state.settings.conf_dir or "", unknown[0])
        e.msg = f"network(s) {quoted(unknown)} not configured {state.where()}"
        return e
    invalid = [n for n in names if n in loaded.invalid]
    if invalid:
        return ConfigError(
            f"network(s) {quoted(invalid)} cannot be used {state.where()}",
            "; ".join(f"{n}: {loaded.invalid[n]}" for n in invalid),
        )
    return NotReadyError(
        f"network(s) {quoted(names)} not ready: a plugin binary is not installed",
        "; ".join(f"{n}: {loaded.not_ready[n]}" for n in names),
    )


def _unused(items: Sequence[Item]) -> dict[str, list[str]]:
    """The capability arguments no network of the setup declares, with the networks given them."""
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
    return {key: networks for key, networks in given.items() if key not in used}


def _warn_unused(state: State, items: Sequence[Item]) -> None:
    """Log each capability argument no plugin receives (a misspelling?), once per network."""
    for key, networks in _unused(items).items():
        for network in networks:
            if (network, key) in state.warned:
                continue
            if len(state.warned) >= _WARNED_MAX:
                state.warned.clear()
            state.warned.add((network, key))
            log.warning(
                "capability argument %r reaches no plugin: no plugin of network %r "
                "declares it (a misspelling?)",
                key,
                network,
            )


def _requested(state: State, loaded: LoadedNetworks, req: ContainerRequest) -> list[NetworkRequest]:
    """The networks a setup attaches: those of ``req``, or the default ones (ready)."""
    if req.networks is None:
        found = problem(state, loaded)
        if found is not None:
            raise found
        return [NetworkRequest(n) for n in loaded.defaults]
    return requests(req.networks)


def plan(state: State, loaded: LoadedNetworks, req: ContainerRequest) -> list[Item]:
    """The networks of a setup with their interface names; refuses what it can."""
    container_id, netns = req.container_id, req.netns
    rq.validate_container_id(container_id)
    if not netns:
        raise ValidationError(
            "no network namespace given: setup needs the path of the container's network "
            "namespace (CNI_NETNS)"
        )
    args = _pairs(req.args)
    caps = capability_mapping(req.capability_args)
    wanted = _requested(state, loaded, req)
    unusable = [r.network for r in wanted if r.network not in loaded.networks]
    if unusable:
        raise _not_usable(state, loaded, unusable)
    names = ifnames(state.settings, container_id, wanted)
    items: list[Item] = []
    if state.plugin_loopback:
        rt = RuntimeConf(container_id, netns, LOOPBACK_IFNAME, args, caps)
        items.append(Item(LOOPBACK_NETWORK, LOOPBACK_IFNAME, state.loopback_net, rt))
    for r, ifname in zip(wanted, names, strict=True):
        own = caps if r.capability_args is None else r.capability_args
        rt = RuntimeConf(container_id, netns, ifname, (*args, *r.args), own)
        items.append(Item(r.network, ifname, loaded.networks[r.network], rt))
    _check_arguments(items)
    _warn_unused(state, items)
    return items


def setup(state: State, req: ContainerRequest, parallel: bool, timeout: float | None) -> Op:
    """Attach the container to its networks, or roll everything back."""
    loaded: LoadedNetworks = yield from state.current()
    items = plan(state, loaded, req)
    container_id, netns = req.container_id, req.netns
    yield Blocking(refuse_not_netns, (netns,))
    timeout = state.timeout_or(timeout)
    release = yield LockContainer(state.cache, container_id, timeout, "setup")
    try:
        attached, dead = yield Blocking(_still_cached, (state, container_id, items))
        if attached is not None:
            raise AlreadyAttachedError(attached[0], container_id, attached[1])
        deadline = Deadline(timeout)
        yield from del_dead_attempts(state, container_id, dead, deadline)
        run = Run(items)
        try:
            yield from _attach_all(state, run, netns, parallel, deadline)
        except BaseException as e:  # cancelled, or interrupted: roll back, then re-raise
            run.interrupted = e
        if run.failure is None and run.interrupted is None:
            results = tuple(run.done[i] for i in range(len(items)))
            return ContainerNetworks.merge(container_id, results, netns=netns)
        yield from undo(state, container_id, run)
    finally:
        release()
    return None  # not reached: undo raises


def _attach_all(state: State, run: Run, netns: str, parallel: bool, deadline: Deadline) -> Op:
    """ADD the networks of ``run`` in order (``parallel``: after loopback, together)."""
    run.failure = yield from _internal_loopback(state, netns, deadline)
    if run.failure is not None:
        return None
    items = run.items
    first = len(items) if not parallel else (1 if state.plugin_loopback else 0)
    for i in range(first):
        run.attempted.append(items[i])
        try:
            result = yield from attempt(state, items[i], deadline)
        except CNIError as e:
            run.failure = e
            return None
        run.succeeded(i, result)
    if first < len(items):
        rest = range(first, len(items))
        run.attempted.extend(items[i] for i in rest)
        outcomes: list[Outcome] = yield Together(
            tuple(attempt(state, items[i], deadline) for i in rest)
        )
        for i, (value, error) in zip(rest, outcomes, strict=True):
            if error is None:
                run.succeeded(i, value)
            elif isinstance(error, CNIError):
                run.failure = run.failure or error
            else:
                run.interrupted = run.interrupted or error
    return None


def _internal_loopback(state: State, netns: str, deadline: Deadline) -> Op:
    """With ``loopback="internal"``: ``lo`` up in ``netns``; the error, if any."""
    if state.settings.loopback != INTERNAL_LOOPBACK:
        return None
    try:
        yield LoopbackUp(netns, deadline.left(), deadline.limit)
    except CNIError as e:
        return e
    return None


def _retry_pause(
    state: State, e: PluginError, retries: int, pauses: Iterator[float]
) -> float | None:
    """The back-off before attempt ``retries + 2`` after ``e`` (the next of ``pauses``);
    ``None``: not retried."""
    if (
        retries >= state.settings.retry_attempts
        or e.code != CODE_TRY_AGAIN
        or isinstance(e, PluginTimeoutError)
    ):
        return None
    return next(pauses, None)


def _del_before_retry(item: Item, error: PluginError, deadline: Deadline) -> Op:
    """DEL the network of a failed attempt before the next one; ``error`` when it fails."""
    try:
        yield call_delete(item.net, item.rt, call_timeout(deadline))
    except CNIError as d:
        log.warning(
            "network %r (%s) of container %r: DEL before a new attempt failed, not retrying: %s",
            item.network,
            item.ifname,
            item.rt.container_id,
            d,
        )
        raise error from d


def attempt(state: State, item: Item, deadline: Deadline) -> Op:
    """ADD one network; after a code 11, DEL, back off (:data:`~libcni._deadline.TRY_AGAIN`)
    and ADD again, up to ``retry_attempts`` more times within the setup's timeout (the DEL
    failing or too little time left: the code-11 error is the failure)."""
    container_id = item.rt.container_id
    retries = 0
    pauses = TRY_AGAIN.pauses(deadline, whole=True)
    while True:
        left = time_left(deadline, item.network, container_id)
        try:
            result = yield call_add(item.net, item.rt, left)
            return result
        except PluginError as e:
            pause = _retry_pause(state, e, retries, pauses)
            if pause is None:
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
                state.settings.retry_attempts + 1,
                pause,
            )
            error = e
        if deadline.expired:
            raise error
        yield from _del_before_retry(item, error, deadline)
        remaining = deadline.left()
        if remaining is not None and remaining <= pause:
            raise error  # no time left for another attempt
        yield Pause(pause)


def _still_cached(
    state: State, container_id: str, items: Sequence[Item]
) -> tuple[tuple[str, str] | None, list[CacheEntry]]:
    """The ``(network, ifname)`` of an entry of the container, if any; the records of planned
    attachments without an entry (dead attempts, DELeted before the setup)."""
    cache = state.cache
    records = {(r.network_name, r.ifname): r for r in cache.records(container_id)}
    keys = [(item.network, item.ifname) for item in items]
    for network, ifname in [*keys, *records]:
        if os.path.lexists(cache.entry_path(network, container_id, ifname)):
            return (network, ifname), []
    return None, [records[k] for k in keys if k in records]


def del_dead_attempts(
    state: State, container_id: str, dead: Sequence[CacheEntry], deadline: Deadline
) -> Op:
    """DEL each record of an earlier attempt; one failing is a ``SetupError`` (it stays)."""
    for record in reversed(dead):
        try:
            net, rt = cached_net(state, record, record.netns)
            log.warning(
                "network %r (%s) of container %r is in progress from an earlier setup that "
                "did not finish; DELeting it before setting it up again",
                record.network_name,
                record.ifname,
                container_id,
            )
            yield call_delete(net, rt, time_left(deadline, record.network_name, container_id))
        except CNIError as e:
            raise SetupError(container_id, e) from e
    return None


def undo(state: State, container_id: str, run: Run) -> Op:
    """Roll back what ``run`` attempted, then raise the interruption or a :class:`SetupError`."""
    rollback_errors: list[CNIError] = []
    try:  # every attempted network, last first, each with a full timeout
        timeout = state.timeout_or(None)
        yield from delete_each(state, container_id, run.attempted, "", timeout, "rollback", True)
    except TeardownError as e:
        rollback_errors = e.errors
    if run.interrupted is not None:
        raise run.interrupted
    assert run.failure is not None
    partial = tuple(run.done[i] for i in sorted(run.done))
    raise SetupError(container_id, run.failure, partial, rollback_errors)
