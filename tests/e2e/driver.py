"""Run one libcni operation and report the outcome as JSON (the e2e tests' driver).

libcni runs plugins as children of the calling process, so the tests run this
script inside their throwaway "host" namespace::

    ip netns exec <host> <python> tests/e2e/driver.py < request.json

Request (stdin), one JSON object::

    {"op": "add" | "check" | "del" | "gc" | "status"
           | "cached" | "cached_config" | "attachments" | "version" | "validate",
     "api": "sync" (default, CNIConfig) | "async" (AsyncCNIConfig),
     "conflist": {...},            # the network configuration list
     "container_id": "...", "netns": "/run/netns/...", "ifname": "eth0",
     "capability_args": {...}, "args": [["K", "V"], ...],
     "valid_attachments": [{"container_id": ..., "ifname": ...}] | null,   # gc
     "cache_dir": "...", "path": ["/plugin/dir", ...],
     "plugin": "bridge"}           # version only

Reply (stdout), one JSON object::

    {"ok": true, "result": <result.to_dict()> | null | [...]}
    {"ok": false, "error": {"class", "mro", "code", "msg", "details", "plugin",
                            "command", "stderr", "errors", "traceback"}}

The exit status is 0 whenever a reply was written.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any


def describe(e: BaseException) -> dict[str, Any]:
    """An exception as JSON: its class (and bases), and the CNI error fields it has."""
    return {
        "class": type(e).__name__,
        "mro": [c.__name__ for c in type(e).__mro__],
        "code": getattr(e, "code", None),
        "msg": getattr(e, "msg", str(e)),
        "details": getattr(e, "details", ""),
        "plugin": getattr(e, "plugin", ""),
        "command": getattr(e, "command", ""),
        "stderr": getattr(e, "stderr", ""),
        "errors": [describe(x) for x in getattr(e, "errors", None) or []],
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
    }


def perform(req: dict[str, Any]) -> Any:
    import libcni

    cache_dir = req.get("cache_dir") or None
    call: Callable[..., Any]
    if req.get("api") == "async":
        acni = libcni.AsyncCNIConfig(req.get("path") or [], cache_dir=cache_dir)

        def call(method: str, *args: Any) -> Any:
            return asyncio.run(getattr(acni, method)(*args))

    else:
        cni = libcni.CNIConfig(req.get("path") or [], cache_dir=cache_dir)

        def call(method: str, *args: Any) -> Any:
            return getattr(cni, method)(*args)

    op = req["op"]
    if op == "version":
        info = call("get_version_info", req["plugin"])
        return {"cniVersion": info.cni_version, "supportedVersions": list(info.supported_versions)}
    if op == "attachments":
        return [
            {
                "container_id": a.container_id,
                "network": a.network,
                "ifname": a.ifname,
                "netns": a.netns,
                "cni_args": [list(p) for p in a.cni_args],
                "capability_args": a.capability_args,
                "complete": a.complete,
            }
            for a in call("get_cached_attachments", req.get("container_id") or "")
        ]
    net = libcni.conf_list_from_bytes(json.dumps(req["conflist"]).encode())
    if op == "gc":
        valid = req.get("valid_attachments")
        gc_args = (
            None
            if valid is None
            else libcni.GCArgs([libcni.GCAttachment(a["container_id"], a["ifname"]) for a in valid])
        )
        call("gc_network_list", net, gc_args)
        return None
    if op == "validate":
        return call("validate_network_list", net)
    if op == "status":
        call("get_status_network_list", net)
        return None
    rt = libcni.RuntimeConf(
        container_id=req.get("container_id") or "",
        netns=req.get("netns") or "",
        ifname=req.get("ifname") or "",
        args=[tuple(pair) for pair in req.get("args") or []],
        capability_args=req.get("capability_args") or {},
    )
    if op == "add":
        return call("add_network_list", net, rt).to_dict()
    if op == "check":
        call("check_network_list", net, rt)
        return None
    if op == "del":
        call("del_network_list", net, rt)
        return None
    if op == "cached":
        result = call("get_network_list_cached_result", net, rt)
        return None if result is None else result.to_dict()
    if op == "cached_config":
        cached = call("get_network_list_cached_config", net, rt)
        if cached is None:
            return None
        config, crt = cached
        return {
            "config": json.loads(config),
            "args": [list(p) for p in crt.args],
            "capability_args": crt.capability_args,
        }
    raise ValueError(f"unknown op {op!r}")


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        req = json.load(sys.stdin)
        reply: dict[str, Any] = {"ok": True, "result": perform(req)}
    except Exception as e:  # every failure, library or not, becomes a reply
        reply = {"ok": False, "error": describe(e)}
    json.dump(reply, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
