"""The OCI runtime of a sandbox whose config names none: crun where the engine offers it.

crun (C) starts a container in less time and CPU than runc (Go, which re-executes itself to set
up the namespaces): on this project's machine a hardened runner/base container's start went from
85-92 to 64-74 ms, and the engine's own create+start+remove rate from 5.8-6.5 to 7.1-7.7 a second
with one client (DESIGN.md, Speed). Both realise the OCI spec the engine writes: the seccomp
profile, capabilities, no-new-privileges, masked paths, read-only root and limits (the security
and conformance tests run on it). Where crun 1.8 differed (on cgroup v1 it left /sys/fs/cgroup a
writable tmpfs; it applies no oom_score_adj of 0), hardening.py now says so for both.

A config that names a runtime (runc, runsc) gets that one. An engine that lists no crun, or whose
default is not runc (gVisor made the default on purpose), gets its own default. scripts/setup.sh
installs and registers crun, and runs one sandbox under it first.

What an engine offers is asked once per engine and process (`GET /info`, or docker-py's info(); a
client handed in: once per executor),
and the same answer serves runner/channel.py.
"""
from __future__ import annotations

import threading
from typing import Callable

PREFERRED = "crun"
RUNC = ("runc", "io.containerd.runc.v2")  # an engine's default that crun stands in for

_info: dict[str, dict] = {}  # engine key -> its `docker info`
_lock = threading.Lock()


def engine_info(key: str, fetch: Callable[[], dict]) -> dict:
    """The engine's `docker info`, fetched once per key (an engine's address) and process. A
    failed fetch raises and is not remembered."""
    with _lock:
        known = _info.get(key)
    if known is None:
        known = fetch()
        with _lock:
            _info.setdefault(key, known)
    return known


def chosen(configured: str | None, key: str, fetch: Callable[[], dict], cache: bool = True) -> str | None:
    """The runtime a container gets: `configured` when set; else what pick() makes of the engine's
    info; else None (the engine's default). An engine that cannot say gets its default.
    cache: False for an info that is not the engine at `key` (a client handed in)."""
    if configured:
        return configured
    try:
        info = engine_info(key, fetch) if cache else fetch()
    except Exception:
        return None
    return pick(info)


def pick(info: dict) -> str | None:
    """PREFERRED when the engine (its `docker info`) lists it and its own default is runc; else None.
    An engine whose default is another runtime (gVisor's runsc, say) was set up that way on
    purpose: its default stays."""
    default = info.get("DefaultRuntime") or "runc"
    if default not in RUNC:
        return None
    return PREFERRED if PREFERRED in (info.get("Runtimes") or {}) else None
