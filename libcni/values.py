"""The immutable values passed to and returned by the operations."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import attrs

if TYPE_CHECKING:
    from .capabilities import RuntimeConfig

__all__ = ["Args", "CapabilityArgs", "GCArgs", "GCAttachment", "NetworkAttachment", "RuntimeConf"]
__all__ += ["capability_mapping"]

#: ``CNI_ARGS``: ``(key, value)`` pairs, or a mapping (its order kept).
Args = Sequence[tuple[str, str]] | Mapping[str, str]
#: Capability arguments: a mapping of JSON values, or a typed
#: :class:`~libcni.capabilities.RuntimeConfig`.
CapabilityArgs = Union[Mapping[str, Any], "RuntimeConfig"]  # a forward reference needs Union


def _pairs(args: Args) -> tuple[tuple[str, str], ...]:
    """``args`` as a tuple of pairs: a mapping gives its items, in its order."""
    if isinstance(args, Mapping):
        return tuple(args.items())
    if isinstance(args, (str, bytes, bytearray)) or not isinstance(args, Iterable):
        raise TypeError(
            "args must be (key, value) pairs of strings or a mapping of strings, "
            f'e.g. [("IgnoreUnknown", "1")], not {type(args).__name__}: {args!r:.80}'
        )
    # Odd shapes kept as they are: the request layer refuses them, naming the pair.
    return tuple(tuple(pair) if isinstance(pair, (list, tuple)) else pair for pair in args)  # type: ignore[misc]


def capability_mapping(value: CapabilityArgs | None) -> dict[str, Any]:
    """Capability arguments as the plain JSON mapping the plugins get (the one conversion).

    A mapping is copied; a :class:`~libcni.capabilities.RuntimeConfig` gives
    :meth:`~libcni.capabilities.RuntimeConfig.capability_args`; ``None`` is
    empty. Anything else is a :class:`TypeError`.
    """
    if type(value) is dict:  # the common case, first
        return dict(value) if value else {}
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value) if value else {}
    from .capabilities import RuntimeConfig

    if isinstance(value, RuntimeConfig):
        return value.capability_args()
    raise TypeError(
        "capability_args must be a mapping or a libcni.RuntimeConfig, "
        f"not {type(value).__name__}: {value!r:.80}"
    )


@attrs.frozen
class RuntimeConf:
    """One attachment of a container to a network, as the runtime describes it.

    ``args`` (pairs, or a mapping whose order is kept) reach the plugins as
    ``CNI_ARGS``; ``capability_args`` (a mapping, or a typed
    :class:`~libcni.capabilities.RuntimeConfig`, stored as its mapping) become
    each plugin's ``runtimeConfig`` for the capabilities it declares.
    ``cache_dir`` is used when the ``CNIConfig`` names none.

    >>> RuntimeConf("c1", "/var/run/netns/c1", "eth0", args=[("K", "V")]).args
    (('K', 'V'),)
    """

    container_id: str
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    capability_args: dict[str, Any] = attrs.field(factory=dict, converter=capability_mapping)
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
