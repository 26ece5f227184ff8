"""Readiness: whether the configuration can attach containers now, and ``status``."""

from __future__ import annotations

from .. import _log as logging
from ..errors import CODE_LIMITED_CONNECTIVITY, CNIError, NotReadyError, PluginError
from ._effects import Op, call_status
from ._state import State, quoted, why
from ._values import LoadedNetworks

__all__ = ["problem", "status"]

log = logging.getLogger("libcni")


def _no_defaults(state: State, loaded: LoadedNetworks) -> NotReadyError:
    where = state.where()
    if loaded.skipped:
        skipped = "; ".join(f"{path}: {why}" for path, why in loaded.skipped.items())
        return NotReadyError(
            f"no usable network configuration {where}: fix the skipped ones", skipped
        )
    if state.settings.conf_dir is None:
        return NotReadyError(
            "no network configured: pass networks=[...] to the manager, or a conf_dir"
        )
    return NotReadyError(
        f"no network configuration found {where}: add a .conflist, .conf or .json file there"
    )


def _config_problem(state: State, loaded: LoadedNetworks) -> NotReadyError | None:
    """Why the configuration cannot attach containers now, or ``None``."""
    if not loaded.defaults:
        return _no_defaults(state, loaded)
    missing = [n for n in loaded.defaults if n not in loaded.networks]
    if missing:
        reasons = "; ".join(f"{n}: {why(loaded, n) or 'not configured'}" for n in missing)
        return NotReadyError(
            f"default network(s) {quoted(missing)} not usable {state.where()}: install "
            "their plugins or add their configuration",
            reasons,
        )
    if state.plugin_loopback:
        plugin_dirs = state.settings.plugin_dirs
        try:
            state.find("loopback", plugin_dirs)
        except CNIError as e:
            return NotReadyError(
                "the loopback plugin is not installed: put it in one of the plugin "
                f"directories ({', '.join(plugin_dirs)}) or turn loopback off",
                str(e),
            )
    return None


def problem(state: State, loaded: LoadedNetworks) -> NotReadyError | None:
    """Why the configuration cannot attach containers now (``None``: ready, remembered)."""
    if state.ready is loaded:
        return None
    found = _config_problem(state, loaded)
    if found is None:
        state.ready = loaded
    return found


def status(state: State, timeout: float | None) -> Op:
    """Ready, or :class:`NotReadyError` saying why."""
    loaded: LoadedNetworks = yield from state.current()
    found = problem(state, loaded)
    if found is not None:
        raise found
    for name in loaded.defaults:
        try:
            yield call_status(loaded.networks[name], state.timeout_or(timeout))
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
