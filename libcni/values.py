"""The immutable values passed to and returned by the operations."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["GCArgs", "GCAttachment", "NetworkAttachment", "RuntimeConf"]


def _pairs(args: Sequence[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    if isinstance(args, (str, bytes, bytearray, Mapping)) or not isinstance(args, Iterable):
        raise TypeError(
            "RuntimeConf args must be a sequence of (key, value) pairs of strings, "
            f'e.g. [("IgnoreUnknown", "1")], not {type(args).__name__}: {args!r:.80}'
        )
    # Keep odd shapes as they are (a 3-tuple, a non-string) so that the request
    # layer refuses them with a ConfigError naming the pair, before any plugin runs.
    return tuple(tuple(pair) if isinstance(pair, (list, tuple)) else pair for pair in args)  # type: ignore[misc]


def _mapping(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value) if value else {}


@attrs.frozen
class RuntimeConf:
    """One attachment of a container to a network, as the runtime describes it.

    ``args`` reach the plugins as ``CNI_ARGS``; ``capability_args`` become each
    plugin's ``runtimeConfig`` for the capabilities it declares.
    ``cache_dir`` is used when the ``CNIConfig`` names none.

    >>> RuntimeConf("c1", "/var/run/netns/c1", "eth0", args=[("K", "V")]).args
    (('K', 'V'),)
    """

    container_id: str
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    capability_args: dict[str, Any] = attrs.field(factory=dict, converter=_mapping)
    cache_dir: str | os.PathLike[str] | None = None


@attrs.frozen
class GCAttachment:
    """An attachment that is still in use: GC leaves it alone."""

    container_id: str
    ifname: str


def _attachments(value: Sequence[GCAttachment]) -> tuple[GCAttachment, ...]:
    return tuple(value)


@attrs.frozen
class GCArgs:
    """The arguments of a garbage collection: the attachments that are still valid."""

    valid_attachments: tuple[GCAttachment, ...] = attrs.field(default=(), converter=_attachments)


@attrs.frozen
class NetworkAttachment:
    """A cached attachment: what ADD recorded for one container, network and interface.

    ``complete`` is ``False`` for an attachment *in progress*: its ADD wrote
    its write-ahead record (configuration, netns, args, capability args)
    before its first plugin ran but cached no result, because it failed or its
    runtime died. Such an attachment must still be DELeted: the plugins that
    ran may hold resources.
    """

    container_id: str
    network: str
    ifname: str
    config: bytes
    netns: str = ""
    cni_args: tuple[tuple[str, str], ...] = ()
    capability_args: dict[str, Any] = attrs.field(factory=dict)
    complete: bool = True
