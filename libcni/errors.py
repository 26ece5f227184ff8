"""The one exception hierarchy of libcni.

Every error the library raises on purpose is a :class:`CNIError`. Each carries
the CNI error ``code`` (a member of :class:`Code` when well known), a ``msg`` a person can
act on, and ``details`` (often the offending value). ``str(e)`` is ``msg``, or
``"msg; details"`` when there are details. The codes: docs/errors.rst.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

__all__ = ["CODE_DECODE", "CODE_INCOMPATIBLE_VERSION", "CODE_INTERNAL", "CODE_INVALID_CONFIG"]
__all__ += ["CODE_INVALID_ENV", "CODE_INVALID_NETNS", "CODE_IO", "CODE_LIMITED_CONNECTIVITY"]
__all__ += ["CODE_NOT_AVAILABLE", "CODE_TRY_AGAIN", "CODE_UNKNOWN_CONTAINER"]
__all__ += ["CODE_UNSUPPORTED_FIELD", "AlreadyAttachedError", "CNIError", "CacheError"]
__all__ += ["CheckNotSupportedError", "Code", "ConfigError", "DecodeError", "GCError"]
__all__ += ["InvalidNetworkError", "LockTimeoutError", "NamespaceError", "NoConfigsFoundError"]
__all__ += ["NotAttachedError", "NotFoundError", "NotReadyError", "PluginError"]
__all__ += ["PluginNotFoundError", "PluginTimeoutError", "SetupError", "TeardownError"]
__all__ += ["ValidationError", "VersionError"]

CODE_INCOMPATIBLE_VERSION = 1
CODE_UNSUPPORTED_FIELD = 2
CODE_UNKNOWN_CONTAINER = 3
CODE_INVALID_ENV = 4
CODE_IO = 5
CODE_DECODE = 6
CODE_INVALID_CONFIG = 7
CODE_INVALID_NETNS = 8
CODE_TRY_AGAIN = 11
CODE_NOT_AVAILABLE = 50
CODE_LIMITED_CONNECTIVITY = 51
CODE_INTERNAL = 999


class Code(enum.IntEnum):
    """The well-known CNI error codes (1-99 are reserved for these; 100+ are plugin-specific).

    A :class:`CNIError`'s ``code`` is a plain ``int``; being an ``IntEnum``,
    a member compares equal to its number:

    >>> Code.TRY_AGAIN_LATER == 11, Code(8).name
    (True, 'INVALID_NETNS')
    """

    INCOMPATIBLE_CNI_VERSION = CODE_INCOMPATIBLE_VERSION
    UNSUPPORTED_FIELD = CODE_UNSUPPORTED_FIELD
    UNKNOWN_CONTAINER = CODE_UNKNOWN_CONTAINER
    INVALID_ENVIRONMENT_VARIABLES = CODE_INVALID_ENV
    IO_FAILURE = CODE_IO
    DECODING_FAILURE = CODE_DECODE
    INVALID_NETWORK_CONFIG = CODE_INVALID_CONFIG
    INVALID_NETNS = CODE_INVALID_NETNS
    TRY_AGAIN_LATER = CODE_TRY_AGAIN
    PLUGIN_NOT_AVAILABLE = CODE_NOT_AVAILABLE
    PLUGIN_LIMITED_CONNECTIVITY = CODE_LIMITED_CONNECTIVITY
    INTERNAL = CODE_INTERNAL


class CNIError(Exception):
    """Base of every error the library raises on purpose.

    >>> str(CNIError("bad thing", "the detail", code=7))
    'bad thing; the detail'
    """

    default_code = CODE_INTERNAL

    def __init__(self, msg: str, details: str = "", *, code: int | None = None) -> None:
        super().__init__(msg, details)
        self.code: int = self.default_code if code is None else code
        self.msg: str = msg
        self.details: str = details

    def __str__(self) -> str:
        return f"{self.msg}; {self.details}" if self.details else self.msg

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code}, msg={self.msg!r}, details={self.details!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickling would lose the keyword-only context attributes.
        return (_restore, (type(self), self.__dict__.copy()))

    def to_dict(self) -> dict[str, Any]:
        """The error as the CNI error object ``{"cniVersion"?, "code", "msg", "details"}``."""
        out: dict[str, Any] = {"code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


def _restore(cls: type[CNIError], state: dict[str, Any]) -> CNIError:
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("msg", ""), state.get("details", ""))
    err.__dict__.update(state)
    return err


class ConfigError(CNIError):
    """A configuration (file, bytes, or value) is invalid. Code 7 unless more specific."""

    default_code = CODE_INVALID_CONFIG


class InvalidNetworkError(ConfigError):
    """Validation found several problems with one network; ``errors`` holds each of them.

    (A single problem is raised as itself, e.g. :class:`PluginNotFoundError`.)
    """

    def __init__(self, network: str, errors: Sequence[CNIError]) -> None:
        errs = list(errors)
        super().__init__(
            f"network {network!r} failed validation with {len(errs)} problems",
            "; ".join(str(e) for e in errs),
        )
        self.network = network
        self.errors: list[CNIError] = errs


class DecodeError(ConfigError):
    """Content (a result, a plugin reply) could not be decoded. Code 6."""

    default_code = CODE_DECODE


class NotFoundError(ConfigError):
    """No configuration with the wanted network name exists in ``dir``."""

    def __init__(self, dir: str, name: str, details: str = "") -> None:
        super().__init__(f'no net configuration with name "{name}" in {dir}', details)
        self.dir = dir
        self.name = name


class NoConfigsFoundError(ConfigError):
    """The directory ``dir`` holds no configuration files at all (or does not exist)."""

    def __init__(self, dir: str, details: str = "") -> None:
        super().__init__(f"no net configurations found in {dir}", details)
        self.dir = dir


class ValidationError(CNIError):
    """A container ID, network name or interface name is invalid (codes 3, 4 or 7)."""

    default_code = CODE_INVALID_ENV


class PluginNotFoundError(CNIError):
    """No executable named like the plugin type exists in any plugin directory."""

    default_code = CODE_INVALID_CONFIG

    def __init__(self, plugin: str, paths: Sequence[str], details: str = "") -> None:
        searched = ", ".join(paths) if paths else "(no plugin directories)"
        super().__init__(f'failed to find plugin "{plugin}" in path [{searched}]', details)
        self.plugin = plugin
        self.paths = list(paths)


class PluginError(CNIError):
    """A plugin failed. ``code``, ``msg`` and ``details`` are what the plugin reported.

    ``str(e)`` names the plugin and the command first, as Go's libcni does
    (the command in lower case); an error not attributed to any plugin yet
    (no ``plugin`` and no ``command``) reads like any :class:`CNIError`:

    >>> str(PluginError("no IP addresses available", "net1", plugin="bridge", command="ADD"))
    'plugin type="bridge" failed (add): no IP addresses available; net1'
    >>> str(PluginError("boom"))
    'boom'

    The context attributes say which plugin failed and how: ``plugin`` (type),
    ``command`` (ADD, DEL...), ``network``, ``container_id``, ``exit_code`` or
    ``signal`` (how the process ended, when it ended on its own) and ``stderr``
    (the tail of what it wrote to standard error).
    """

    def __init__(  # noqa: PLR0913  (the public constructor: one keyword per context attribute, a public name)
        self,
        msg: str,
        details: str = "",
        *,
        code: int | None = None,
        plugin: str = "",
        command: str = "",
        network: str = "",
        container_id: str = "",
        exit_code: int | None = None,
        signal: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(msg, details, code=code)
        self.plugin = plugin
        self.command = command
        self.network = network
        self.container_id = container_id
        self.exit_code = exit_code
        self.signal = signal
        self.stderr = stderr

    def __str__(self) -> str:
        text = super().__str__()
        if not self.plugin and not self.command:
            return text  # not attributed yet (e.g. raised by a test double's handler)
        who = f' type="{self.plugin}"' if self.plugin else ""
        what = f" ({self.command.lower()})" if self.command else ""
        return f"plugin{who} failed{what}: {text}"

    def describe(self) -> str:
        """``str(self)`` followed by the network and the container the failure concerns."""
        parts = [f"network {self.network!r}"] if self.network else []
        parts += [f"container {self.container_id!r}"] if self.container_id else []
        return f"{self} [{' '.join(parts)}]" if parts else str(self)


class PluginTimeoutError(PluginError, TimeoutError):
    """A plugin did not finish within the timeout; its process group was killed."""

    default_code = CODE_TRY_AGAIN


class VersionError(CNIError):
    """Unknown or incompatible CNI version, or an impossible result conversion. Code 1."""

    default_code = CODE_INCOMPATIBLE_VERSION


class CheckNotSupportedError(VersionError):
    """CHECK was asked of a configuration whose version is below 0.4.0."""


class CacheError(CNIError):
    """The cache directory or a cache entry cannot be read or written. Code 5."""

    default_code = CODE_IO


class LockTimeoutError(CacheError, TimeoutError):
    """A cache lock was not obtained within the operation's timeout. Code 11.

    The message names the attachment (or the network) waited for. Nothing ran:
    the operation can be retried.
    """

    default_code = CODE_TRY_AGAIN


class GCError(CNIError):
    """One garbage collection met one or more failures; ``errors`` holds all of them.

    ``str(e)`` includes ``str()`` of every failure, each naming its plugin:

    >>> e = PluginError("missing containerID", plugin="bridge", command="GC")
    >>> str(GCError([e]))
    'garbage collection failed with 1 error(s); plugin type="bridge" failed (gc): missing containerID'
    """

    def __init__(self, errors: Sequence[CNIError]) -> None:
        errs = list(errors)
        super().__init__(
            f"garbage collection failed with {len(errs)} error(s)",
            "; ".join(str(e) for e in errs),
            code=errs[0].code if len(errs) == 1 else CODE_INTERNAL,
        )
        self.errors: list[CNIError] = errs


# -- the networks of a container (libcni.manager) ----------------------------


class SetupError(CNIError):
    """``NetworkManager.setup`` failed and what it had attached was rolled back.

    ``cause`` is the first failure, ``partial`` the attachments that had
    succeeded (all of them DELeted by the rollback), ``rollback_errors`` the
    rollback DELs that failed (their cache entries stay, so that a teardown
    can retry them). The code is the cause's.
    """

    def __init__(
        self,
        container_id: str,
        cause: CNIError,
        partial: Sequence[Any] = (),
        rollback_errors: Sequence[CNIError] = (),
    ) -> None:
        errs = list(rollback_errors)
        rolled = "rolled back" if not errs else f"rollback failed for {len(errs)} network(s)"
        details = str(cause)
        if errs:
            details += " | rollback errors: " + "; ".join(str(e) for e in errs)
        super().__init__(
            f"setup of container {container_id!r} failed ({rolled})", details, code=cause.code
        )
        self.container_id = container_id
        self.cause: CNIError = cause
        self.partial: tuple[Any, ...] = tuple(partial)
        self.rollback_errors: list[CNIError] = errs


class TeardownError(CNIError):
    """One teardown met failed DELs; ``errors`` holds every one (their cache entries stay)."""

    def __init__(self, container_id: str, errors: Sequence[CNIError]) -> None:
        errs = list(errors)
        super().__init__(
            f"teardown of container {container_id!r} failed for {len(errs)} network(s)",
            "; ".join(str(e) for e in errs),
            code=errs[0].code if len(errs) == 1 else CODE_INTERNAL,
        )
        self.container_id = container_id
        self.errors: list[CNIError] = errs


class AlreadyAttachedError(CNIError):
    """Setup of a ``(network, container, ifname)`` that is still cached: tear it down first."""

    def __init__(self, network: str, container_id: str, ifname: str) -> None:
        super().__init__(
            f"container {container_id!r} is already attached to network {network!r} "
            f"as {ifname!r}; tear it down first",
        )
        self.network = network
        self.container_id = container_id
        self.ifname = ifname


class NotAttachedError(CNIError):
    """Check, attach or detach of a container with nothing cached (code 3, unknown container)."""

    default_code = CODE_UNKNOWN_CONTAINER


class NotReadyError(CNIError):
    """The manager cannot attach containers now (code 50); ``msg`` says why, ``cause`` the error."""

    default_code = CODE_NOT_AVAILABLE

    def __init__(self, msg: str, details: str = "", *, cause: CNIError | None = None) -> None:
        super().__init__(msg, details)
        self.cause: CNIError | None = cause


class NamespaceError(CNIError):
    """A network namespace could not be created, pinned, entered or removed (code 8).

    The message says which step failed and why (not root, no such process, a name taken...).
    """

    default_code = CODE_INVALID_NETNS
